#!/bin/sh
# The API's compile-time checks: each snippet below must fail to compile with the message that
# names the mistake, and a correct program must compile (so a broken include path cannot pass).
# Usage: compile_fail_check.sh CXX INCLUDE_DIR
set -u
cxx=$1
inc=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
passed=0

# compile NAME EXPECT FLAGS: EXPECT is "ok", or a text that must appear in the first error.
check() {
  name=$1 expect=$2 flags=$3
  if $cxx $flags -I"$inc" -c "$dir/$name.cpp" -o "$dir/$name.o" >"$dir/$name.log" 2>&1; then
    if [ "$expect" = ok ]; then passed=$((passed + 1)); return; fi
    echo "FAIL $name: compiled, but should have failed with: $expect"
  else
    if [ "$expect" != ok ] && grep -m1 -E "error" "$dir/$name.log" | grep -qF "$expect"; then
      passed=$((passed + 1)); return
    fi
    echo "FAIL $name: expected ${expect}; the compiler said:"; head -5 "$dir/$name.log"
  fi
  failed=$((failed + 1))
}

cat >"$dir/correct.cpp" <<'CPP'
#include <percpu/percpu.h>
std::intptr_t slots[4096];
void f() {
  using M = std::integral_constant<percpu::index_mode, percpu::index_mode::cpu_id>;
  percpu::retry<M::value>([&](int i) { return percpu::add<M::value>(&slots[i], 1, i); });
}
CPP
check correct ok "-std=c++20 -Wall -Werror"

cat >"$dir/discarded.cpp" <<'CPP'
#include <percpu/percpu.h>
std::intptr_t slots[4096];
void f() { percpu::add<percpu::index_mode::cpu_id>(&slots[0], 1, percpu::current_cpu()); }
CPP
check discarded "one attempt: it stores nothing when it does not commit" "-std=c++20 -Werror=unused-result"

cat >"$dir/void_attempt.cpp" <<'CPP'
#include <percpu/percpu.h>
std::intptr_t slots[4096];
void f() {
  percpu::retry<percpu::index_mode::cpu_id>(
      [&](int i) { (void)percpu::add<percpu::index_mode::cpu_id>(&slots[i], 1, i); });
}
CPP
check void_attempt "percpu::retry: the attempt must take the index (int) and return" "-std=c++20"

cat >"$dir/no_index.cpp" <<'CPP'
#include <percpu/percpu.h>
void f() { percpu::retry<percpu::index_mode::cpu_id>([&] { return percpu::status::committed; }); }
CPP
check no_index "percpu::retry: the attempt must take the index (int) and return" "-std=c++20"

cat >"$dir/cxx17.cpp" <<'CPP'
#include <percpu/percpu.h>
CPP
check cxx17 "percpu needs C++20" "-std=c++17"

echo "compile checks: $passed passed, $failed failed"
[ $failed -eq 0 ]
