# Sourced by the init of the machines that scripts/run-vm.sh and scripts/run-aarch64.sh boot
# (busybox sh; copied into the initramfs as /bin/vm-steps.sh): how each step reports.

# step NAME COMMAND...: runs COMMAND and prints "PERCPU-VM: NAME exit STATUS (SECONDS s)", the
# line the host script looks for.
step() {
  step_name=$1
  shift
  step_start=$(date +%s)
  "$@"
  step_rc=$?
  echo "PERCPU-VM: $step_name exit $step_rc ($(($(date +%s) - step_start)) s)"
}

# shards N COMMAND...: runs N copies of COMMAND, a GoogleTest binary (or a command that starts
# one), side by side, each with its share of the tests (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX:
# GoogleTest's own sharding, which its death tests' children ignore); then prints their outputs
# one after the other and returns the first non-zero status. Under emulation a test that runs
# one thread keeps one host CPU busy: two shards keep both of the host's.
shards() {
  shards_n=$1
  shift
  shards_i=0
  shards_pids=
  while [ $shards_i -lt "$shards_n" ]; do
    GTEST_TOTAL_SHARDS=$shards_n GTEST_SHARD_INDEX=$shards_i "$@" > /tmp/shard-$shards_i.log 2>&1 &
    shards_pids="$shards_pids $!"
    shards_i=$((shards_i + 1))
  done
  shards_rc=0
  shards_i=0
  for shards_pid in $shards_pids; do
    wait "$shards_pid"
    shards_status=$?
    [ $shards_rc -ne 0 ] || shards_rc=$shards_status
    echo "--- shard $shards_i of $shards_n: exit $shards_status"
    cat /tmp/shard-$shards_i.log
    shards_i=$((shards_i + 1))
  done
  return $shards_rc
}
