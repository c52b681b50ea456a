#!/usr/bin/env sh
# Installs the build tree BUILD into a fresh prefix, as `cmake --install` does for a user, and
# checks what lands there: only <percpu.h>, the public headers under include/percpu/ and
# percpu/internal/ below them; a C++ program that includes every installed header compiles (with -Wall -Werror), links
# against the installed libraries (find_package, and pkg-config's installed percpu.pc) and runs;
# percpu malloc's header compiles as C; <percpu.h> builds as C11 (-pedantic) through CMake and
# pkg-config, links and runs. Usage: install_check.sh SOURCE_DIR BUILD_DIR CXX CC
set -eu
src=$1 build=$2 cxx=$3 cc=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }

cd "$prefix/include"
stray=$(find . -type f | grep -v -E '^\./percpu\.h$|^\./percpu/[a-z0-9_]+\.h$|^\./percpu/internal/' || true)
if [ -n "$stray" ]; then
  echo "FAIL: installed beside the public headers and internal/:"; echo "$stray"; exit 1
fi
case $(uname -m) in
  x86_64) other=aarch64 ;;
  aarch64) other=x86_64 ;;
  *) other=none ;;
esac
# Public headers first (each allows internal/ after it), then every internal header of this
# architecture.
{
  echo '#include <percpu.h>'
  find percpu -maxdepth 1 -name '*.h' | sort | sed 's/.*/#include <&>/'
  find percpu/internal -name '*.h' ! -path "*/arch/$other/*" | sort | sed 's/.*/#include <&>/'
} >"$work/all_headers.h"
echo "$(wc -l <"$work/all_headers.h") installed headers included"
cd "$work"

# An internal header on its own is refused with a message that names the way in.
echo '#include <percpu/internal/config.h>' >"$work/direct.cpp"
if "$cxx" -std=c++20 -I"$prefix/include" -c "$work/direct.cpp" -o "$work/direct.o" \
  >"$work/direct.log" 2>&1; then
  echo "FAIL: <percpu/internal/config.h> compiled when included directly"; exit 1
fi
grep -q "is internal: include <percpu/percpu.h>" "$work/direct.log" ||
  { echo "FAIL: no clear error for a direct internal include:"; head -5 "$work/direct.log"; exit 1; }

cmake -S "$src/tests/builds/install_check" -B "$work/cmake" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_PREFIX_PATH="$prefix" -DALL_HEADERS="$work/all_headers.h" >"$work/log" 2>&1 ||
  { cat "$work/log"; exit 1; }
cmake --build "$work/cmake" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
"$work/cmake/install_check"
"$work/cmake/c_api_check"
if [ -f "$prefix/include/percpu/prometheus_collector.h" ]; then
  [ -x "$work/cmake/prometheus_check" ] ||
    { echo "FAIL: the exporter's header is installed but percpu::percpu_prometheus is not"; exit 1; }
  "$work/cmake/prometheus_check"
fi

pcdir=$(dirname "$(find "$prefix" -name percpu.pc | head -n 1)")
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs percpu)
libdir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=libdir percpu)
# shellcheck disable=SC2086
"$cxx" -std=c++20 -include "$work/all_headers.h" "$src/tests/builds/install_check/main.cpp" $flags \
  -lpercpu_malloc -Wl,-rpath,"$libdir" -o "$work/pc_check"
# The package's flags leave the standard to the program: a C++23 build stays C++23.
printf '#include <percpu/percpu.h>\nstatic_assert(__cplusplus > 202002L, "the flags lowered the standard");\nint main() {}\n' \
  >"$work/std_check.cpp"
# shellcheck disable=SC2086
"$cxx" -std=c++2b "$work/std_check.cpp" $flags -o "$work/std_check" ||
  { echo "FAIL: pkg-config's flags turned a C++23 build into an older standard"; exit 1; }
"$work/pc_check"

printf '#include <percpu/malloc.h>\nint main(void) { percpu_malloc_stats_print(-1); return 0; }\n' \
  >"$work/c_check.c"
"$cc" -std=c99 -Wall -Werror -I"$prefix/include" "$work/c_check.c" -L"$libdir" -lpercpu_malloc \
  -Wl,-rpath,"$libdir" -o "$work/c_check"
"$work/c_check"
# The C API through pkg-config: C11, pedantic.
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic "$src/tests/builds/install_check/c_api_check.c" \
  $flags -Wl,-rpath,"$libdir" -o "$work/c_api_pc_check"
"$work/c_api_pc_check"
echo "installed tree: public headers and internal/ only; every header compiles and links"
