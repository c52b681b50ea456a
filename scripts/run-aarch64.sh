#!/usr/bin/env bash
# aarch64: cross-builds percpu (g++-aarch64-linux-gnu), boots Debian's arm64 kernel under
# qemu-system-aarch64 (software emulation) with an initramfs holding the test binaries, runs the
# test suite there with glibc's rseq area and with percpu's own, and the short stress run (delay
# injection, aborts required), then reads the results back from the serial console. Last, runs
# the suite under qemu-aarch64 (user-mode emulation, no rseq system call: fallback mode).
#
# Usage: scripts/run-aarch64.sh [--suite SUITE] [--full] [--vm-only|--user-only] [--vm-command 'CMD']
# (default: bookworm's kernel (6.1: rseq without node_id and mm_cid), the short form, the filters
# below, both passes; --suite boots another Debian suite's arm64 kernel, sid for the newest,
# fetched by scripts/debian-fetch.sh; --full runs every test, which takes much longer under
# emulation; --vm-command runs CMD in the VM instead of the steps, for investigations: $b and $s
# name the two build trees there, and the VM pass then reports only whether CMD exited 0). Runs
# as root (apt-get, dpkg).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/test-layers.sh

suite=bookworm full=0 vm_pass=1 user_pass=1 vm_command=
usage="usage: $0 [--suite SUITE] [--full] [--vm-only|--user-only] [--vm-command 'CMD']"
while [ $# -gt 0 ]; do
  case $1 in
    --suite) [ $# -ge 2 ] && [ -n "$2" ] || { echo "$usage" >&2; exit 2; }; suite=$2; shift ;;
    --full) full=1 ;;
    --vm-only) user_pass=0 ;;
    --user-only) vm_pass=0 ;;
    --vm-command) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; vm_command=$2; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
[ $vm_pass -eq 1 ] || [ $user_pass -eq 1 ] || { echo "$0: --vm-only and --user-only exclude each other" >&2; exit 2; }
# The VM's short form leaves out the long concurrency and malloc workload tests (minutes each
# on the emulated kernel). User mode runs them (it is faster), but never what cannot run there:
# tests that start an arm64 program from an emulated one (the command's tests, which run
# `percpu deny-rseq -- percpu`, the malloc death tests, whose threadsafe style re-executes the
# test binary, and the malloc tests that run programs with and without the preload; the C
# programs that unload the plugin, the stopped-threads tests that run a program (preloaded, or
# under valgrind); the sysfs-view and cpuset tests, which start index_space_check and the
# command; without binfmt_misc the host kernel cannot start them), the ptrace tests (qemu-user
# has no ptrace), and PoolLimits, which reserves 32 TiB of address space: qemu-user keeps state
# for every page of a guest mapping, and the machine runs out of memory. The VM's short form
# leaves out the breakpoint test too (about 150 x 1000 ptrace stops: far longer under emulation),
# and the stress under a one-CPU sysfs view (its malloc rows took 6 minutes there, against 30 s
# without the view; the x86-64 runs take 0.4 s either way), and the run of `percpu bench ops`
# (timing under emulation measures nothing; its x86-64 run checks that it completes), and the
# stopped-threads fork tests (hundreds of forks; the fork handlers are the same C++ on both
# architectures, and user mode runs the one that needs no second program). User mode leaves out
# the fork test whose other threads start threads while it forks: qemu-user's own state breaks in
# such a child (qemu asserts `cpu == current_cpu` and in qemu_plugin_vcpu_init_hook; the child
# hangs or dies, on every run), which says nothing about percpu; x86-64 runs it, and the VM with
# --full.
user_filter='-MallocAllocatorDeathTest.*:MallocCentralDeathTest.*:MallocLarge.*:MallocGlibcApi.*:Cli.*:PoolLimits.*:IndexSpace.*View*:IndexSpace.*Sysfs*:IndexSpace.*Startup*:RemoteDrain.Stress*:Debugger.*:ProcessEvents.CPrograms*:StoppedThreads.ChildrenForkedDuringMalloc*:StoppedThreads.ChildrenForkedWhileSizeClasses*:StoppedThreads.AForkLeavesTheState*:StoppedThreads.ChildrenForkedWhileThreadsRead*:StoppedThreads.Cancelling*:StoppedThreads.AWorkerPool*:StoppedThreads.MallocsBackground*'
# The debugger tests too: the single-step test steps through every section (thousands of ptrace
# stops, each far slower under emulation), the longest test of the VM's passes; --full (and the
# matrix's aarch64 rows) run them.
vm_filter='-*Concurrency*:*MallocPreload*:*Churn*:Debugger.*:IndexSpace.StressUnder*:Cli.BenchOps*:StoppedThreads.ChildrenForked*'
# The pass with percpu's own area runs the layers that it changes (test-layers.sh's mode_layers,
# as run-glibc.sh's fallback pass does); above them the glibc-area pass runs the same code.
vm_own_filter="$mode_layers$vm_filter"
# User mode's short form runs those layers too, and the topology's, less what cannot run there:
# the structures above them run in fallback mode the same C++ that x86-64's fallback pass runs,
# and qemu-user executes it in the host's memory order, so it would find nothing of arm64's own.
# It leaves out, too, the tests that fork while other threads run: qemu-user's fork() does not
# hold its own locks across the call, and a child can stay blocked in one, deaf to its alarm
# (seen in FallbackSwitch.* or PoolFork.*). That says nothing about percpu: x86-64's fallback
# pass and the VM run them, and so does --full, where a hang is retried (below). FallbackSwitch
# (in --full only) has nothing to switch here anyway: the process starts in fallback mode.
user_fork_filter=':FallbackSwitch.*:PoolFork.ChildAllocatesWhileParentThreads*:ProcessEvents.ForkWhileOtherThreads*:StoppedThreads.ChildrenForkedWhileThreadsAreInside*'
user_timeout=900
[ $full -eq 1 ] || { user_filter="$mode_layers:MachineTopology.*$user_filter$user_fork_filter"; user_timeout=300; }
[ $full -eq 1 ] && vm_filter='*' && vm_own_filter='*'

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

# Debian's arm64 kernel of the suite (unpacked, not installed) and busybox (downloaded), through
# a private apt state (scripts/debian-kernel.sh, debian-fetch.sh); first, so that a suite the
# archive lacks fails before the builds.
vm=$root/build/aarch64-vm
kernel=$(scripts/debian-kernel.sh "$vm/cache" "$suite" arm64 arm64 "$vm/kernel")
kernel_deb=$(sed -n 1p <<< "$kernel") vmlinuz=$(sed -n 2p <<< "$kernel")
busybox_deb=$(scripts/debian-fetch.sh "$vm/cache" bookworm arm64 busybox-static | tail -1)

# One command a line: under set -e, a failure inside an && list would not stop the script.
cmake --preset aarch64 >/dev/null
cmake --build --preset aarch64
cmake --preset aarch64-stress >/dev/null
cmake --build --preset aarch64-stress --target percpu_cli percpu_malloc  # what the VM's stress runs

# --- busybox, unpacked ---
rm -rf "$vm/busybox" && mkdir -p "$vm/busybox"
dpkg-deb -x "$busybox_deb" "$vm/busybox"

# --- the initramfs: busybox, the arm64 loader and libraries, the build trees at their paths ---
stage=$vm/initramfs
rm -rf "$stage" && mkdir -p "$stage"/{bin,proc,sys,dev,tmp,lib/aarch64-linux-gnu}
cp "$vm/busybox/bin/busybox" "$stage/bin/"
cp scripts/vm-steps.sh "$stage/bin/"
for tool in sh mount poweroff echo cat grep mkdir sleep date env; do ln -s busybox "$stage/bin/$tool"; done
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
  $b/tests/index_space_check \
  $b/tests/*.so $b/tests/link_check_* $b/tests/malloc_threads_program $b/tests/registration_race_check \
  $b/tests/malloc_large_program $b/tests/malloc_glibc_api_program $b/tests/exit_pool_program \
  $b/tests/unload_c_main $b/tests/unload_c_main_linked $b/tests/percpu_c_tests \
  $s/libpercpu.so.0 $s/libpercpu_malloc.so $s/tools/percpu/percpu
# step and shards (the test steps' tests in two processes side by side): scripts/vm-steps.sh.
c_api_tests="env PERCPU_EXPECT=glibc $b/tests/percpu_c_tests && env GLIBC_TUNABLES=glibc.pthread.rseq=0 PERCPU_EXPECT=percpu $b/tests/percpu_c_tests"
steps="
. /bin/vm-steps.sh
$b/tools/percpu/percpu info
step 'glibc-area tests' shards 2 env PERCPU_EXPECT=glibc $b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$vm_filter'
step 'percpu-area tests' shards 2 env GLIBC_TUNABLES=glibc.pthread.rseq=0 PERCPU_EXPECT=percpu $b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$vm_own_filter'
step 'C API tests' sh -c '$c_api_tests'
step stress /bin/stress.sh $s/tools/percpu/percpu"
[ -n "$vm_command" ] && steps="b=$b s=$s; $vm_command
echo \"PERCPU-VM: command exit \$?\""
# The VM's stress run. --require-aborts fails a run that saw no abort (it did not test the abort
# paths); on a heavily loaded host an emulated run can end that way with nothing lost. Only then
# the stress runs once more, and its result counts.
cat > "$stage/bin/stress.sh" <<'STRESS'
#!/bin/sh
out=$("$1" stress --short --inject-loops 400 --require-aborts --timeout 600 2>&1)
rc=$?
echo "$out"
failed=$(echo "$out" | grep -c "FAILED:")
abortless=$(echo "$out" | grep -c "FAILED: no critical section was aborted")
if [ $rc -ne 0 ] && [ "$failed" -gt 0 ] && [ "$failed" -eq "$abortless" ]; then
  echo "PERCPU-VM: only runs without an abort failed (nothing lost or duplicated): once more"
  "$1" stress --short --inject-loops 400 --require-aborts --timeout 600
  rc=$?
fi
exit $rc
STRESS
chmod +x "$stage/bin/stress.sh"
cat > "$stage/init" <<INIT
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
# No tmpfs on /tmp: the initramfs is writable already, and a build tree under /tmp (a clone
# there) would be hidden by it.
cd /tmp
echo "PERCPU-VM: kernel \$(cat /proc/sys/kernel/osrelease), \$(grep -c ^processor /proc/cpuinfo) CPUs"
$steps
poweroff -f
INIT
chmod +x "$stage/init"
(cd "$stage" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > "$vm/initramfs.gz")
echo "initramfs: $(du -h "$vm/initramfs.gz" | cut -f1); booting $(basename "$kernel_deb") under qemu-system-aarch64"

status=0
log=$vm/console.log
if [ $vm_pass -eq 1 ]; then
timeout 3000 qemu-system-aarch64 -M virt -cpu max -smp 2 -m 2048 -accel tcg,thread=multi \
  -nographic -nic none -no-reboot -kernel "$vmlinuz" -initrd "$vm/initramfs.gz" \
  -append "console=ttyAMA0 quiet panic=-1" | tee "$log" || true

if [ -n "$vm_command" ]; then
  grep -q "PERCPU-VM: command exit 0" "$log" || { echo "aarch64 VM: the command FAILED (see $log)"; status=1; }
else
  for step in "glibc-area tests" "percpu-area tests" "C API tests" "stress"; do
    grep -q "PERCPU-VM: $step exit 0" "$log" || { echo "aarch64 VM: $step FAILED (see $log)"; status=1; }
  done
  grep -q 'area registered by glibc' "$log" || { echo "aarch64 VM: percpu info did not show glibc's registration"; status=1; }
fi
fi

if [ $user_pass -eq 1 ]; then
echo
echo "=== qemu-aarch64 user-mode emulation: no rseq system call, fallback mode ==="
# -L /: the multiarch arm64 runtime (libc6:arm64, whose ld.so matches its libc.so.6; see
# cmake/aarch64-linux-gnu.cmake).
info=$(PERCPU_EXPECT=fallback qemu-aarch64 -L / $b/tools/percpu/percpu info 2>&1) || true
echo "$info" | grep -E "^mode|why" || true
echo "$info" | grep -qE "^mode +fallback" && echo "$info" | grep -q "not implemented here (ENOSYS)" ||
  { echo "aarch64 user mode: percpu info did not report fallback mode and why"; status=1; }
# qemu-user can hang in a fork() from a process whose other threads run (above): a run that
# times out (several times as long as a run takes) runs once more, and its result counts.
user_tests() {
  PERCPU_EXPECT=fallback timeout -k 10 $user_timeout qemu-aarch64 -L / $b/tests/percpu_tests \
    --gtest_brief=1 --gtest_filter="$user_filter"
}
user_tests || {
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "aarch64 user mode: the suite hung (timeout after $user_timeout s); running it once more"
    pkill -9 -f "qemu-aarch64 -L / $b/tests/percpu_tests" || true  # the stuck forked child
    user_tests || { echo "aarch64 user mode: tests FAILED"; status=1; }
  else
    echo "aarch64 user mode: tests FAILED"; status=1
  fi
}
PERCPU_EXPECT=fallback timeout 600 qemu-aarch64 -L / $b/tests/percpu_c_tests ||
  { echo "aarch64 user mode: C API tests FAILED"; status=1; }
PERCPU_EXPECT=fallback timeout 1800 qemu-aarch64 -L / $b/tools/percpu/percpu \
  stress --short || { echo "aarch64 user mode: stress FAILED"; status=1; }
fi

[ $status -eq 0 ] && echo "aarch64: all passes succeeded" || echo "aarch64: a pass FAILED"
exit $status
