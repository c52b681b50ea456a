// `percpu bench ops`: every per-CPU primitive, side by side with what an expert would write
// instead. The contenders of one primitive share this description; each implementation file
// (ops.cpp: percpu and the atomic baseline; ops_minimal.cpp: hand-written minimal
// rseq sequences; ops_librseq.cpp: librseq, when it was found at build time) fills the
// operations it has.
#pragma once

#include <percpu/cpu.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/runner.h"

namespace percpu::cli {

/// The primitives the suite measures, one row each (per index mode and shape).
enum class op_primitive {
  current_cpu,      ///< the CPU number
  current_mm_cid,   ///< the concurrency id
  counter_add,      ///< add 1 to the calling thread's slot
  lock_unlock,      ///< take and release the calling thread's per-CPU lock
  list_pop_push,    ///< pop an item from the calling thread's list and push it back
  buffer_push_pop,  ///< push a pointer onto the calling thread's buffer and pop it
  memcpy16,         ///< push a 16-byte record by copy and pop it
  memcpy64,         ///< the same with 64 bytes
  pool_alloc_free,  ///< allocate an 8-byte per-CPU object and free it
};

/// Who implements a contender: a column of the table.
enum class op_who { percpu, c_api, minimal, baseline, librseq };

/// How the caller's code holds the operation: the two shapes users write.
enum class op_shape {
  call,     ///< through a call of a function of its own, not inlined into the loop
  inlined,  ///< inlined into the caller's loop, so loads of state may be hoisted out of it
};

/// The loop one thread of a contender runs: operations until `stop`, returning how many.
using op_body = std::uint64_t (*)(int thread, const std::atomic<bool>& stop);

/// One contender: the loop one thread runs, and what to do before each repetition's threads
/// start (refill lists, say), if anything.
struct op_contender {
  op_primitive primitive;
  index_mode mode;
  op_who who;
  op_body body;
  std::function<void()> before_run;
  op_shape shape = op_shape::call;
};

/// One operation of a contender, in a function of its own: not inlined into the loop, and
/// starting on a 64-byte boundary, so every contender's code has the same placement. (Inlined
/// into the loop, the placement of the loop in the binary alone moved single results by up to
/// 2x on our CPUs, more than the differences this suite measures.)
template <auto Op>
[[gnu::noinline, gnu::aligned(64)]] void call_op() {
  Op();
}

/// The call shape's loop: call_op<Op>() until `stop` (runner.h's run_until).
template <auto Op>
std::uint64_t op_loop(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { call_op<Op>(); });
}

/// The inline shape's loop: Op and everything it calls inlined into the loop (flatten), the
/// function starting on a 64-byte boundary as call_op does. What stays a call is what the
/// implementation keeps out of line (its slow paths).
template <auto Op>
[[gnu::noinline, gnu::flatten, gnu::aligned(64)]] std::uint64_t inline_loop(
    int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { Op(); });
}

/// The loop of shape S: op_loop<Op> or inline_loop<Op>.
template <auto Op, op_shape S>
std::uint64_t shaped_loop(int thread, const std::atomic<bool>& stop) {
  if constexpr (S == op_shape::call) {
    return op_loop<Op>(thread, stop);
  } else {
    return inline_loop<Op>(thread, stop);
  }
}

/// Adds Op's contender in both shapes; `Wrap<Op, S>` is the loop of each (shaped_loop, or one
/// that prepares the thread first and then runs it).
template <auto Op, template <auto, op_shape> class Wrap>
void add_shapes(std::vector<op_contender>& out, op_primitive p, index_mode m, op_who w,
                const std::function<void()>& before_run = {}) {
  out.push_back({p, m, w, Wrap<Op, op_shape::call>::loop, before_run, op_shape::call});
  out.push_back({p, m, w, Wrap<Op, op_shape::inlined>::loop, before_run, op_shape::inlined});
}

/// Adds the rows a contender with its own sequences has besides the index read (counter add,
/// lock+unlock, list pop+push, buffer push+pop, memcpy buffer 16 B and 64 B), each in both
/// shapes, on regions that `clear` empties and `refill` fills with list items before each run.
template <template <auto, op_shape> class Wrap, auto Add, auto Lock, auto PopPush, auto Buffer,
          auto Copy16, auto Copy64>
void add_structure_rows(std::vector<op_contender>& out, index_mode m, op_who w,
                        const std::function<void()>& clear, const std::function<void()>& refill) {
  add_shapes<Add, Wrap>(out, op_primitive::counter_add, m, w, clear);
  add_shapes<Lock, Wrap>(out, op_primitive::lock_unlock, m, w, clear);
  add_shapes<PopPush, Wrap>(out, op_primitive::list_pop_push, m, w, refill);
  add_shapes<Buffer, Wrap>(out, op_primitive::buffer_push_pop, m, w, clear);
  add_shapes<Copy16, Wrap>(out, op_primitive::memcpy16, m, w, clear);
  add_shapes<Copy64, Wrap>(out, op_primitive::memcpy64, m, w, clear);
}

/// The plain wrapper of add_shapes(): the shape's loop, nothing before it.
template <auto Op, op_shape S>
struct plain {
  static std::uint64_t loop(int thread, const std::atomic<bool>& stop) {
    return shaped_loop<Op, S>(thread, stop);
  }
};

/// Keeps the compiler from dropping a value an inlined loop computes, at no cost (no store).
template <class T>
[[gnu::always_inline]] inline void keep(T value) {
  asm volatile("" : : "r"(value));
}

/// Items in each index's list or buffer before a run, so that pops find one even when threads
/// of one CPU interleave.
inline constexpr int kPrefill = 32;
/// Entries per index of the buffers (pointers or records).
inline constexpr int kBufferCapacity = 64;

/// An item of the lists: its link, on a cache line of its own.
struct op_list_item {
  op_list_item* next;
  char pad[56];
};

/// The per-index memory of the minimal, librseq and atomic contenders, one region per index:
/// word 0 is the counter, the lock, the list head or the count; word 1 the atomic side's lock;
/// the entries or records start at word 8, room for kBufferCapacity records of 64 bytes. Plus
/// kPrefill list items per index. Allocated once for the run (never freed: the suite's threads use
/// it to the end). Regions lie kRegionShift-sized strides apart, a power of two, as librseq's
/// mempool lays out per-CPU memory: the address of an index's region is one shift and one add
/// (region_of()).
struct op_memory {
  static constexpr unsigned kRegionShift = 13;
  static constexpr std::size_t kRegionBytes = std::size_t{1} << kRegionShift;
  struct alignas(kRegionBytes) region {
    std::intptr_t word[8 + kBufferCapacity * 8];
  };
  static_assert(sizeof(region) == kRegionBytes);
  explicit op_memory(int slots)
      : slots(slots),
        regions(static_cast<std::size_t>(slots)),
        items(static_cast<std::size_t>(slots) * kPrefill) {}
  /// Words of index `i`'s region, from the regions' base (a global copy of regions.data(), so
  /// that the contenders load one pointer, as a user of a per-CPU pool does).
  static std::intptr_t* region_of(char* base, int i) {
    return reinterpret_cast<std::intptr_t*>(base + (static_cast<std::size_t>(i) << kRegionShift));
  }
  char* base() { return reinterpret_cast<char*>(regions.data()); }
  /// Zeroes every index's words 0 and 1 (counts, locks, heads).
  void clear() {
    for (region& r : regions) r.word[0] = r.word[1] = 0;
  }
  /// clear(), then links each index's kPrefill items into its list (head in word 0).
  void refill_lists() {
    clear();
    for (int i = 0; i < slots; ++i)
      for (int k = 0; k < kPrefill; ++k) {
        op_list_item* it = &items[static_cast<std::size_t>(i) * kPrefill + k];
        it->next = reinterpret_cast<op_list_item*>(regions[i].word[0]);
        regions[i].word[0] = reinterpret_cast<std::intptr_t>(it);
      }
  }
  int slots;
  std::vector<region> regions;
  std::vector<op_list_item> items;
};

/// The hand-written minimal sequences (x86-64; empty elsewhere, with `why_not` saying so): read
/// the index, arm, compare, commit, nothing else. `slots` is the index space.
std::vector<op_contender> minimal_contenders(int slots, std::string& why_not);

/// librseq's operations (when percpu was built with librseq; else empty, with `why_not`).
std::vector<op_contender> librseq_contenders(int slots, std::string& why_not);

/// The C API's (<percpu.h>) index reads and counter add, in C loops (ops_c.c).
std::vector<op_contender> c_api_contenders();

/// Objects of the memory-per-object measurement: 8-byte per-CPU objects, each slot written.
inline constexpr int kMemoryObjects = 65536;

/// The process's resident memory now, in bytes (/proc/self/statm), 0 if it cannot be read.
std::size_t resident_bytes_now();

/// Resident bytes per object of librseq's mempool (stride RSEQ_MEMPOOL_STRIDE, `slots` CPUs):
/// the process's growth while kMemoryObjects 8-byte objects are allocated and every slot of
/// each is written, divided by their number; nullopt when percpu was built without librseq.
std::optional<double> librseq_pool_bytes_per_object(int slots);

}  // namespace percpu::cli
