#!/usr/bin/env sh
# Builds tests/subproject_check: a project that adds percpu's source tree with add_subdirectory()
# and builds one program against it. Usage: subproject_check.sh SOURCE_DIR CXX
set -eu
src=$1 cxx=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S "$src/tests/builds/subproject_check" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DPERCPU_SOURCE_DIR="$src" >"$work/log" 2>&1 ||
  { cat "$work/log"; exit 1; }
cmake --build "$work/build" --target subproject_check >"$work/log" 2>&1 ||
  { cat "$work/log"; exit 1; }
"$work/build/subproject_check"
echo "add_subdirectory: the libraries alone, and a program links against percpu::percpu"
