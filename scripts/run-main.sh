#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the benchmark report.
# Extra arguments go to `percpu bench` (for example --quick or --json FILE).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

build/release/tools/percpu/percpu info
echo
build/release/tools/percpu/percpu bench "$@" getcpu
