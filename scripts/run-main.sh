#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the benchmark report.
# Extra arguments go to each `percpu bench` suite (for example --quick or --repetitions N; for
# --json FILE run one suite by hand, since each suite would write the same file).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

build/release/tools/percpu/percpu info
echo
build/release/tools/percpu/percpu bench "$@" getcpu
echo
build/release/tools/percpu/percpu bench "$@" counter
echo
build/release/tools/percpu/percpu bench "$@" list
echo
build/release/tools/percpu/percpu bench "$@" pool
echo
build/release/tools/percpu/percpu bench "$@" malloc
