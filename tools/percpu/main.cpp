// The percpu command: info, bench, deny-rseq.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <iostream>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"percpu: userspace per-CPU data through restartable sequences (rseq)"};
  app.require_subcommand(1);

  auto* info = app.add_subcommand("info", "Show the rseq registration, usable fields and topology");
  bool info_as_json = false;
  info->add_flag("--json", info_as_json, "Print one JSON object");

  auto* bench = app.add_subcommand("bench", "Run benchmark suites");
  bench->require_subcommand(1);
  percpu::cli::bench_options options;
  bench->add_flag("--quick", options.quick, "Fewer, shorter repetitions");
  bench->add_option("--repetitions", options.repetitions, "Repetitions per benchmark (median)")
      ->check(CLI::Range(1, 1000));
  bench->add_option("--json", options.json_out, "Write the raw results to this JSON file");
  auto* getcpu = bench->add_subcommand(
      "getcpu", "Cost of asking for the current CPU: percpu vs glibc, vDSO, system call, insns");
  auto* counter = bench->add_subcommand(
      "counter", "A counter incremented by 1-256 threads: percpu vs atomics, locks, thread_local");

  auto* deny = app.add_subcommand(
      "deny-rseq", "Run a command with rseq(2) failing (seccomp), to exercise fallback mode");
  std::string err_name = "ENOSYS";
  std::vector<std::string> command;
  deny->add_option("--errno", err_name, "Error rseq(2) returns")
      ->check(CLI::IsMember({"ENOSYS", "EPERM", "EINVAL"}));
  deny->add_option("command", command, "Command and arguments")->required();
  deny->prefix_command();

  CLI11_PARSE(app, argc, argv);

  if (info->parsed()) {
    const auto j = percpu::cli::info_json();
    if (info_as_json) {
      std::cout << j.dump(2) << "\n";
    } else {
      percpu::cli::print_info(j);
    }
    return 0;
  }
  if (getcpu->parsed()) return percpu::cli::bench_getcpu(options);
  if (counter->parsed()) return percpu::cli::bench_counter(options);
  if (deny->parsed()) {
    if (command.empty()) command = deny->remaining();
    const int err = err_name == "EPERM" ? EPERM : err_name == "EINVAL" ? EINVAL : ENOSYS;
    return percpu::cli::deny_rseq_exec(err, command);
  }
  return 0;
}
