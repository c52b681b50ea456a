#!/usr/bin/env bash
# Checks a report folder written by `percpu bench` (no suite): report.md opens with the summary
# table and has a section per suite, every plot it shows is a PNG gnuplot drew, results.json
# holds every suite's results, and no suite failed or skipped (a missing tool skips one).
# Usage: tests/report_check.sh DIR [SUITE...]   (default: every suite)
set -euo pipefail
dir=$1
shift
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(getcpu ops counter readmostly metrics list pool malloc slice context-switch)
fail() { echo "report check: $*" >&2; exit 1; }

md=$dir/report.md
[ -s "$md" ] || fail "$md missing or empty"
head -20 "$md" | grep -q '^## Summary' || fail "report.md does not open with the summary"
grep -q "^| claim | published figure \[source\] |" "$md" || fail "no summary table"
grep -q 'failed' <(grep -i '^- \*\*' "$md" || true) && fail "a suite failed: $(grep '^- \*\*' "$md")"
grep -q '^- \*\*Plots missing' "$md" && fail "$(grep '^- \*\*Plots missing' "$md")"

plots=0
for s in "${suites[@]}"; do
  grep -q "^\`percpu bench $s\`" "$md" || fail "no section for $s"
  [ -s "$dir/raw/$s.json" ] || fail "raw/$s.json missing"
done
# Every image the report links must exist and be a PNG of some size.
while read -r png; do
  f=$dir/$png
  [ -s "$f" ] || fail "$png linked but missing"
  [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$png is not a PNG"
  [ "$(stat -c %s "$f")" -gt 5000 ] || fail "$png is suspiciously small"
  plots=$((plots + 1))
done < <(grep -o '!\[[^]]*\]([^)]*\.png)' "$md" | sed 's/.*(\(.*\))/\1/')
[ $plots -gt 0 ] || fail "no plots linked"

python3 - "$dir/results.json" "${suites[@]}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for s in sys.argv[2:]:
    suite = r["suites"].get(s)
    if not suite or not suite["ok"] or suite["results"] is None:
        sys.exit(f"report check: results.json: suite {s} missing or failed")
    if "skipped" in suite["results"]:
        sys.exit(f"report check: suite {s} skipped: {suite['results']['skipped']}")
    if "skipped" in suite["results"]:
        sys.exit(f"report check: suite {s} skipped: {suite['results']['skipped']}")
PY
echo "report check: $dir/report.md: ${#suites[@]} suites, $plots plots, all present"
