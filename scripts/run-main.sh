#!/usr/bin/env bash
# The main job: installs what is missing, builds, and writes the benchmark report (every suite,
# plots, raw JSON) into percpu-report/ (report.md opens with the summary table).
# Extra arguments go to `percpu bench`: --quick (fewer, shorter repetitions), --repetitions N,
# --out DIR, --suites getcpu,ops,counter,readmostly,metrics,list,pool,malloc,slice,context-switch.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

build/release/tools/percpu/percpu info
echo
build/release/tools/percpu/percpu bench "$@"
