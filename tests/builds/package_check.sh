#!/usr/bin/env sh
# Builds tests/package_check against the build tree BUILD as a user would without installing:
# with CMake (CMAKE_PREFIX_PATH=BUILD) and with pkg-config (PKG_CONFIG_PATH=BUILD), and runs
# both programs. Usage: package_check.sh SOURCE_DIR BUILD_DIR CXX
set -eu
src=$1 build=$2 cxx=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S "$src/tests/builds/package_check" -B "$work/cmake" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$build" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
cmake --build "$work/cmake" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
"$work/cmake/package_check"
flags=$(PKG_CONFIG_PATH="$build" pkg-config --cflags --libs percpu)
# shellcheck disable=SC2086
"$cxx" -std=c++20 "$src/tests/builds/package_check/main.cpp" $flags -Wl,-rpath,"$build" -o "$work/pc_check"
"$work/pc_check"
echo "build tree package: cmake and pkg-config both found percpu"
