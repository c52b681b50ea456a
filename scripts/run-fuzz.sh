#!/usr/bin/env bash
# The fuzz targets (tests/fuzz): builds the preset fuzz (clang's libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer), runs each target for a fixed time on a copy of its corpus
# (tests/fuzz/corpus/<target>; the repository's copy is never written), as many targets side by
# side as there are CPUs, prints the executions per target, then has the exporter's target write
# the scrape of every input of its corpus (the seeds and what the run added) and Prometheus's own
# parser check them (`promtool check metrics`: a parse error fails, lint remarks do not). Exits 1
# on a crash, a failed check, a sanitizer report, a timeout or a parse error; the input behind it
# is kept in build/fuzz/artifacts/ (rerun it: build/fuzz/tests/fuzz/<target> <file>).
#
# Usage: scripts/run-fuzz.sh [--seconds N] [TARGET...]
# (default: 20 seconds each, every target: histogram_fuzz c_api_fuzz environment_fuzz
# prometheus_fuzz). As root it installs what it needs (clang, libFuzzer's runtime, cmake,
# ninja, prometheus-cpp, and prometheus for promtool). PERCPU_FUZZ_PROMTOOL_MAX (default 150)
# caps the number of distinct scrapes promtool reads (it starts once for each).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=20
targets=()
usage="usage: $0 [--seconds N] [TARGET...]"
while [ $# -gt 0 ]; do
  case $1 in
    --seconds)
      [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$usage" >&2; exit 2; }
      seconds=$2; shift ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
all=(histogram_fuzz c_api_fuzz environment_fuzz prometheus_fuzz)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "$0: unknown target $t (${all[*]})" >&2; exit 2; }
done

# --- packages -------------------------------------------------------------------------------
need=()
for p in cmake ninja-build clang libclang-rt-14-dev prometheus-cpp-dev prometheus; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "percpu: missing packages: ${need[*]}; run this script as root (or install them)." >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi

# --- build ----------------------------------------------------------------------------------
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

bin=build/fuzz/tests/fuzz
run=build/fuzz/run            # the corpora's copies and the logs
artifacts=build/fuzz/artifacts
mkdir -p "$run" "$artifacts"
rm -f "$run"/*.rc
# A report stops the target at once (the build has -fno-sanitize-recover); stacks in the log.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

# The longest input each target reads with profit (its operations run out before it), and the
# most one input may take: a hang (a lock that never comes) is reported as a timeout.
max_len() {
  case $1 in
    environment_fuzz) echo 256 ;;
    histogram_fuzz) echo 512 ;;
    *) echo 1024 ;;
  esac
}

# One target: a fresh copy of its corpus, its run, its exit status in $run/$t.rc.
fuzz_one() {
  local t=$1 work=$run/$1 rc=0
  rm -rf "$work"
  mkdir -p "$work"
  cp tests/fuzz/corpus/"$t"/* "$work"/
  "$bin/$t" -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/$t-" \
    "$work" > "$run/$t.log" 2>&1 || rc=$?
  echo $rc > "$run/$t.rc"
}

# The targets side by side, as many at once as there are CPUs (each libFuzzer process runs one
# thread): every target still gets its whole time, and the step takes its share of the CPUs'.
failed=()
rows=()
slots=$(nproc)
running=0
for t in "${targets[@]}"; do
  [ -x "$bin/$t" ] || { echo "$0: $bin/$t was not built" >&2; failed+=("$t (not built)"); continue; }
  echo "=== $t: $seconds s on a copy of tests/fuzz/corpus/$t ($(ls tests/fuzz/corpus/"$t" | wc -l) inputs) ==="
  if [ $running -ge "$slots" ]; then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

for t in "${targets[@]}"; do
  [ -f "$run/$t.rc" ] || continue
  rc=$(cat "$run/$t.rc")
  seeds=$(ls tests/fuzz/corpus/"$t" | wc -l)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/$t.log" | tail -1)
  per_second=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$run/$t.log" | tail -1)
  corpus=$(ls "$run/$t" | wc -l)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $rc)"
    failed+=("$t")
    echo
    echo "=== $t failed: ==="
    grep -E 'check failed|invalid scrape|runtime error|ERROR: |SUMMARY: |Test unit written' \
      "$run/$t.log" | head -20 || true
    echo "--- the end of its log ($run/$t.log):"
    tail -40 "$run/$t.log"
  fi
  rows+=("$(printf '%-18s %8s %12s %10s %8s  %s' "$t" "$seconds" "${execs:-?}" "${per_second:-?}" \
    "$seeds->$corpus" "$result")")
done

# --- promtool on the exporter's scrapes -----------------------------------------------------
promtool_line=
if [[ " ${targets[*]} " == *" prometheus_fuzz "* ]] && [ -x "$bin/prometheus_fuzz" ]; then
  scrapes=$run/scrapes
  rm -rf "$scrapes"
  mkdir -p "$scrapes"
  echo
  echo "=== promtool check metrics on the scrapes of prometheus_fuzz's corpus ==="
  # -runs=0: each input of the corpus once, each writing its last scrape (PERCPU_FUZZ_SCRAPES).
  if ! PERCPU_FUZZ_SCRAPES=$scrapes "$bin/prometheus_fuzz" -runs=0 -max_len=1024 \
      -artifact_prefix="$artifacts/prometheus_fuzz-" "$run/prometheus_fuzz" \
      > "$run/scrapes.log" 2>&1; then
    failed+=("prometheus_fuzz's scrapes")
    tail -40 "$run/scrapes.log"
  fi
  # Distinct texts only, at most PERCPU_FUZZ_PROMTOOL_MAX of them.
  mapfile -t files < <(cd "$scrapes" && md5sum -- *.prom 2>/dev/null | sort -s -k1,1 -u |
    awk '{print $2}' | head -n "${PERCPU_FUZZ_PROMTOOL_MAX:-150}")
  parse_errors=0 lint=0
  for f in "${files[@]}"; do
    rc=0
    out=$(promtool check metrics < "$scrapes/$f" 2>&1) || rc=$?
    case $rc in
      0) ;;
      3) lint=$((lint + 1)) ;;   # lint remarks only (a counter without _total, no help text)
      *) parse_errors=$((parse_errors + 1))
         echo "promtool: $scrapes/$f: $out" ;;
    esac
  done
  promtool_line="promtool: ${#files[@]} distinct scrapes, $parse_errors parse errors, $lint with lint remarks only"
  echo "$promtool_line"
  [ $parse_errors -eq 0 ] || failed+=("promtool ($parse_errors scrapes)")
  [ ${#files[@]} -gt 0 ] || failed+=("promtool (no scrape was written)")
fi

echo
echo "=== fuzzing: executions per target (libFuzzer's stat::number_of_executed_units) ==="
printf '%-18s %8s %12s %10s %8s  %s\n' target seconds executions "execs/s" corpus result
printf '%s\n' "${rows[@]}"
[ -z "$promtool_line" ] || echo "$promtool_line"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}; inputs in $artifacts/, logs in $run/" >&2
  exit 1
fi
