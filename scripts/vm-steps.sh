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
