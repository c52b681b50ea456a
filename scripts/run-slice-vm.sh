#!/usr/bin/env bash
# Time-slice extension on a kernel that has it: builds (or reuses) the small Linux 7.2 kernel of
# scripts/build-slice-kernel.sh, boots it under qemu with 2 CPUs (scripts/run-vm.sh --layout
# small) and runs there:
#   1. `percpu info` with glibc's area (glibc 2.36 registers it in the legacy 32-byte mode, so
#      the extension is not available to it) and with percpu's own (registered with the kernel's
#      feature size: available);
#   2. the slice tests requiring it off with glibc's area and on with percpu's own
#      (PERCPU_EXPECT_SLICE), the latter with the mode-dependent tests too, under the kernel's
#      rseq debug mode (strict checks of the fields user space must not write);
#   3. the same slice tests and `percpu info` under sid's glibc (2.43, unpacked, through its
#      loader), which registers its area with the kernel's feature size: required on there;
#   4. `percpu bench slice --quick` with percpu's own area, and the kernel's rseq statistics.
# With --bench-only, only the benchmark's thorough form (5 repetitions of 2 s per configuration).
# Prints the console log; fails when a step fails. Runs as root (packages, the VM's initramfs).
#
# Usage: scripts/run-slice-vm.sh [--bench-only]
set -euo pipefail
cd "$(dirname "$0")/.."
bench_only=0
case ${1:-} in
  --bench-only) bench_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--bench-only]" >&2; exit 2 ;;
esac

image=$(scripts/build-slice-kernel.sh | tail -1)
# sid's glibc, unpacked (not installed), as scripts/run-glibc.sh does.
deb=$(scripts/debian-fetch.sh build/vm/cache sid amd64 libc6 | tail -1)
glibc=$PWD/build/glibc/sid-slice
rm -rf "$glibc" && mkdir -p "$glibc" && dpkg-deb -x "$deb" "$glibc"
loader=$glibc/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
libs=$glibc/usr/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu
own='GLIBC_TUNABLES=glibc.pthread.rseq=0'
tests='Slice*'
mode_tests='Slice*:Registration.*:GetcpuCache.*:Ops*:Aborts.*:Sections.*:Counter*:Freelist*:Buffer*:Spinlock*:Pool/*:CurrentOps*:-*Concurrency*:*Churn*'
if [ $bench_only -eq 1 ]; then
  steps="rc=0
$own \$b/tools/percpu/percpu bench slice || rc=1"
else
  steps="rc=0
\$b/tools/percpu/percpu info | grep -E '^(kernel|area|slice)'
$own \$b/tools/percpu/percpu info | grep -E '^(kernel|area|slice)'
PERCPU_EXPECT=glibc PERCPU_EXPECT_SLICE=off \$b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$tests' || rc=1
echo \"PERCPU-VM: glibc-area slice tests done, rc \$rc\"
$loader --library-path $libs \$b/tools/percpu/percpu info | grep -E '^(libc|area|slice)'
PERCPU_EXPECT=glibc PERCPU_EXPECT_SLICE=on $loader --library-path $libs \$b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$tests' || rc=1
echo \"PERCPU-VM: sid-glibc-area slice tests done, rc \$rc\"
$own PERCPU_EXPECT=percpu PERCPU_EXPECT_SLICE=on \$b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$mode_tests' || rc=1
echo \"PERCPU-VM: percpu-area tests done, rc \$rc\"
$own \$b/tools/percpu/percpu bench slice --quick || rc=1"
fi
steps="$steps
mount -t debugfs none /sys/kernel/debug 2>/dev/null && cat /sys/kernel/debug/rseq/stats 2>/dev/null
(exit \$rc)"
scripts/run-vm.sh --kernel "$image" --layout small --include "$glibc" --command "$steps"
