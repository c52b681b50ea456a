#!/usr/bin/env bash
# Runs real programs with percpu malloc preloaded and checks their results: python3 building and
# summing a large dict, sqlite3 running a query workload, git on a fresh repository, and the
# project's own test binary (threads, signals, fork, fallback switches), and a multi-threaded C++
# program (cross-thread frees, thread exit, a signal handler, forks while threads allocate).
# Usage: malloc_preload_check.sh LIBPERCPU_MALLOC PERCPU_TESTS MALLOC_THREADS_PROGRAM
set -euo pipefail
lib=$1
tests=$2
program=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() { LD_PRELOAD=$lib "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$(run python3 -c '
import threading
d = {}
for i in range(200000):
    d[str(i)] = [i] * 5
def work(k):
    s = [bytes(64 + j % 300) for j in range(20000)]
    return len(s)
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print(sum(len(v) for v in d.values()))')
[[ $out == 1000000 ]] || fail "python3 printed '$out'"
echo "python3: ok"

stats=$(PERCPU_MALLOC_STATS=1 run python3 -c 'x = [str(i) for i in range(10000)]' 2>&1)
[[ $stats == *"percpu malloc: rss"* ]] || fail "PERCPU_MALLOC_STATS printed '$stats'"
echo "statistics at exit: ok"

out=$(run sqlite3 "$work/db.sqlite" "
create table t(a integer, b text);
with recursive c(x) as (select 1 union all select x + 1 from c limit 100000)
insert into t select x, hex(randomblob(20)) from c;
create index i on t(b);
select count(*), sum(a), count(distinct b) from t;")
[[ $out == "100000|5000050000|100000" ]] || fail "sqlite3 printed '$out'"
echo "sqlite3: ok"

(
  cd "$work"
  run git init -q repo
  cd repo
  for i in $(seq 1 20); do
    seq 1 $((i * 100)) > "file$i"
    run git add "file$i"
    run git -c user.email=t@example.com -c user.name=test commit -qm "commit $i"
  done
  run git gc -q
  [[ $(run git log --oneline | wc -l) == 20 ]] || fail "git log"
  [[ $(run git show HEAD:file20 | wc -l) == 2000 ]] || fail "git show"
)
echo "git: ok"

out=$(run "$program" 20000)
[[ $out == "ok 80000 objects"* ]] || fail "malloc_threads_program printed '$out'"
out=$(GLIBC_TUNABLES=glibc.pthread.rseq=0 run "$program" 5000)
[[ $out == "ok 20000 objects"* ]] || fail "malloc_threads_program (own rseq area) printed '$out'"
echo "malloc_threads_program: ok ($out)"

# Less the tests that run a program with and without the preload and compare the two
# (malloc/large_test.cpp): the preload is inherited, so their glibc side would be percpu
# malloc too, and the unpreloaded suite runs them as they are meant.
run "$tests" --gtest_brief=1 --gtest_filter='-MallocLarge.*:MallocGlibcApi.*' > "$work/tests.log" 2>&1 ||
  { tail -30 "$work/tests.log"; fail "percpu_tests under LD_PRELOAD"; }
echo "percpu_tests: ok"
