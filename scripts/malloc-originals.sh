#!/usr/bin/env bash
# The allocator benchmarks that users compare by, run from their own sources: builds larson,
# xmalloc-test, glibc's bench-malloc-simple and cfrac from a mimalloc-bench checkout (not
# packaged by Debian: fetch it yourself), then runs each with mimalloc-bench's arguments under
# LD_PRELOAD of every allocator found (glibc, jemalloc, gperftools tcmalloc, mimalloc from
# Debian; percpu malloc from the build tree), alternating the allocators in each round, and prints
# every run and the medians with peak RSS (GNU time). Not part of CI: the project's own workloads
# in those shapes (`percpu bench malloc`) are; docs/malloc.md has this script's latest figures.
#
# Usage: scripts/malloc-originals.sh MIMALLOC_BENCH_DIR [--runs N] [--build DIR] [--percpu SO]
#            [--cli PERCPU] [--allocators a,b,...] [BENCH ...]
# BENCH: larson2, larson64, xmalloc, simple, cfrac (default: all five); N: rounds (default 3);
# DIR: where the programs are built (default build/malloc-originals); the allocators and their
# libraries are those `PERCPU bench malloc --list-allocators` finds (default PERCPU:
# build/release/tools/percpu/percpu; names as its --allocators takes them); SO replaces percpu
# malloc's library (to compare two builds, say). Throughput is M ops/s (larson), M frees/s
# (xmalloc); time in s (simple, cfrac: lower is better).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: $0 MIMALLOC_BENCH_DIR [--runs N] [--build DIR] [--percpu SO] [--cli PERCPU] [--allocators a,b,...] [BENCH ...]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
mb=$1
shift
runs=3 out=build/malloc-originals percpu='' cli=build/release/tools/percpu/percpu
allocators=glibc,jemalloc,tcmalloc,mimalloc,percpu benches=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "$usage" >&2; exit 2; }; runs=$2; shift ;;
    --build) [ -n "${2:-}" ] || { echo "$usage" >&2; exit 2; }; out=$2; shift ;;
    --percpu) [ -n "${2:-}" ] || { echo "$usage" >&2; exit 2; }; percpu=$2; shift ;;
    --cli) [ -n "${2:-}" ] || { echo "$usage" >&2; exit 2; }; cli=$2; shift ;;
    --allocators) [ -n "${2:-}" ] || { echo "$usage" >&2; exit 2; }; allocators=$2; shift ;;
    larson2 | larson64 | xmalloc | simple | cfrac) benches+=("$1") ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
[ ${#benches[@]} -gt 0 ] || benches=(larson2 larson64 xmalloc simple cfrac)
src=$mb/bench
if [ ! -f "$src/larson/larson.cpp" ] || [ ! -f "$src/xmalloc-test/xmalloc-test.c" ]; then
  echo "$0: $mb is not a mimalloc-bench checkout (no bench/larson/larson.cpp)" >&2
  exit 1
fi
[ -x /usr/bin/time ] || { echo "$0: needs GNU time (apt-get install -y time)" >&2; exit 1; }

# mimalloc-bench's release flags; its CMake file lists the same sources and definitions.
mkdir -p "$out"
out=$(realpath "$out")  # the programs run from /tmp
flags=(-O3 -DNDEBUG -w)
build() {  # build NAME COMPILER ARGS...: only when missing
  local name=$1
  shift
  [ -x "$out/$name" ] || "$@" -o "$out/$name"
}
build larson g++ -std=c++17 "${flags[@]}" -DCPP=1 "$src/larson/larson.cpp" -lpthread
build xmalloc-test gcc "${flags[@]}" "$src/xmalloc-test/xmalloc-test.c" -lpthread
build glibc-simple gcc "${flags[@]}" "$src/glibc-bench/bench-malloc-simple.c" -lpthread
cfrac_sources=()
for f in cfrac pops pconst pio pabs pneg pcmp podd phalf padd psub pmul pdivmod psqrt ppowmod \
  atop ptoa itop utop ptou errorp pfloat pidiv pimod picmp primes pcfrac pgcd; do
  cfrac_sources+=("$src/cfrac/$f.c")
done
build cfrac gcc "${flags[@]}" -std=gnu89 -DNOMEMOPT=1 "${cfrac_sources[@]}" -lm

# The allocators and their libraries as `percpu bench malloc` finds them.
[ -x "$cli" ] || { echo "$0: $cli not found (build the project first)" >&2; exit 1; }
declare -A preload=() conf=()
chosen=()
while IFS=$'\t' read -r name lib malloc_conf; do
  preload[$name]=$lib conf[$name]=$malloc_conf
  chosen+=("$name")
done < <("$cli" bench malloc --list-allocators --allocators "$allocators")
[ ${#chosen[@]} -gt 0 ] || { echo "$0: no allocator to run" >&2; exit 1; }
if [ -n "$percpu" ] && [ -n "${preload[percpu]+set}" ]; then
  [ -e "$percpu" ] || { echo "$0: $percpu not found" >&2; exit 1; }
  preload[percpu]=$(realpath "$percpu")  # the programs run from /tmp
fi

median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for bench in "${benches[@]}"; do
  case $bench in
    larson2) cmd=("$out/larson" 5 8 1000 5000 100 4141 2) unit="M ops/s" ;;
    larson64) cmd=("$out/larson" 5 8 1000 5000 100 4141 64) unit="M ops/s" ;;
    xmalloc) cmd=("$out/xmalloc-test" -w 2 -t 5 -s 64) unit="M frees/s" ;;
    simple) cmd=("$out/glibc-simple") unit="s" ;;
    cfrac) cmd=("$out/cfrac" 17545186520507317056371138836327483792789528) unit="s" ;;
  esac
  echo "== $bench: ${cmd[*]##*/} ($unit, peak RSS MiB)"
  : > "$results"
  for ((r = 1; r <= runs; ++r)); do
    for a in "${chosen[@]}"; do
      # larson and glibc-simple write files in the working directory: run them in /tmp.
      text=$(cd /tmp && LD_PRELOAD=${preload[$a]} MALLOC_CONF=${conf[$a]} /usr/bin/time -f "@rss %M @elapsed %e" "${cmd[@]}" 2>&1) ||
        { echo "$a: ${cmd[*]} failed:" >&2; echo "$text" >&2; exit 1; }
      rss=$(awk '/^@rss/ {printf "%.1f", $2 / 1024}' <<<"$text")
      case $bench in
        larson*) value=$(awk '/^Throughput =/ {printf "%.1f", $3 / 1e6}' <<<"$text") ;;
        xmalloc) value=$(awk '/free\/sec:/ {print $4}' <<<"$text") ;;
        *) value=$(awk '/^@rss/ {print $4}' <<<"$text") ;;
      esac
      [ -n "$value" ] || { echo "$a: no result in the output of ${cmd[*]}:" >&2; echo "$text" >&2; exit 1; }
      if grep -q "cannot be preloaded" <<<"$text"; then
        echo "$a: the dynamic loader did not preload ${preload[$a]}:" >&2
        echo "$text" >&2
        exit 1
      fi
      echo "  round $r  $a  $value  $rss"
      echo "$a $value $rss" >> "$results"
    done
  done
  for a in "${chosen[@]}"; do
    printf '  %-16s median %s (peak RSS %s)\n' "$a" \
      "$(awk -v a="$a" '$1 == a {print $2}' "$results" | median)" \
      "$(awk -v a="$a" '$1 == a {print $3}' "$results" | median)"
  done
done
