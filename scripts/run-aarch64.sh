#!/usr/bin/env bash
# aarch64: cross-builds percpu (g++-aarch64-linux-gnu), boots Debian's arm64 kernel under
# qemu-system-aarch64 (software emulation) with an initramfs holding the test binaries, runs the
# test suite there with glibc's rseq area and with percpu's own, and the short stress run (delay
# injection, aborts required), then reads the results back from the serial console. Last, runs
# the suite under qemu-aarch64 (user-mode emulation, no rseq system call: fallback mode).
#
# Usage: scripts/run-aarch64.sh [--full] [--vm-only|--user-only]   (default: the short form, the
# filters below, both passes; --full runs every test, which takes much longer under emulation).
# Runs as root (apt-get, dpkg).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

full=0 vm_pass=1 user_pass=1
for arg in "$@"; do
  case $arg in
    --full) full=1 ;;
    --vm-only) user_pass=0 ;;
    --user-only) vm_pass=0 ;;
    *) echo "usage: $0 [--full] [--vm-only|--user-only]" >&2; exit 2 ;;
  esac
done
# The short form leaves out the long concurrency and malloc workload tests (minutes each under
# emulation) and, in user mode, what needs to exec aarch64 programs (death tests, the command).
vm_filter='-*Concurrency*:*MallocPreload*:*Churn*'
user_filter='-*Concurrency*:*DeathTest*:Cli.*:*MallocPreload*:*Churn*:RegistrationRace*:*Fork*'
[ $full -eq 1 ] && vm_filter='*' && user_filter='-*DeathTest*:Cli.*'

# --- packages: the cross compiler, qemu, and the arm64 builds of the libraries we link ---
if [ "$(id -u)" -eq 0 ]; then
  dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64; apt-get update; }
  scripts/install-deps.sh
  need=()
  for p in g++-aarch64-linux-gnu qemu-user qemu-system-arm cpio libgtest-dev:arm64 \
      libgmock-dev:arm64 libbenchmark-dev:arm64 libfmt-dev:arm64 libseccomp-dev:arm64; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
  fi
fi

cmake --preset aarch64 >/dev/null && cmake --build --preset aarch64
cmake --preset aarch64-stress >/dev/null && cmake --build --preset aarch64-stress

# --- Debian's arm64 kernel and busybox, unpacked from their packages (not installed) ---
vm=$root/build/aarch64-vm
mkdir -p "$vm/debs"
kernel_pkg=$(apt-cache depends linux-image-arm64:arm64 | awk '/Depends: linux-image-/{print $2; exit}')
kernel_pkg=${kernel_pkg%:arm64}
(cd "$vm/debs" && { ls ${kernel_pkg}_*.deb >/dev/null 2>&1 || apt-get download "$kernel_pkg:arm64"; } &&
  { ls busybox-static_*.deb >/dev/null 2>&1 || apt-get download busybox-static:arm64; }) 2>&1 |
  grep -v "unsandboxed" || true
rm -rf "$vm/kernel" "$vm/busybox" && mkdir -p "$vm/kernel" "$vm/busybox"
dpkg-deb -x "$vm"/debs/${kernel_pkg}_*.deb "$vm/kernel"
dpkg-deb -x "$vm"/debs/busybox-static_*.deb "$vm/busybox"
vmlinuz=$(ls "$vm"/kernel/boot/vmlinuz-*)

# --- the initramfs: busybox, the arm64 loader and libraries, the build trees at their paths ---
stage=$vm/initramfs
rm -rf "$stage" && mkdir -p "$stage"/{bin,proc,sys,dev,tmp,lib/aarch64-linux-gnu}
cp "$vm/busybox/bin/busybox" "$stage/bin/"
for tool in sh mount poweroff echo cat grep mkdir sleep; do ln -s busybox "$stage/bin/$tool"; done
cp -L /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 "$stage/lib/"
for lib in libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1; do
  cp -L "/usr/aarch64-linux-gnu/lib/$lib" "$stage/lib/aarch64-linux-gnu/"
done
for lib in libfmt.so.9 libbenchmark.so.1debian libseccomp.so.2; do
  cp -L "/usr/lib/aarch64-linux-gnu/$lib" "$stage/lib/aarch64-linux-gnu/"
done
copy_build() {  # copies build files (stripped) to the same absolute path inside the initramfs
  for f in "$@"; do
    mkdir -p "$stage$(dirname "$f")"
    aarch64-linux-gnu-strip -o "$stage$f" "$f" 2>/dev/null || cp -L "$f" "$stage$f"
  done
}
b=$root/build/aarch64
s=$root/build/aarch64-stress
copy_build $b/libpercpu.so.0 $b/libpercpu.so.0.1.0 $b/libpercpu_malloc.so $b/libpercpu_register.so \
  $b/tools/percpu/percpu $b/tools/percpu/percpu-malloc-workload $b/tests/percpu_tests \
  $b/tests/*.so $b/tests/link_check_* $b/tests/malloc_threads_program $b/tests/registration_race_check \
  $s/libpercpu.so.0 $s/libpercpu_malloc.so $s/tools/percpu/percpu
cat > "$stage/init" <<INIT
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
cd /tmp
echo "PERCPU-VM: kernel \$(cat /proc/sys/kernel/osrelease), \$(grep -c ^processor /proc/cpuinfo) CPUs"
$b/tools/percpu/percpu info
PERCPU_EXPECT=glibc $b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$vm_filter'
echo "PERCPU-VM: glibc-area tests exit \$?"
GLIBC_TUNABLES=glibc.pthread.rseq=0 PERCPU_EXPECT=percpu $b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$vm_filter'
echo "PERCPU-VM: percpu-area tests exit \$?"
$s/tools/percpu/percpu stress --short --inject-loops 400 --require-aborts --timeout 600
echo "PERCPU-VM: stress exit \$?"
poweroff -f
INIT
chmod +x "$stage/init"
(cd "$stage" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > "$vm/initramfs.gz")
echo "initramfs: $(du -h "$vm/initramfs.gz" | cut -f1); booting $(basename "$vmlinuz") under qemu-system-aarch64"

status=0
log=$vm/console.log
if [ $vm_pass -eq 1 ]; then
timeout 3000 qemu-system-aarch64 -M virt -cpu max -smp 2 -m 2048 -accel tcg,thread=multi \
  -nographic -nic none -no-reboot -kernel "$vmlinuz" -initrd "$vm/initramfs.gz" \
  -append "console=ttyAMA0 quiet panic=-1" | tee "$log" || true

for step in "glibc-area tests" "percpu-area tests" "stress"; do
  grep -q "PERCPU-VM: $step exit 0" "$log" || { echo "aarch64 VM: $step FAILED (see $log)"; status=1; }
done
grep -q 'area registered by glibc' "$log" || { echo "aarch64 VM: percpu info did not show glibc's registration"; status=1; }
fi

if [ $user_pass -eq 1 ]; then
echo
echo "=== qemu-aarch64 user-mode emulation: no rseq system call, fallback mode ==="
PERCPU_EXPECT=fallback qemu-aarch64 -L /usr/aarch64-linux-gnu $b/tools/percpu/percpu info | grep -E "^mode|fallback" || true
PERCPU_EXPECT=fallback timeout 1800 qemu-aarch64 -L /usr/aarch64-linux-gnu $b/tests/percpu_tests \
  --gtest_brief=1 --gtest_filter="$user_filter" || { echo "aarch64 user mode: tests FAILED"; status=1; }
PERCPU_EXPECT=fallback timeout 1800 qemu-aarch64 -L /usr/aarch64-linux-gnu $b/tools/percpu/percpu \
  stress --short --no-fork || { echo "aarch64 user mode: stress FAILED"; status=1; }
fi

[ $status -eq 0 ] && echo "aarch64: all passes succeeded" || echo "aarch64: a pass FAILED"
exit $status
