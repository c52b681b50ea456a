#!/usr/bin/env bash
# The kernel and glibc matrix: every Debian kernel and glibc percpu is tested on, one after the
# other, each run's output in build/matrix/NAME.log, then a results table in Markdown (the
# docs/testing.md's "Supported" table is written from such tables):
#   x86-64 VMs (scripts/run-vm.sh): bullseye's 5.10, bookworm's 6.1, trixie's 6.12 and sid's
#     newest kernel with 8 CPUs in 2 NUMA nodes, and 6.1 with 6 of 16 possible CPUs and a
#     hot-added CPU;
#   glibc 2.41 (trixie) and the newest (sid) on this machine's kernel (scripts/run-glibc.sh);
#   aarch64 VMs (scripts/run-aarch64.sh): bookworm's 6.1 with the user-mode pass, as CI runs it,
#     and sid's newest kernel (--vm-only).
# Usage: scripts/run-matrix.sh [--short] [--only NAME,...]
#   --short  the short form of every VM run (as CI) instead of the full forms (hours)
#   --only   these runs only, by the names of their logs (x86-64-sid-numa, glibc-trixie,
#            aarch64-sid, ...)
# Runs as root (packages, apt-get download). `.ci/run --full` runs this after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

full=--full form=full only=
while [ $# -gt 0 ]; do
  case $1 in
    --short) full= form=short ;;
    --only) [ $# -ge 2 ] && [ -n "$2" ] || { echo "usage: $0 [--short] [--only NAME,...]" >&2; exit 2; }; only=,$2,; shift ;;
    *) echo "usage: $0 [--short] [--only NAME,...]" >&2; exit 2 ;;
  esac
  shift
done
names=,x86-64-bullseye-numa,x86-64-bookworm-numa,x86-64-trixie-numa,x86-64-sid-numa,x86-64-bookworm-hotplug,glibc-trixie,glibc-sid,aarch64-bookworm,aarch64-sid,
for name in ${only//,/ }; do
  [[ $names == *,$name,* ]] || { echo "$0: no run named $name (runs: ${names:1:-1})" >&2; exit 2; }
done
out=build/matrix
mkdir -p "$out"

rows=() status=0
# run NAME PLATFORM LAYOUT FORM CONSOLE-LOG COMMAND...: CONSOLE-LOG is the VM's console, where
# the kernel's release is read ("-": the host's kernel).
run() {
  local name=$1 platform=$2 layout=$3 run_form=$4 console=$5 start=$SECONDS result kernel glibc
  shift 5
  [ -z "$only" ] || [[ $only == *,$name,* ]] || return 0
  echo "=== matrix: $name ($*) ==="
  [ "$console" = - ] || rm -f "$console"  # a run that fails before its boot shows no kernel
  if "$@" > "$out/$name.log" 2>&1; then result=passed; else result=FAILED; status=1; fi
  tail -3 "$out/$name.log"
  # (|| true: a log without the line leaves the cell "?", it does not end the script)
  kernel="$(uname -r) (host)"
  [ "$console" = - ] ||
    kernel=$(grep -aoE 'PERCPU-VM: kernel [^, ]*' "$console" 2>/dev/null | head -1 | cut -d' ' -f3 || true)
  glibc=$(grep -aoE '^libc +glibc [0-9.]*' "$out/$name.log" | head -1 | awk '{ print $3 }' || true)
  rows+=("| $platform | ${kernel:-?} | ${glibc:-?} | $layout | $run_form | $result | $(( (SECONDS - start + 30) / 60 )) min |")
}

for suite in bullseye bookworm trixie sid; do
  run "x86-64-$suite-numa" x86-64 "8 CPUs, 2 nodes" $form "build/vm/$suite-numa/console.log" \
    scripts/run-vm.sh --suite "$suite" --layout numa $full
done
run x86-64-bookworm-hotplug x86-64 "6 of 16 CPUs, hole, hot-add" $form \
  build/vm/bookworm-hotplug/console.log scripts/run-vm.sh --suite bookworm --layout hotplug $full
for suite in trixie sid; do
  run "glibc-$suite" x86-64 "this machine" "every test in two areas, glibc's layers in fallback" - scripts/run-glibc.sh --suite "$suite"
done
# bookworm's aarch64 run includes the user-mode pass (fallback mode under qemu-user), as CI's.
run aarch64-bookworm aarch64 "2 CPUs" $form build/aarch64-vm/console.log \
  scripts/run-aarch64.sh --suite bookworm $full
run aarch64-sid aarch64 "2 CPUs" $form build/aarch64-vm/console.log \
  scripts/run-aarch64.sh --suite sid --vm-only $full

echo
echo "Matrix run on $(date -u +%Y-%m-%d), $form form:"
echo
echo "| platform | kernel | glibc | CPUs | form | result | time |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $status
