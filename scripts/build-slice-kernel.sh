#!/usr/bin/env bash
# Builds a small x86-64 kernel with rseq time-slice extension (CONFIG_RSEQ_SLICE_EXTENSION, Linux
# 7.0+), which Debian's kernels are built without, from Debian's linux-source-7.2 package (suite
# sid, fetched through scripts/debian-fetch.sh: this machine's apt sources). The config starts
# from tinyconfig and adds what scripts/run-vm.sh's initramfs VM and percpu's tests need (below).
# The build is cached: a second run with the same source package and config prints the same image
# at once.
#
# Usage: scripts/build-slice-kernel.sh [CACHE]
#   CACHE  a folder for the source package, the unpacked source and the build (default:
#          build/slice-kernel)
# Prints the path of the bzImage on its last line. Runs as root where packages are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache=${1:-$root/build/slice-kernel}
mkdir -p "$cache" && cache=$(cd "$cache" && pwd)

# --- packages: the kernel's build tools ---
need=()
for p in build-essential bc bison flex libelf-dev xz-utils cpio; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "build-slice-kernel: missing packages: ${need[*]} (run as root)" >&2; exit 1; }
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi

# --- the source: Debian's linux-source package, unpacked once per package version ---
deb=$(scripts/debian-fetch.sh "$cache/fetch" sid all linux-source-7.2 | tail -1)
version=$(basename "$deb" .deb)  # linux-source-7.2_7.2.N-M_all
src=$cache/$version/linux-source-7.2
if [ ! -f "$src/Makefile" ]; then
  echo "build-slice-kernel: unpacking $version" >&2
  rm -rf "$cache/$version" && mkdir -p "$cache/$version/pkg"
  dpkg-deb -x "$deb" "$cache/$version/pkg"
  tar -xJf "$cache/$version/pkg/usr/src/linux-source-7.2.tar.xz" -C "$cache/$version"
  rm -rf "$cache/$version/pkg"
fi

# --- the config: tinyconfig plus this fragment ---
fragment=$cache/slice.config
cat > "$fragment.new" <<'CONFIG'
# The VM: a 64-bit SMP kernel on qemu's q35 machine, console on the first serial port, an
# initramfs (gzip), ELF binaries and scripts, devtmpfs, proc, sys, tmpfs.
CONFIG_64BIT=y
CONFIG_SMP=y
CONFIG_NR_CPUS=16
CONFIG_PCI=y
CONFIG_ACPI=y
CONFIG_PRINTK=y
CONFIG_TTY=y
CONFIG_SERIAL_8250=y
CONFIG_SERIAL_8250_CONSOLE=y
CONFIG_BLK_DEV_INITRD=y
CONFIG_RD_GZIP=y
CONFIG_BINFMT_ELF=y
CONFIG_BINFMT_SCRIPT=y
CONFIG_DEVTMPFS=y
CONFIG_PROC_FS=y
CONFIG_PROC_SYSCTL=y
CONFIG_PROC_PAGE_MONITOR=y
CONFIG_SYSFS=y
CONFIG_TMPFS=y
CONFIG_SHMEM=y
# What glibc, the tests and percpu malloc call: futexes, timers, madvise, eventfd/timerfd/
# signalfd, epoll, AF_UNIX sockets, seccomp filters (percpu deny-rseq), multiple users.
CONFIG_EXPERT=y
CONFIG_MULTIUSER=y
CONFIG_FUTEX=y
CONFIG_POSIX_TIMERS=y
CONFIG_HIGH_RES_TIMERS=y
CONFIG_ADVISE_SYSCALLS=y
CONFIG_EVENTFD=y
CONFIG_TIMERFD=y
CONFIG_SIGNALFD=y
CONFIG_EPOLL=y
CONFIG_NET=y
CONFIG_UNIX=y
CONFIG_SECCOMP=y
CONFIG_SECCOMP_FILTER=y
# rseq with time-slice extension, debug mode on (strict checks of the read-only fields), and
# its statistics in debugfs (/sys/kernel/debug/rseq/stats).
CONFIG_RSEQ=y
CONFIG_RSEQ_SLICE_EXTENSION=y
CONFIG_RSEQ_DEBUG_DEFAULT_ENABLE=y
CONFIG_DEBUG_FS=y
CONFIG_RSEQ_STATS=y
CONFIG
if ! cmp -s "$fragment.new" "$fragment"; then mv "$fragment.new" "$fragment"; else rm "$fragment.new"; fi
key=$( (echo "$version"; cat "$fragment") | sha256sum | cut -c1-12)
out=$cache/out-$key
image=$out/arch/x86/boot/bzImage
if [ -f "$image" ] && [ -f "$out/.built" ]; then
  echo "build-slice-kernel: cached ($out)" >&2
  echo "$image"
  exit 0
fi

rm -rf "$out" && mkdir -p "$out"
start=$(date +%s)
make -C "$src" O="$out" tinyconfig >/dev/null
"$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "$fragment" >/dev/null
make -C "$src" O="$out" olddefconfig >/dev/null
# Every option of the fragment must have survived olddefconfig (a dependency it lacks drops it
# silently).
missing=$(grep '^CONFIG_' "$fragment" | while read -r line; do grep -qx "$line" "$out/.config" || echo "$line"; done)
if [ -n "$missing" ]; then
  echo "build-slice-kernel: the config lost: $missing" >&2
  exit 1
fi
make -C "$src" O="$out" -j"$(nproc)" bzImage >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log" >&2; echo "build-slice-kernel: the build FAILED ($out/build.log)" >&2; exit 1; }
touch "$out/.built"
echo "build-slice-kernel: built $(make -s -C "$src" O="$out" kernelrelease 2>/dev/null) in $(($(date +%s) - start)) s on $(nproc) CPUs" >&2
echo "$image"
