#!/usr/bin/env bash
# Installs what is missing, builds, and runs the test suite three times (the checks of the build's
# products, which find the same in every mode, in the first pass only):
#   1. default: glibc's rseq area;
#   2. GLIBC_TUNABLES=glibc.pthread.rseq=0: percpu registers its own area;
#   3. under `percpu deny-rseq` (a seccomp filter failing rseq(2) with ENOSYS): fallback mode.
# PERCPU_EXPECT tells each pass which mode the tests must find. Then runs the suite once more from
# a debug build (unoptimized sections, checked structures; not the package checks and the
# preloaded real programs, which check no -O0 code), and the structure tests from a
# ThreadSanitizer build (preset tsan; any race report fails it). Then builds the `stress` preset
# (delay loops inside every critical section) and runs the short form of `percpu stress` on
# every structure in both index modes, requiring aborts and zero lost. Last, the short form of
# the benchmark report (`percpu bench --quick --repetitions 1 --allocators glibc,percpu`: every
# suite, the malloc workloads under glibc and percpu malloc, where a crash or a corrupted object
# under percpu malloc fails it, and the context-switch check; one repetition and no peer
# allocators, since here the report is checked, not read: the peers' rows run the same harness
# under another preload, and its figures come from scripts/run-main.sh, which runs them all),
# then tests/tools/report_check.sh checks the report's summary, sections, PNG plots and JSON.
# Prints each pass's time at the end.
#
# Usage: scripts/run-tests.sh [--rounds N [--busy K]]
#   --rounds N  only the four ctest passes (three modes, debug), N times over, beside K busy
#               loops (default 0), then a table of each round's results and the tests that
#               failed in any: the flaky-test check (docs/testing.md). Logs in build/rounds/.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=0 busy=0
usage="usage: $0 [--rounds N [--busy K]]"
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "$usage" >&2; exit 2; }; rounds=$2; shift ;;
    --busy) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "$usage" >&2; exit 2; }; busy=$2; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
[ $busy -eq 0 ] || [ $rounds -gt 0 ] || { echo "$0: --busy goes with --rounds" >&2; exit 2; }

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

cli=build/release/tools/percpu/percpu
echo "kernel $(uname -r), $(nproc) CPUs"
"$cli" info
# Two tests at a time: a pass spends much of its time waiting on the programs its tests start
# (valgrind, programs under the preload, forked children), and every test must pass beside two
# busy loops (docs/testing.md), a heavier load than a second test.
jobs=${PERCPU_TEST_JOBS:-2}
# The checks of the build's products (the package's install and subproject builds, the
# compile-time API checks) find the same in every mode: the first pass runs them.
build_checks='^(Package|ApiChecks)\.'
# The four ctest passes, each written once: the test command runs them once, --rounds N times.
# release_pass [-E REGEX] COMMAND...: the suite under COMMAND (env, deny-rseq), less REGEX.
release_pass() {
  local exclude=()
  [ "$1" = -E ] && { exclude=(-E "$2"); shift 2; }
  "$@" ctest --test-dir build/release --output-on-failure -j "$jobs" ${exclude[@]+"${exclude[@]}"}
}
glibc_pass() { PERCPU_EXPECT=glibc release_pass env; }
own_pass() {
  PERCPU_EXPECT=percpu GLIBC_TUNABLES=glibc.pthread.rseq=0 release_pass -E "$build_checks" env
}
fallback_pass() {
  PERCPU_EXPECT=fallback release_pass -E "$build_checks" "$cli" deny-rseq --errno ENOSYS --
}
# Leaves out the package and compiler checks (they check the build's products, not -O0 code)
# and the real programs under the preload, which the three release passes run. The debug preset
# has no `percpu bench` (PERCPU_BUILD_BENCH=OFF: timings at -O0 mean nothing), so the Cli tests
# of bench skip there.
debug_pass() {
  PERCPU_EXPECT=glibc ctest --test-dir build/debug --output-on-failure -j "$jobs" \
    -E '^(Package|ApiChecks|MallocPreload)\.'
}
build_debug() {
  cmake --preset debug >/dev/null
  cmake --build --preset debug
}

if [ $rounds -gt 0 ]; then
  build_debug
  mkdir -p build/rounds
  busy_pids=()
  for ((i = 0; i < busy; i++)); do
    (while :; do :; done) &
    busy_pids+=($!)
  done
  trap '[ ${#busy_pids[@]} -eq 0 ] || kill "${busy_pids[@]}" 2>/dev/null' EXIT
  rows=() flaky=0
  for ((r = 1; r <= rounds; r++)); do
    for name in glibc own fallback debug; do
      log=build/rounds/$r-$name.log start=$SECONDS result=passed
      echo "=== round $r of $rounds, $name pass, beside $busy busy loops ==="
      "${name}_pass" > "$log" 2>&1 || result=FAILED
      # ctest's closing list names each test that failed or timed out.
      bad=$(sed -n '/The following tests FAILED/,$p' "$log" | { grep -E '^[[:space:]]+[0-9]+ - ' || true; } |
        sed -E 's/^[[:space:]]+[0-9]+ - //' | tr '\n' ' ')
      [ "$result" = passed ] || flaky=1
      rows+=("$(printf '  %5d  %-9s %4d s  load %-5s  %s %s' $r $name $((SECONDS - start)) \
        "$(cut -d' ' -f1 /proc/loadavg)" $result "$bad")")
      echo "${rows[-1]}"
    done
  done
  echo
  echo "rounds: $rounds, busy loops beside: $busy, $(nproc) CPUs, ctest -j $jobs"
  printf '  %5s  %-9s %6s  %-10s  %s\n' round pass time load result
  printf '%s\n' "${rows[@]}"
  exit $flaky
fi

# pass NAME FUNCTION: one pass of the test command, its title first.
pass() {
  echo
  echo "=== test pass: $1 ==="
  "$2"
}
failed=()   # the passes that failed, named at the end
times=()    # each pass's wall time, printed at the end
mark=0  # the packages and the release build come first
timed() { times+=("$(printf '  %-14s %3d:%02d' "$1" $(((SECONDS - mark) / 60)) $(((SECONDS - mark) % 60)))"); mark=$SECONDS; }
timed build
pass "glibc's rseq area" glibc_pass || failed+=("glibc's rseq area")
timed glibc-area
pass "percpu's own rseq area (glibc.pthread.rseq=0)" own_pass || failed+=("percpu's own rseq area")
timed own-area
pass "fallback mode (rseq denied by seccomp: ENOSYS)" fallback_pass || failed+=("fallback mode")
timed fallback

echo
echo "=== debug pass: -O0 sections and checked structures (double-push detection on) ==="
build_debug
debug_pass || failed+=("debug")
timed debug

echo
echo "=== tsan pass: the structure tests under ThreadSanitizer (hand-offs report no race) ==="
# Only the structures' tests (percpu_structure_tests): percpu malloc, its LD_PRELOAD tests, the
# CLI and the seccomp and fork tests cannot run under TSan (tests/CMakeLists.txt). A report
# stops the run with exit code 66. setarch -R: TSan's fixed memory layout refuses some
# randomized mappings ("FATAL: ThreadSanitizer: unexpected memory mapping").
cmake --preset tsan >/dev/null
cmake --build build/tsan --target percpu_structure_tests
tsan=(env TSAN_OPTIONS="halt_on_error=1 exitcode=66" PERCPU_EXPECT=glibc
  build/tsan/tests/percpu_structure_tests)
if setarch "$(uname -m)" -R true 2>/dev/null; then tsan=(setarch "$(uname -m)" -R "${tsan[@]}"); fi
"${tsan[@]}" || failed+=("tsan")
timed tsan

echo
echo "=== stress pass: delay injection inside the critical sections ==="
cmake --preset stress >/dev/null
cmake --build --preset stress --target percpu_cli  # the stress runs only the command
build/stress/tools/percpu/percpu stress --short --inject-loops 400 --require-aborts ||
  failed+=("stress")
timed stress

echo
echo "=== the benchmark report, short form: every suite (malloc: every workload under glibc"
echo "    and percpu malloc), plots, summary ==="
rm -rf build/report-check
"$cli" bench --quick --repetitions 1 --allocators glibc,percpu --out build/report-check ||
  failed+=("benchmark report")
tests/tools/report_check.sh build/report-check || failed+=("report check")
timed report

echo
echo "time of each pass (wall, building included):"
printf '%s\n' "${times[@]}"
echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "all test passes succeeded"
  exit 0
fi
echo "FAILED: $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')"
echo "(ctest's list \"The following tests FAILED\" above names each test; rerun one with"
echo " ctest --test-dir build/release --output-on-failure -R 'NAME', in the failed pass's"
echo " environment: GLIBC_TUNABLES=glibc.pthread.rseq=0 for percpu's own area, or"
echo " $cli deny-rseq --errno ENOSYS -- ctest ... for fallback mode)"
exit 1
