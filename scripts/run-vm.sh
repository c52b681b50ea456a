#!/usr/bin/env bash
# x86-64 kernels (scripts/run-matrix.sh runs them all): boots a Debian kernel of a chosen suite
# under qemu-system-x86_64 (TCG software emulation; no KVM needed) with a chosen CPU and NUMA
# layout, an initramfs holding this machine's release and stress builds, and runs there:
# `percpu info` (checked against the layout), the test suite with glibc's rseq area, with
# percpu's own, and in fallback mode (rseq denied by seccomp), and the short stress with delay
# injection with glibc's area and in fallback mode (--full: with percpu's own too). The hot-plug layout also takes a CPU offline (a hole in the numbering) and
# hot-adds one through qemu's monitor while the stress runs. Results come back over the serial
# console.
#
# Usage: scripts/run-vm.sh [--suite bullseye|bookworm|trixie|sid] [--layout numa|hotplug|small]
#                          [--full] [--kernel IMAGE] [--include DIR]... [--command 'CMD']
#   --suite    the Debian suite whose cloud-amd64 kernel boots (default: sid, the newest, for
#              the numa layout; bookworm for the hotplug layout, see below). bullseye's 5.10,
#              the oldest, has rseq and membarrier's RSEQ fence (new in 5.10) but no
#              AT_RSEQ_FEATURE_SIZE, so no node_id and no mm_cid (as 6.1); its cloud kernel
#              has NUMA, so the numa layout fits it too
#   --kernel   boots this kernel image instead of a Debian one (scripts/build-slice-kernel.sh's)
#   --include  copies this folder into the initramfs at its own path (an unpacked glibc, say)
#   --layout   numa: 8 CPUs in 2 NUMA nodes (default); hotplug: 6 of 16 possible CPUs online in
#              2 nodes, CPU 3 taken offline, a CPU hot-added during the stress, and a second
#              stress pinned to it and CPU 0. Trixie's 6.12 and sid's 7.2 kernels do not count
#              the absent CPUs of this machine's qemu (7.2) as possible (its ACPI table lacks
#              the online-capable flag), so the hotplug layout needs bookworm's 6.1 here;
#              small: 2 CPUs, one node, 2 GiB (a kernel without NUMA, as a --kernel one)
#   --full     every test (default: the short form, filters below)
#   --command  runs CMD in the VM instead of the steps ($b, $s: the two build trees)
# Kernels come from Debian's archive through scripts/debian-fetch.sh (this machine's apt
# sources, a private apt state), cached in build/vm/cache. Runs as root (apt-get, dpkg).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/test-layers.sh

suite= layout=numa full=0 command= image= includes=()
usage="usage: $0 [--suite SUITE] [--layout numa|hotplug|small] [--full] [--kernel IMAGE] [--include DIR]... [--command 'CMD']"
while [ $# -gt 0 ]; do
  case $1 in
    --suite) [ $# -ge 2 ] && [ -n "$2" ] || { echo "$usage" >&2; exit 2; }; suite=$2; shift ;;
    --layout) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; layout=$2; shift ;;
    --full) full=1 ;;
    --command) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; command=$2; shift ;;
    --include) [ $# -ge 2 ] && [ -d "$2" ] || { echo "$usage (--include: a folder)" >&2; exit 2; }
      includes+=("$(cd "$2" && pwd)"); shift ;;
    --kernel) [ $# -ge 2 ] && [ -f "$2" ] || { echo "$usage (--kernel: an image file)" >&2; exit 2; }
      image=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
case $layout in numa|hotplug|small) ;; *) echo "$usage" >&2; exit 2 ;; esac
if [ -z "$suite" ]; then [ "$layout" = numa ] && suite=sid || suite=bookworm; fi

# The short form leaves out what takes minutes each under emulation (as run-aarch64.sh): the
# long concurrency, churn and preload tests, the breakpoint and single-step tests, the stress
# under a one-CPU sysfs view, and `percpu bench ops`, whose timing means nothing here. The
# percpu-area and fallback passes run the layers that meet the area (test-layers.sh) with the
# switch to fallback mode, and what meets this machine's layout: its topology, the index spaces
# sized by the possible CPUs and the structures indexed by them.
vm_filter='-*Concurrency*:*MallocPreload*:*Churn*:Debugger.*:IndexSpace.StressUnder*:Cli.BenchOps*'
mode_filter="$area_layers:FallbackSwitch.*:MachineTopology.*:IndexSpace.*:Freelist*:Buffer*:MemcpyBuffer*:Spinlock*:Pool/*$vm_filter"
[ $full -eq 1 ] && vm_filter='*' && mode_filter='*'

# --- packages: qemu, cpio, busybox ---
if [ "$(id -u)" -eq 0 ]; then
  scripts/install-deps.sh
  need=()
  for p in qemu-system-x86 cpio busybox-static socat; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
  fi
fi

# --- the kernel: the suite's cloud-amd64 image, unpacked (not installed); first, so that a
# suite the archive lacks fails before the builds ---
cache=$root/build/vm/cache
if [ -n "$image" ]; then
  vm=$root/build/vm/custom-$layout
  mkdir -p "$vm"
  deb=$image vmlinuz=$image
else
  vm=$root/build/vm/$suite-$layout
  kernel=$(scripts/debian-kernel.sh "$cache" "$suite" amd64 cloud-amd64 "$vm/kernel")
  deb=$(sed -n 1p <<< "$kernel") vmlinuz=$(sed -n 2p <<< "$kernel")
fi

# --- the build trees ---
cmake --preset release >/dev/null
cmake --build --preset release
cmake --preset stress >/dev/null
cmake --build --preset stress --target percpu_cli percpu_malloc  # what the VM's stress runs

# --- the initramfs: busybox, this machine's loader and the libraries the binaries need, the
# build trees at their own paths (stripped) ---
b=$root/build/release
s=$root/build/stress
stage=$vm/initramfs
rm -rf "$stage" && mkdir -p "$stage"/{bin,proc,sys,dev,tmp}
cp /bin/busybox "$stage/bin/"
cp scripts/vm-steps.sh "$stage/bin/"
binaries=$(find "$b" "$s" -path '*/CMakeFiles' -prune -o -path '*/_deps' -prune -o -type f \
  \( -perm -u+x -o -name '*.so*' \) -print | grep -v '\.sh$')
for f in $binaries; do
  mkdir -p "$stage$(dirname "$f")"
  strip -o "$stage$f" "$f" 2>/dev/null || cp -P "$f" "$stage$f"
done
for f in $(find "$b" "$s" -maxdepth 1 -type l -name '*.so*'); do cp -P "$f" "$stage$f"; done
# Every library the binaries load (ldd), and the loader (/lib64/ld-linux-x86-64.so.2), at their
# paths.
for lib in $(for f in $binaries; do ldd "$f" 2>/dev/null; done | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }' | sort -u); do
  mkdir -p "$stage$(dirname "$lib")"
  cp -L "$lib" "$stage$lib"
done

for d in ${includes[@]+"${includes[@]}"}; do
  mkdir -p "$stage$d" && cp -a "$d/." "$stage$d/"
done

cli=$b/tools/percpu/percpu
if [ -n "$command" ]; then
  steps="b=$b s=$s; $command
echo \"PERCPU-VM: command exit \$?\""
else
  # The stress with percpu's own area in --full only: the structures reach the area through the
  # one offset registration sets, whoever owns it, and the percpu-area tests run the layers the
  # owner changes; fallback mode swaps the sections' commit, so its stress runs in the short form.
  stress_modes=(glibc fallback)
  [ $full -eq 0 ] || stress_modes=(glibc percpu fallback)
  stress_steps=() stress_lines=
  for mode in "${stress_modes[@]}"; do
    case $mode in
      glibc) name=stress args="glibc $layout" ;;
      percpu) name='percpu-area stress' args=percpu ;;
      fallback) name='fallback stress' args=fallback ;;
    esac
    stress_steps+=("$name")
    stress_lines+="
step '$name' /bin/stress.sh $s/tools/percpu/percpu $args"
  done
  # step and shards (the test steps' tests in two processes side by side): scripts/vm-steps.sh.
  steps="
. /bin/vm-steps.sh
$cli info
step 'glibc-area tests' shards 2 env PERCPU_EXPECT=glibc $b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$vm_filter'
step 'percpu-area tests' shards 2 env GLIBC_TUNABLES=glibc.pthread.rseq=0 PERCPU_EXPECT=percpu $b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$mode_filter'
step 'fallback tests' shards 2 env PERCPU_EXPECT=fallback $cli deny-rseq --errno ENOSYS -- $b/tests/percpu_tests --gtest_brief=1 --gtest_filter='$mode_filter'$stress_lines"
fi

# The stress: stress.sh CLI MODE [LAYOUT], MODE glibc (glibc's area), percpu (its own) or
# fallback (rseq denied). In the hot-plug layout the glibc-area stress runs in the background:
# the init takes CPU 3 offline first (a hole), says so on the console, the host hot-adds a CPU,
# and the init brings it online and runs `percpu info` and a second stress pinned to it and
# CPU 0 while the first goes on. --require-aborts fails a run in rseq mode that saw no abort; on
# a loaded host an emulated run can end that way with nothing lost, and only then those
# structures run again.
cat > "$stage/bin/stress.sh" <<'STRESS'
#!/bin/sh
cli=$1 mode=$2 layout=$3
# The stress command in the mode's setting: glibc's area, percpu's own, or rseq denied.
stress() {
  case $mode in
    glibc) "$cli" stress "$@" ;;
    percpu) GLIBC_TUNABLES=glibc.pthread.rseq=0 "$cli" stress "$@" ;;
    fallback) "$cli" deny-rseq --errno ENOSYS -- "$cli" stress "$@" ;;
  esac
}
run() { stress --short --inject-loops 400 --require-aborts --timeout 900 > /tmp/stress.out 2>&1; }
if [ "$layout" = hotplug ]; then
  before=$(ls -d /sys/devices/system/cpu/cpu[0-9]* | wc -l)
  run & pid=$!
  sleep 5
  echo "PERCPU-VM: hot-add a CPU now"
  for i in $(seq 1 120); do
    [ "$(ls -d /sys/devices/system/cpu/cpu[0-9]* | wc -l)" -gt "$before" ] && break
    sleep 1
  done
  new=""
  for c in /sys/devices/system/cpu/cpu[0-9]*; do
    [ -e "$c/online" ] && [ "$(cat "$c/online")" = 0 ] && [ "${c##*/cpu}" != 3 ] && new=${c##*/cpu}
  done
  if [ -n "$new" ] && echo 1 > "/sys/devices/system/cpu/cpu$new/online"; then
    echo "PERCPU-VM: hot-added CPU $new online: $(cat /sys/devices/system/cpu/online)"
    taskset -c "$new" "$cli" info | grep -E "^(current|online|possible|index)"
    # The new CPU's slots in use: the structures on it and on CPU 0 only, while the first
    # stress still runs everywhere.
    taskset -c "0,$new" "$cli" stress --short --structure counter,freelist,pool \
      --inject-loops 400 --timeout 900 > /tmp/stress-new.out 2>&1
    new_rc=$?
    cat /tmp/stress-new.out
    echo "PERCPU-VM: stress on CPUs 0 and $new exit $new_rc"
  else
    echo "PERCPU-VM: no hot-added CPU appeared"
  fi
  wait $pid; rc=$?
else
  run; rc=$?
fi
cat /tmp/stress.out
failed=$(grep -c "FAILED:" /tmp/stress.out)
abortless=$(grep -c "FAILED: no critical section was aborted" /tmp/stress.out)
if [ $rc -ne 0 ] && [ "$failed" -gt 0 ] && [ "$failed" -eq "$abortless" ]; then
  # Nothing lost or duplicated, but some runs saw no abort (short runs of the buffers spread over
  # many emulated CPUs can end so): each such structure and mode runs again alone, up to three
  # times, until it sees aborts; any other failure counts at once.
  echo "PERCPU-VM: only runs without an abort failed (nothing lost or duplicated): those again"
  rc=0
  for row in $(awk '$NF == "FAIL" { print $1 ":" $2 }' /tmp/stress.out); do
    ok=1
    for try in 1 2 3; do
      stress --short --structure "${row%:*}" --mode "${row#*:}" --inject-loops 400 \
        --require-aborts --timeout 900 > /tmp/again.out 2>&1 && { ok=0; cat /tmp/again.out; break; }
      cat /tmp/again.out
      # Again only while the lack of aborts is its one failure.
      [ "$(grep -c "FAILED:" /tmp/again.out)" -eq \
        "$(grep -c "FAILED: no critical section was aborted" /tmp/again.out)" ] &&
        grep -q "FAILED: no critical section was aborted" /tmp/again.out || break
    done
    [ $ok -eq 0 ] || rc=1
  done
fi
exit $rc
STRESS
chmod +x "$stage/bin/stress.sh"
offline=""
[ "$layout" = hotplug ] && offline='echo 0 > /sys/devices/system/cpu/cpu3/online; echo "PERCPU-VM: CPU 3 offline: online $(cat /sys/devices/system/cpu/online)"'
cat > "$stage/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
cd /tmp
echo "PERCPU-VM: kernel \$(cat /proc/sys/kernel/osrelease), online CPUs \$(cat /sys/devices/system/cpu/online), possible \$(cat /sys/devices/system/cpu/possible)"
$offline
$steps
poweroff -f
INIT
chmod +x "$stage/init"
(cd "$stage" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > "$vm/initramfs.gz")

# --- the machine: TCG on every host CPU, 4 GiB in two NUMA nodes ---
nodes=(-object memory-backend-ram,id=m0,size=2G -object memory-backend-ram,id=m1,size=2G)
append="console=ttyS0 quiet panic=-1"
if [ "$layout" = numa ]; then
  smp=(-smp 8,sockets=2,cores=4,threads=1)
  nodes+=(-numa node,nodeid=0,cpus=0-3,memdev=m0 -numa node,nodeid=1,cpus=4-7,memdev=m1)
elif [ "$layout" = small ]; then
  smp=(-smp 2)
  nodes=()
else
  # Four sockets of four CPUs, sockets 0 and 2 in node 0, 1 and 3 in node 1: the six present
  # CPUs are socket 0's four (node 0) and two of socket 1 (node 1). possible_cpus=16 makes the
  # absent ones possible (without it Linux 7.2 reported possible CPUs 0-5 here: qemu's ACPI table
  # lists the absent CPUs as disabled, without the online-capable flag).
  smp=(-smp 6,maxcpus=16,sockets=4,cores=4,threads=1)
  nodes+=(-numa node,nodeid=0,memdev=m0 -numa node,nodeid=1,memdev=m1)
  for socket in 0 1 2 3; do nodes+=(-numa "cpu,node-id=$((socket % 2)),socket-id=$socket"); done
  append+=" possible_cpus=16"
fi
monitor=$vm/monitor.sock
log=$vm/console.log
qemu=
trap '[ -z "$qemu" ] || kill $qemu 2>/dev/null || true' EXIT  # an interrupted script leaves no VM running
# boot: one run of the machine, back when it powers off, panics or runs out of time. A kernel
# that has not started the init within 600 s (it boots in seconds to a minute under emulation)
# is stopped.
boot() {
  rm -f "$monitor" "$log"
  touch "$log"  # before tail -f follows it
  timeout 5400 qemu-system-x86_64 -machine q35 -accel tcg,thread=multi -cpu max "${smp[@]}" -m 4G \
    "${nodes[@]}" -nographic -nic none -no-reboot -monitor "unix:$monitor,server=on,wait=off" \
    -kernel "$vmlinuz" -initrd "$vm/initramfs.gz" -append "$append" \
    > "$log" 2>&1 &
  qemu=$!
  tail -f "$log" --pid $qemu &
  local waited=0
  while kill -0 $qemu 2>/dev/null && ! grep -qa "PERCPU-VM: kernel" "$log"; do
    sleep 2
    waited=$((waited + 2))
    if [ $waited -ge 600 ]; then
      echo "run-vm: the kernel has not started the init after 600 s; stopping the VM"
      kill $qemu 2>/dev/null || true
    fi
  done
  if [ "$layout" = hotplug ]; then
    # Socket 3, core 2: a CPU of node 1 that is not present yet.
    while kill -0 $qemu 2>/dev/null && ! grep -q "PERCPU-VM: hot-add a CPU now" "$log"; do sleep 2; done
    if grep -q "PERCPU-VM: hot-add a CPU now" "$log"; then
      echo "device_add max-x86_64-cpu,id=hot1,socket-id=3,core-id=2,thread-id=0" |
        socat - "UNIX-CONNECT:$monitor" > /dev/null || echo "run-vm: the monitor refused device_add"
    fi
  fi
  wait $qemu || true
  qemu=
  sleep 1
}
# A kernel that dies before its init starts has run none of percpu's code, so its failure says
# nothing of percpu: the machine boots again, at most three times in all, and each such console
# is kept aside. (Under TCG's multi-threaded emulation a kernel that patches its own text on one
# vCPU while another executes it can take a stray int3 at boot.) A failure after the init
# started counts.
echo "initramfs: $(du -h "$vm/initramfs.gz" | cut -f1); booting $(basename "$deb") ($suite, $layout)"
for attempt in 1 2 3; do
  boot
  grep -qa "PERCPU-VM: kernel" "$log" && break
  cp "$log" "$vm/console-boot$attempt.log"
  echo "run-vm: boot $attempt of 3 did not reach the init (log: $vm/console-boot$attempt.log)"
done

status=0
if [ -n "$command" ]; then
  grep -q "PERCPU-VM: command exit 0" "$log" || { echo "VM $suite/$layout: the command FAILED"; status=1; }
else
  for step in "glibc-area tests" "percpu-area tests" "fallback tests" "${stress_steps[@]}"; do
    grep -q "PERCPU-VM: $step exit 0" "$log" || { echo "VM $suite/$layout: $step FAILED"; status=1; }
  done
  # percpu info: rseq mode with membarrier's RSEQ fence (every suite's kernel is 5.10 or newer),
  # and the fields the kernel's feature size allows: node_id and mm_cid where it reports one
  # (6.3+), neither where it does not (5.10, 6.1).
  grep -qE "^mode +rseq" "$log" && grep -qE "^membarrier RSEQ +yes" "$log" ||
    { echo "VM $suite/$layout: percpu info did not show rseq mode with membarrier's RSEQ fence"; status=1; }
  if grep -qE "^AT_RSEQ_FEATURE_SIZE 0 " "$log"; then fields="node_id no, mm_cid no"; else fields="node_id yes, mm_cid yes"; fi
  grep -qE "^usable fields +cpu_id yes, $fields" "$log" || { echo "VM $suite/$layout: percpu info did not show usable fields cpu_id, $fields"; status=1; }
  # Two nodes, possible CPUs (not online ones) sizing the index spaces.
  if [ "$layout" = numa ]; then possible=0-7 space=8; else possible=0-15 space=16; fi
  # Each node's online CPUs (the hotplug layout's CPU 3 is offline by then).
  if [ "$layout" = numa ]; then per_node="node 0: CPUs 0-3; node 1: CPUs 4-7"; else per_node="node 0: CPUs 0-2; node 1: CPUs 4-5"; fi
  grep -qE "^NUMA nodes +0-1 \($per_node\)" "$log" || { echo "VM $suite/$layout: percpu info did not show nodes 0-1 ($per_node)"; status=1; }
  grep -qE "^possible CPUs +$possible " "$log" || { echo "VM $suite/$layout: percpu info did not show possible CPUs $possible"; status=1; }
  if [ "$layout" = hotplug ] && grep -qaE "possible 0-5[[:space:]]*$" "$log"; then
    echo "VM $suite/$layout: this kernel counts only the present CPUs as possible (see --layout)"
  fi
  grep -qE "^index spaces +cpu_id \[0, $space\)" "$log" || { echo "VM $suite/$layout: the index spaces are not sized by the possible CPUs"; status=1; }
  if [ "$layout" = hotplug ]; then
    grep -q "PERCPU-VM: hot-added CPU [0-9]* online" "$log" || { echo "VM $suite/$layout: no CPU was hot-added"; status=1; }
    grep -q "PERCPU-VM: stress on CPUs 0 and [0-9]* exit 0" "$log" || { echo "VM $suite/$layout: the stress on the hot-added CPU FAILED"; status=1; }
  fi
fi
[ $status -eq 0 ] && echo "VM $suite/$layout: all steps passed (log: $log)" || echo "VM $suite/$layout: a step FAILED (log: $log)"
exit $status
