// `percpu bench getcpu`: the cost of asking "which CPU am I on?", every way Linux offers (on
// x86-64 also LSL, RDTSCP and RDPID; arm64 has no vDSO getcpu),
// measured side by side in one run (medians of repetitions), with each one's speedup over the
// getcpu system call and over the vDSO (the comparison the getcpu-cache proposal makes).
#include <dlfcn.h>
#include <fmt/core.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include <percpu/percpu.h>
#include <algorithm>
#include <functional>

#include "bench/runner.h"
#include "commands.h"

namespace percpu::cli {
namespace {

using vdso_getcpu_fn = long (*)(unsigned*, unsigned*, void*);

// The vDSO's getcpu, found through glibc's link map entry for the vDSO.
vdso_getcpu_fn find_vdso_getcpu() {
  void* vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (vdso == nullptr) return nullptr;
  return reinterpret_cast<vdso_getcpu_fn>(dlsym(vdso, "__vdso_getcpu"));
}

#if defined(__x86_64__)
bool cpu_has_rdpid() {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 22));
}

bool cpu_has_rdtscp() {
  unsigned a, b, c, d;
  return __get_cpuid(0x80000001, &a, &b, &c, &d) && (d & (1u << 27));
}

// Linux stores (node << 12 | cpu) in the limit of GDT entry 15 (selector 0x7b) and in
// TSC_AUX, which LSL, RDTSCP and RDPID read.
constexpr unsigned kCpuNodeSelector = 0x7b;
int cpu_from_lsl() {
  unsigned p;
  asm volatile("lsl %1, %0" : "=r"(p) : "r"(kCpuNodeSelector));
  return static_cast<int>(p & 0xfff);
}
int cpu_from_rdtscp() {
  unsigned aux;
  __rdtscp(&aux);
  return static_cast<int>(aux & 0xfff);
}
int cpu_from_rdpid() {
  unsigned long aux;
  asm volatile("rdpid %0" : "=r"(aux));
  return static_cast<int>(aux & 0xfff);
}
#endif

int cpu_from_syscall() {
  unsigned cpu;
  syscall(SYS_getcpu, &cpu, nullptr, nullptr);
  return static_cast<int>(cpu);
}

struct method {
  std::string name;
  std::function<int()> read;  // for the agreement check; the benchmark inlines its own loop
  void (*bench)(benchmark::State&);
};

vdso_getcpu_fn g_vdso = nullptr;
std::intptr_t g_raw_offset = 0;

int raw_cpu_id_load() {
  return arch::load_area_i32<abi::kOffCpuId>(g_raw_offset);
}

template <class F>
void loop(benchmark::State& state, F f) {
  for (auto _ : state) benchmark::DoNotOptimize(f());
}

std::vector<method> methods(bool rseq_area) {
  std::vector<method> m;
  m.push_back({"percpu::current_cpu()", [] { return current_cpu(); },
               [](benchmark::State& s) { loop(s, [] { return current_cpu(); }); }});
  m.push_back({"percpu::current_cpu_node()", [] { return current_cpu_node().cpu; },
               [](benchmark::State& s) { loop(s, [] { return current_cpu_node().cpu; }); }});
  m.push_back({"percpu::current_node()", nullptr,
               [](benchmark::State& s) { loop(s, [] { return current_node(); }); }});
  m.push_back({"percpu::current_mm_cid()", nullptr,
               [](benchmark::State& s) { loop(s, [] { return current_mm_cid(); }); }});
  if (rseq_area)
    m.push_back({"raw rseq cpu_id load", raw_cpu_id_load,
                 [](benchmark::State& s) { loop(s, raw_cpu_id_load); }});
  m.push_back({"glibc sched_getcpu()", [] { return sched_getcpu(); },
               [](benchmark::State& s) { loop(s, [] { return sched_getcpu(); }); }});
  if (g_vdso)
    m.push_back({"vDSO getcpu",
                 [] {
                   unsigned c = 0;
                   g_vdso(&c, nullptr, nullptr);
                   return static_cast<int>(c);
                 },
                 [](benchmark::State& s) {
                   loop(s, [] {
                     unsigned c;
                     g_vdso(&c, nullptr, nullptr);
                     return c;
                   });
                 }});
  m.push_back({"getcpu system call", cpu_from_syscall,
               [](benchmark::State& s) { loop(s, cpu_from_syscall); }});
#if defined(__x86_64__)  // instructions that read the CPU number Linux stores for them
  if (cpu_has_rdpid())
    m.push_back({"RDPID", cpu_from_rdpid, [](benchmark::State& s) { loop(s, cpu_from_rdpid); }});
  if (cpu_has_rdtscp())
    m.push_back({"RDTSCP", cpu_from_rdtscp, [](benchmark::State& s) { loop(s, cpu_from_rdtscp); }});
  m.push_back({"LSL", cpu_from_lsl, [](benchmark::State& s) { loop(s, cpu_from_lsl); }});
#endif
  return m;
}

// Pins the thread to each allowed CPU in turn and checks that a method reports it.
bool agrees_on_every_cpu(const std::function<int()>& read) {
  bool ok = true;
  on_each_allowed_cpu([&](int cpu) { ok = ok && read() == cpu; });
  return ok;
}

}  // namespace

int bench_getcpu(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const registration_info reg = registration();
  g_vdso = find_vdso_getcpu();
  (void)current_cpu();  // registers percpu's own area on this thread if percpu owns registration
  g_raw_offset = reg.rseq_offset;
  const bool rseq_area = reg.owner != area_owner::none;
  const bench_plan plan = make_plan(options, {9, 0.2}, {5, 0.05});

  auto ms = methods(rseq_area);
  std::map<std::string, bool> agrees;
  for (const auto& m : ms) {
    if (m.read) agrees[m.name] = agrees_on_every_cpu(m.read);
    register_benchmark(m.name, m.bench)->Repetitions(plan.repetitions)->MinTime(plan.min_time_s);
  }
  const auto results = run_registered("getcpu");

  fmt::print("percpu bench getcpu: ns per call, median of {} repetitions (mode: {}, area: {})\n\n",
             plan.repetitions, reg.fallback ? "fallback" : "rseq", to_string(reg.owner));
  const bench_result* sys = find_result(results, "getcpu system call");
  const bench_result* vdso = find_result(results, "vDSO getcpu");
  fmt::print("{:<28} {:>9} {:>8} {:>11} {:>9}  {}\n", "method", "ns/call", "spread", "vs syscall",
             "vs vDSO", "reports the right CPU");
  for (const auto& r : results) {
    auto ratio = [&](const bench_result* base) {
      return base ? fmt::format("{:.1f}x", base->median_ns / r.median_ns) : std::string("-");
    };
    const auto it = agrees.find(r.name);
    const std::string check = it == agrees.end() ? "-" : it->second ? "yes" : "NO";
    fmt::print("{:<28} {:>9.2f} {:>7}% {:>11} {:>9}  {}{}\n", r.name, r.median_ns,
               r.spread_percent(), ratio(sys), ratio(vdso), check, r.noisy() ? " (noisy)" : "");
  }

  const bench_result* ours = find_result(results, "percpu::current_cpu()");
  const bench_result* pair = find_result(results, "percpu::current_cpu_node()");
  const bench_result* glibc = find_result(results, "glibc sched_getcpu()");
  const bench_result* raw = find_result(results, "raw rseq cpu_id load");
  fmt::print("\n");
  if (ours && glibc)
    fmt::print("current_cpu() is {:.1f}x as fast as glibc sched_getcpu()\n",
               glibc->median_ns / ours->median_ns);
  if (ours && raw)
    fmt::print("current_cpu() takes {:.2f}x the time of a raw cpu_id load\n",
               ours->median_ns / raw->median_ns);
  if (pair) fmt::print("consistent cpu/node pair: {:.2f} ns\n", pair->median_ns);
  if (ours && sys && vdso)
    fmt::print(
        "the getcpu-cache proposal measured 44x over the system call (ARM) and 14x over the vDSO "
        "(x86-64); here: {:.0f}x and {:.0f}x\n",
        sys->median_ns / ours->median_ns, vdso->median_ns / ours->median_ns);
  if (std::any_of(results.begin(), results.end(), [](const auto& r) { return r.noisy(); }))
    fmt::print(
        "rows marked noisy varied by more than 20% between repetitions: the machine was "
        "busy; rerun, or raise --repetitions\n");

  if (!options.json_out.empty()) {
    nlohmann::json extra;
    extra["mode"] = reg.fallback ? "fallback" : "rseq";
    extra["owner"] = to_string(reg.owner);
    for (const auto& [name, ok] : agrees) extra["agrees"][name] = ok;
    if (!write_json(options.json_out, "getcpu", results, extra)) return 1;
  }
  return 0;
}

}  // namespace percpu::cli
