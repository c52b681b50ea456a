#!/usr/bin/env bash
# Runs the test suite on this machine's kernel under a newer glibc than the system's: the libc6
# package of a Debian suite (trixie: 2.41, sid: the newest), downloaded and unpacked (not
# installed), and its own loader started by hand:
#   ld-linux-x86-64.so.2 --library-path GLIBC:SYSTEM build/release/tests/percpu_tests
# From glibc 2.41 on, __rseq_size is the kernel's feature size (getauxval(AT_RSEQ_FEATURE_SIZE))
# and glibc registers an area that large; `percpu info` under that glibc must say so, and the
# suite must pass with glibc's area and with percpu's own (glibc.pthread.rseq=0), and its layers
# that meet glibc in fallback mode (rseq denied by seccomp). Only the test process runs under
# that glibc: the programs a test starts (the CLI, /bin/ls under the malloc preload, gdb) run
# under the system's.
#
# Usage: scripts/run-glibc.sh [--suite trixie|sid]
#   --suite  the Debian suite whose libc6 to use (default sid)
# The package is cached in build/vm/cache (scripts/debian-fetch.sh: this machine's apt sources,
# a private apt state). Runs as root when packages are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/test-layers.sh

suite=sid
usage="usage: $0 [--suite SUITE]"
while [ $# -gt 0 ]; do
  case $1 in
    --suite) [ $# -ge 2 ] && [ -n "$2" ] || { echo "$usage" >&2; exit 2; }; suite=$2; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done

scripts/install-deps.sh
# The package first, so that a suite the archive lacks fails before the build.
deb=$(scripts/debian-fetch.sh "$root/build/vm/cache" "$suite" amd64 libc6 | tail -1)
cmake --preset release >/dev/null
cmake --build --preset release

glibc=$root/build/glibc/$suite
rm -rf "$glibc" && mkdir -p "$glibc"
dpkg-deb -x "$deb" "$glibc"
loader=$glibc/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
libs=$glibc/usr/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu
run() { "$loader" --library-path "$libs" "$@"; }

cli=build/release/tools/percpu/percpu
tests=build/release/tests/percpu_tests
version=$(run "$cli" info --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["libc"]["version"])')
echo "=== glibc $version ($(basename "$deb")), kernel $(uname -r) ==="
run "$cli" info

# glibc 2.41+ publishes the kernel's feature size in __rseq_size (2.40 and its backports, such
# as Debian 12's 2.36: 20; 2.35-2.39 without the backport: 32).
status=0
feature=$(run "$cli" info --json | python3 -c 'import json,sys; r=json.load(sys.stdin)["rseq"]; print(r["glibc_rseq_size"], r["at_rseq_feature_size"])')
set -- $feature
if [ "$1" != "$2" ]; then
  echo "run-glibc: under glibc $version __rseq_size is $1, not the feature size $2"
  status=1
fi

pass() {
  local name=$1; shift
  echo
  echo "=== glibc $version: $name ==="
  "$@" || { echo "run-glibc: glibc $version: $name FAILED"; status=1; }
}
pass "glibc's rseq area" env PERCPU_EXPECT=glibc \
  "$loader" --library-path "$libs" "$tests" --gtest_brief=1
pass "percpu's own area" env PERCPU_EXPECT=percpu GLIBC_TUNABLES=glibc.pthread.rseq=0 \
  "$loader" --library-path "$libs" "$tests" --gtest_brief=1
# Fallback mode: the layers that meet glibc there (its registration refused, the fields, the
# getcpu cache, the sections and their fallback, fork, malloc's glibc API; test-layers.sh); the
# structures above them run the same code under any glibc, and run-tests.sh runs them in this
# mode.
pass "fallback mode" env PERCPU_EXPECT=fallback "$cli" deny-rseq --errno ENOSYS -- \
  "$loader" --library-path "$libs" "$tests" --gtest_brief=1 --gtest_filter="$mode_layers"

[ $status -eq 0 ] && echo "glibc $version: every pass succeeded" || echo "glibc $version: a pass FAILED"
exit $status
