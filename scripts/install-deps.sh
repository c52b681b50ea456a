#!/usr/bin/env bash
# Installs the Debian 12 packages percpu builds, tests and benchmarks with (python3, sqlite3
# and git: the real programs the malloc tests run under LD_PRELOAD; jemalloc, gperftools'
# tcmalloc and mimalloc: the allocators `percpu bench malloc` compares; rt-tests' hackbench and
# linux-perf's `perf bench sched`: the context-switch check; gnuplot-nox: the report's plots;
# valgrind: a worker pool joined from a static destructor, checked under it; oneTBB, Abseil and
# liburcu: the locks `percpu bench readmostly` compares; prometheus-cpp: the optional exporter,
# its HTTP scrape test and the histograms `percpu bench metrics` compares; prometheus: its
# promtool, Prometheus's own parser of the scrapes that test makes; clang: the headers and the C
# API's test built by a second compiler).
# Runs as root (apt-get); does nothing when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev libseccomp-dev
  libtbb-dev libabsl-dev liburcu-dev prometheus-cpp-dev prometheus
  python3 sqlite3 git clang
  libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
  rt-tests linux-perf gnuplot-nox valgrind
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "percpu: missing packages: ${missing[*]}; run this script as root (or install them)." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
