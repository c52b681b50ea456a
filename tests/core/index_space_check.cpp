// Run by core_robustness_test.cpp under a private mount namespace whose sysfs shows fewer CPUs
// than the kernel has: every structure must still count exactly, and the thread must never use
// an index outside the memory that backs it.
//
//   index_space_check              on whichever CPU it was started (typically outside the view)
//   index_space_check --move-to N  initialize first, then move to CPU N (an id that appears
//                                  after startup): the process must switch to fallback mode
//
// Prints what it saw; exits 0 when every count is exact.
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include <percpu/percpu.h>
#include "malloc/allocator.h"

namespace {

struct item {
  item* next = nullptr;
};

bool move_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof(one), &one) == 0;
}

template <percpu::index_mode M>
bool counts_exactly(const char* name) {
  percpu::counter<std::int64_t, M> c;
  for (int i = 0; i < 1000; ++i) c.add(1);
  percpu::freelist<item, &item::next, M> list;
  std::vector<item> items(100);
  for (item& it : items) list.push(&it);
  std::set<item*> popped;
  while (item* p = list.pop()) popped.insert(p);
  for (int i = 0; i < list.slots(); ++i)  // a drain finds any the pop above did not see
    for (item* p = list.drain(i); p; p = p->next) popped.insert(p);
  percpu::buffer<item*, M> buf(16);
  int pushed = 0, back = 0;
  for (item& it : items) pushed += buf.push(&it) ? 1 : 0;
  while (buf.pop() != nullptr) ++back;
  const bool ok = c.load() == 1000 && popped.size() == items.size() && back == pushed;
  std::printf("%s: counter %lld of 1000, list %zu of 100, buffer %d of %d, slots %d\n", name,
              static_cast<long long>(c.load()), popped.size(), back, pushed, c.slots());
  return ok;
}

bool malloc_works() {
  std::vector<char*> blocks;
  for (int i = 0; i < 2000; ++i) {
    auto* p = static_cast<char*>(percpu::malloc_impl::allocate(16 + i % 500));
    if (p == nullptr) return false;
    std::memset(p, i & 0xff, 16);
    blocks.push_back(p);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i][15] != static_cast<char>(i & 0xff)) return false;
    percpu::malloc_impl::deallocate(blocks[i]);
  }
  std::printf("malloc: 2000 blocks allocated and freed intact\n");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const auto reg = percpu::registration();  // initializes: sizes the index spaces now
  if (argc == 3 && std::strcmp(argv[1], "--move-to") == 0 && !move_to(std::atoi(argv[2]))) {
    std::printf("cannot move to CPU %s\n", argv[2]);
    return 2;
  }
  const auto& t = percpu::machine_topology();
  std::printf("cpu %d, mm_cid %d, index spaces %d/%d, mismatch: %s\n", percpu::current_cpu(),
              percpu::current_mm_cid(), t.cpu_id_bound, t.mm_cid_bound,
              t.mismatch.empty() ? "none" : t.mismatch.c_str());
  bool ok = counts_exactly<percpu::index_mode::cpu_id>("cpu_id");
  ok = counts_exactly<percpu::index_mode::mm_cid>("mm_cid") && ok;
  ok = malloc_works() && ok;
  const auto now = percpu::registration();
  std::printf("mode %s%s%s\n", now.fallback ? "fallback" : "rseq", now.fallback ? ": " : "",
              now.fallback_reason.c_str());
  (void)reg;
  return ok ? 0 : 1;
}
