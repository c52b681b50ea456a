// The structures under `percpu stress`: what a worker, a signal handler, the drainer and a forked
// child do with each, and how conservation is checked at the end.
#include <sched.h>

#include <percpu/percpu.h>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <vector>
#include "malloc/allocator.h"
#include "malloc/cpu_cache.h"
#include "malloc/size_classes.h"

#include "stress/harness.h"

namespace percpu::cli {
namespace {

// Workers yield while holding an item every this many operations (when yielding is on), so
// other threads run on the same CPU while the holder is off it.
constexpr long kYieldEvery = 4096;

// An item that circulates between the structure and the threads. `holders` counts the threads
// that believe they own it: more than one at a time is a duplicate.
struct item {
  item* next = nullptr;
  std::atomic<int> holders{0};
};

void take(item* p, stress_tally& tally) {
  if (p->holders.fetch_add(1, std::memory_order_acq_rel) != 0)
    tally.duplicated.fetch_add(1, std::memory_order_relaxed);
}
void give(item* p) {
  p->holders.fetch_sub(1, std::memory_order_acq_rel);
}

// Items per worker kept in circulation.
constexpr int kItemsPerThread = 16;

// Counts how often each item is stored at the end; fills lost and duplicated.
void check_census(const std::vector<int>& seen, stress_result& r) {
  for (int n : seen) {
    if (n == 0) ++r.lost;
    if (n > 1) r.duplicated += static_cast<std::uint64_t>(n - 1);
  }
}

// ---- counter: every increment counted, including the handlers' and those a reset took ----
template <index_mode M>
class counter_workload final : public stress_workload {
 public:
  explicit counter_workload(stress_tally& tally) : tally_(tally) {}
  void op(long) override { c_.add(1); }
  void signal_op() noexcept override {
    c_.add(1);
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int) override {  // the drainer's part: resets
    taken_ += c_.reset();
    tally_.drains.fetch_add(1, std::memory_order_relaxed);
  }
  bool child_check() override {
    const auto before = c_.load();
    c_.add(5);
    return c_.load() == before + 5;
  }
  void verify(stress_result& r) override {
    const auto expected = static_cast<std::int64_t>(r.ops + r.handler_ops);
    const auto counted = taken_ + c_.load();
    if (counted < expected) r.lost = static_cast<std::uint64_t>(expected - counted);
    if (counted > expected) r.duplicated = static_cast<std::uint64_t>(counted - expected);
  }

 private:
  stress_tally& tally_;
  counter<std::int64_t, M> c_;
  std::int64_t taken_ = 0;
};

// ---- freelist: every item in exactly one list at the end, never held twice ----
template <index_mode M>
class freelist_workload final : public stress_workload {
 public:
  freelist_workload(int threads, stress_tally& tally)
      : tally_(tally), items_(static_cast<std::size_t>(threads) * kItemsPerThread) {
    for (auto& it : items_) list_.push(&it);
  }
  void op(long i) override {
    item* p = list_.pop();
    if (!p) return;
    take(p, tally_);
    if (i % kYieldEvery == 0) sched_yield();
    give(p);
    list_.push(p);
  }
  void signal_op() noexcept override {
    item* p = list_.pop();
    if (!p) return;
    take(p, tally_);
    give(p);
    list_.push(p);
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int index) override {
    const remote_result<item*> drained = list_.try_drain(index);
    if (!tally_.count_drain(drained.error)) return;
    item* chain = drained.value;
    while (chain) {
      item* next = chain->next;
      take(chain, tally_);
      give(chain);
      list_.push(chain);
      chain = next;
    }
  }
  bool child_check() override {
    item* p = list_.pop();
    if (p) list_.push(p);
    item* all = list_.drain(0);  // no remote operation may be left half-done in the child
    while (all) {
      item* next = all->next;
      list_.push(all);
      all = next;
    }
    return true;
  }
  void verify(stress_result& r) override {
    std::vector<int> seen(items_.size());
    for (int i = 0; i < list_.slots(); ++i)
      for (item* p = list_.drain(i); p; p = p->next) {
        const auto k = static_cast<std::size_t>(p - items_.data());
        if (k >= items_.size()) {
          ++r.corrupt;
          break;
        }
        ++seen[k];
      }
    check_census(seen, r);
  }

 private:
  stress_tally& tally_;
  std::vector<item> items_;
  freelist<item, &item::next, M, false> list_;
};

// ---- buffer: every pointer stored exactly once at the end ----
template <index_mode M>
class buffer_workload final : public stress_workload {
 public:
  buffer_workload(int threads, stress_tally& tally)
      : tally_(tally),
        items_(static_cast<std::size_t>(threads) * kItemsPerThread),
        buf_(items_.size()) {  // capacity for every item on one index: pushes never fail
    for (auto& it : items_) buf_.push(&it);
  }
  void op(long i) override {
    item* p = buf_.pop();
    if (!p) return;
    take(p, tally_);
    if (i % kYieldEvery == 0) sched_yield();
    give(p);
    put_back(p);
  }
  void signal_op() noexcept override {
    item* p = buf_.pop();
    if (!p) return;
    take(p, tally_);
    give(p);
    put_back(p);
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int index) override {
    const remote_result<std::vector<item*>> drained = buf_.try_drain(index);
    if (!tally_.count_drain(drained.error)) return;
    for (item* p : drained.value) {
      take(p, tally_);
      give(p);
      put_back(p);
    }
  }
  bool child_check() override {
    item* p = buf_.pop();
    if (p && !buf_.push(p)) return false;
    for (item* q : buf_.drain(0))
      if (!buf_.push(q)) return false;
    return true;
  }
  void verify(stress_result& r) override {
    std::vector<int> seen(items_.size());
    for (int i = 0; i < buf_.slots(); ++i)
      for (item* p : buf_.drain(i)) {
        const auto k = static_cast<std::size_t>(p - items_.data());
        if (k >= items_.size()) {
          ++r.corrupt;
          continue;
        }
        ++seen[k];
      }
    check_census(seen, r);
  }

 private:
  // A full buffer cannot happen (capacity = all items); if it did, the item would be lost, and
  // verify() reports it.
  void put_back(item* p) noexcept {
    if (!buf_.push(p)) tally_.corrupt.fetch_add(1, std::memory_order_relaxed);
  }

  stress_tally& tally_;
  std::vector<item> items_;
  buffer<item*, M, false> buf_;
};

// ---- memcpy_buffer: every record once and intact (a torn copy breaks its check words) ----
struct record {
  std::uint64_t id;
  std::uint64_t words[3];  // id * k: a torn copy mixes two records
  std::uint8_t tail[7];    // 39 bytes: the copy's 0-7 byte tail too
};

record make_record(std::uint64_t id) {
  record r{id, {id * 3, id * 5, id * 7}, {}};
  for (int k = 0; k < 7; ++k) r.tail[k] = static_cast<std::uint8_t>(id + k);
  return r;
}
bool intact(const record& r) {
  for (int k = 0; k < 7; ++k)
    if (r.tail[k] != static_cast<std::uint8_t>(r.id + k)) return false;
  return r.words[0] == r.id * 3 && r.words[1] == r.id * 5 && r.words[2] == r.id * 7;
}

template <index_mode M>
class memcpy_buffer_workload final : public stress_workload {
 public:
  memcpy_buffer_workload(int threads, stress_tally& tally)
      : tally_(tally),
        holders_(static_cast<std::size_t>(threads) * kItemsPerThread),
        buf_(holders_.size()) {
    for (std::size_t i = 0; i < holders_.size(); ++i) buf_.push(make_record(i));
  }
  void op(long i) override {
    record r;
    if (!buf_.pop(r)) return;
    if (!hold(r)) return;
    if (i % kYieldEvery == 0) sched_yield();
    release_and_push(r);
  }
  void signal_op() noexcept override {
    record r;
    if (!buf_.pop(r)) return;
    if (!hold(r)) return;
    release_and_push(r);
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int index) override {
    const remote_result<std::vector<record>> drained = buf_.try_drain(index);
    if (!tally_.count_drain(drained.error)) return;
    for (const record& r : drained.value)
      if (hold(r)) release_and_push(r);
  }
  bool child_check() override {
    record r;
    if (buf_.pop(r) && (!intact(r) || !buf_.push(r))) return false;
    for (const record& q : buf_.drain(0))
      if (!buf_.push(q)) return false;
    return true;
  }
  void verify(stress_result& r) override {
    std::vector<int> seen(holders_.size());
    for (int i = 0; i < buf_.slots(); ++i)
      for (const record& rec : buf_.drain(i)) {
        if (!intact(rec) || rec.id >= holders_.size()) {
          ++r.corrupt;
          continue;
        }
        ++seen[rec.id];
      }
    check_census(seen, r);
  }

 private:
  // Marks the record's id as held; a torn record is counted and dropped (verify then also
  // reports its id lost).
  bool hold(const record& r) noexcept {
    if (!intact(r) || r.id >= holders_.size()) {
      tally_.corrupt.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (holders_[r.id].fetch_add(1, std::memory_order_acq_rel) != 0)
      tally_.duplicated.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void release_and_push(const record& r) noexcept {
    holders_[r.id].fetch_sub(1, std::memory_order_acq_rel);
    if (!buf_.push(r)) tally_.corrupt.fetch_add(1, std::memory_order_relaxed);
  }

  stress_tally& tally_;
  std::vector<std::atomic<int>> holders_;
  memcpy_buffer<record, M> buf_;
};

// ---- spinlock: two plain words per index, updated by separate stores under the lock ----
template <index_mode M>
class spinlock_workload final : public stress_workload {
  struct guarded {
    std::uint64_t a, b;
  };

 public:
  explicit spinlock_workload(stress_tally& tally) : tally_(tally), data_(lock_.slots()) {}
  // Odd operations take the lock through a guard (its own acquire path and bare release), even
  // ones through lock()/unlock().
  void op(long i) override {
    if (i & 1) {
      typename spinlock<M>::guard held(lock_);
      update(data_[held.index()], i);
    } else {
      const int index = lock_.lock();
      update(data_[index], i);
      lock_.unlock(index);
    }
  }
  void signal_op() noexcept override {
    // The interrupted thread may hold this index's lock: only try, never wait.
    const int index = lock_.try_lock();
    if (index < 0) return;
    guarded& g = data_[index];
    g.a = g.a + 1;
    g.b = g.b + 1;
    lock_.unlock(index);
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int) override {}
  bool child_check() override {
    // A lock held by a worker at fork time stays held in the child (that worker does not exist
    // there); the child takes only a free one.
    const int index = lock_.try_lock();
    if (index >= 0) lock_.unlock(index);
    return true;
  }
  void verify(stress_result& r) override {
    std::uint64_t sum = 0;
    for (int i = 0; i < data_.size(); ++i) {
      if (data_[i].a != data_[i].b || lock_.is_locked(i)) ++r.corrupt;
      sum += data_[i].a;
    }
    const std::uint64_t expected = r.ops + r.handler_ops;
    if (sum < expected) r.lost = expected - sum;
    if (sum > expected) r.duplicated = sum - expected;
  }

 private:
  static void update(guarded& g, long i) {
    g.a = g.a + 1;
    if (i % kYieldEvery == 0) sched_yield();  // hold it across a reschedule
    g.b = g.b + 1;
  }

  stress_tally& tally_;
  spinlock<M> lock_;
  slot_array<guarded> data_;
};

// ---- percpu_rwsem: readers check a multi-word invariant that writers keep ----

// Writers raise every word of one record by one, now and then off the CPU halfway; readers (and
// the signal handler, with try_lock_shared()) check that the words are equal; the drainer takes
// the write lock with try_lock() (a fence of every CPU each time). At the end each word must
// equal the number of writes: a write lost or torn, or a reader that overlapped one, shows.
template <index_mode M>
class rwsem_workload final : public stress_workload {
  static constexpr int kWords = 4;
  static constexpr long kWriteEvery = 128;
  static constexpr int kReadPause = 8, kWritePause = 64;

 public:
  explicit rwsem_workload(stress_tally& tally) : tally_(tally) {}
  void op(long i) override {
    if (i % kWriteEvery == 0) {
      std::unique_lock<percpu_rwsem<M>> held(lock_);
      write(i);
      return;
    }
    std::shared_lock<percpu_rwsem<M>> held(lock_);
    if (i % kYieldEvery == 1) sched_yield();  // hold it across a reschedule
    check();
  }
  void signal_op() noexcept override {
    // The interrupted thread may hold the write lock or wait for it: only try.
    if (!lock_.try_lock_shared()) return;
    check();
    lock_.unlock_shared();
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int) override {
    const remote_result<bool> r = lock_.try_lock_or_error();
    if (!tally_.count_drain(r.error) || !r.value) return;
    write(1);
    lock_.unlock();
  }
  bool child_check() override {
    // A lock a worker held at fork time stays held in the child: only try.
    if (!lock_.try_lock_shared()) return true;
    const bool ok = equal();
    lock_.unlock_shared();
    return ok;
  }
  void verify(stress_result& r) override {
    const std::uint64_t writes = writes_.load();
    for (const auto& w : words_)
      if (w != writes) ++r.corrupt;
    if (lock_.readers() != 0) ++r.corrupt;
  }

 private:
  // Reads the first word, waits a little (a writer overlapping the read would move it), and
  // compares every word with it.
  bool equal() const {
    const std::uint64_t first = __atomic_load_n(&words_[0], __ATOMIC_RELAXED);
    pause(kReadPause);
    for (const auto& w : words_)
      if (__atomic_load_n(&w, __ATOMIC_RELAXED) != first) return false;
    return true;
  }
  static void pause(int n) {
    for (int k = 0; k < n; ++k) PERCPU_CPU_RELAX();
  }
  void check() {
    if (!equal()) tally_.corrupt.fetch_add(1, std::memory_order_relaxed);
  }
  void write(long i) {
    for (int k = 0; k < kWords; ++k) {
      __atomic_store_n(&words_[k], __atomic_load_n(&words_[k], __ATOMIC_RELAXED) + 1,
                       __ATOMIC_RELAXED);
      if (k == kWords / 2 && i % (kYieldEvery * kWriteEvery) == 0) sched_yield();
      pause(kWritePause);  // a long write: a reader let in during it cannot miss it
    }
    writes_.fetch_add(1, std::memory_order_relaxed);
  }

  stress_tally& tally_;
  percpu_rwsem<M> lock_;
  std::uint64_t words_[kWords] = {};
  std::atomic<std::uint64_t> writes_{0};
};

// ---- percpu_ref: gets and puts while the drainer kills and resurrects ----

// Each worker holds one reference for the whole run (taken here), so the count may never reach
// zero before verify(); workers and the signal handler get and put around it, and the drainer
// kills the count and resurrects it, over and over, so gets and puts race the switch between
// per-CPU and atomic mode. At the end the workers' references go: the callback must then have
// run exactly once, and not before.
template <index_mode M>
class ref_workload final : public stress_workload {
 public:
  ref_workload(int threads, stress_tally& tally) : tally_(tally), base_(threads) {
    for (int t = 0; t < threads; ++t) ref_.get();
  }
  void op(long i) override {
    if (i & 1) {
      ref_.get();
    } else if (!ref_.tryget_live() && !ref_.tryget()) {
      tally_.corrupt.fetch_add(1, std::memory_order_relaxed);  // zero while references are held
      return;
    }
    if (i % kYieldEvery == 0) sched_yield();  // hold it across a reschedule
    ref_.put();
  }
  void signal_op() noexcept override {
    ref_.get();
    ref_.put();
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int) override {
    std::lock_guard<std::mutex> one(switching_);
    if (ref_.is_dying()) {
      ref_.resurrect();
      return;
    }
    tally_.count_drain(ref_.try_kill());
  }
  bool child_check() override {
    ref_.get();
    ref_.put();
    return released_.load() == 0;
  }
  void verify(stress_result& r) override {
    if (released_.load() != 0) ++r.corrupt;  // released while the workers held references
    if (!ref_.is_dying()) ref_.kill();
    for (int t = 0; t < base_; ++t) ref_.put();
    const int released = released_.load();
    if (released == 0) r.lost = 1;  // a put that never counted, or a get that did
    if (released > 1) r.duplicated = static_cast<std::uint64_t>(released - 1);
  }

 private:
  stress_tally& tally_;
  int base_;
  std::atomic<int> released_{0};
  percpu_ref<M> ref_{[this] { released_.fetch_add(1); }};
  std::mutex switching_;
};

// ---- percpu_counter: folds, drains and the limit ----

// Two batched counters with a batch of 4, so that adds fold often. `total_`: every worker op
// adds 1 for good and a pair k, -k (k up to twice the batch: folds both ways and adds past
// the batch), the signal handler adds 1 (its fold may find the lock held by its own thread);
// at the end sum() must equal the ops exactly and read() be within the bound. `budget_`: the
// workers charge 1-7 with limited_add() against a limit the threads together often reach and
// give it back with sub(); the drainer's charges of half the limit force drains (fences); a
// sample of sum() must never exceed the limit, and at the end nothing is left charged.
template <index_mode M>
class batched_workload final : public stress_workload {
 public:
  batched_workload(int threads, stress_tally& tally) : tally_(tally), limit_(3 * threads) {}
  void op(long i) override {
    total_.add(1);
    const std::int64_t k = 1 + i % 8;
    total_.add(k);
    const std::int64_t n = 1 + i % 7;
    if (budget_.limited_add(n, limit_)) {
      if (i % kYieldEvery == 0) sched_yield();  // hold it across a reschedule
      budget_.sub(n);
    }
    total_.sub(k);
    if (i % 64 == 0 && budget_.sum() > limit_)
      tally_.corrupt.fetch_add(1, std::memory_order_relaxed);
  }
  void signal_op() noexcept override {
    total_.add(1);
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int) override {
    const remote_result<bool> r = budget_.limited_add_or_error(limit_ / 2, limit_);
    if (!tally_.count_drain(r.error)) return;
    if (r.value) budget_.sub(limit_ / 2);
    if (budget_.sum() > limit_) tally_.corrupt.fetch_add(1, std::memory_order_relaxed);
  }
  bool child_check() override {
    const std::int64_t before = total_.sum();
    total_.add(5);
    return total_.sum() == before + 5 && budget_.sum() <= limit_;
  }
  void verify(stress_result& r) override {
    const auto expected = static_cast<std::int64_t>(r.ops + r.handler_ops);
    const std::int64_t counted = total_.sum();
    if (counted < expected) r.lost = static_cast<std::uint64_t>(expected - counted);
    if (counted > expected) r.duplicated = static_cast<std::uint64_t>(counted - expected);
    const std::int64_t off = total_.read() - counted;
    if (off > total_.error_bound() || -off > total_.error_bound()) ++r.corrupt;
    if (budget_.sum() != 0) ++r.corrupt;  // a charge never given back, or a give-back lost
  }

 private:
  stress_tally& tally_;
  const std::int64_t limit_;
  percpu_counter<M> total_{4};
  percpu_counter<M> budget_{4};
};

// ---- histogram: snapshots and resets while threads record ----

// One histogram whose values 0..127 each have a bucket of their own, so that a snapshot's sum
// must equal the sum over its buckets of value x count. Workers record i % 128 (and count the
// values they recorded), the signal handler records 1; the drainer takes snapshots and, one
// in four, snapshot_and_reset()s, each checked for that consistency, and keeps what the resets
// took. At the end the resets' snapshots and a last one must hold every record and every value,
// none twice.
template <index_mode M>
class histogram_workload final : public stress_workload {
 public:
  explicit histogram_workload(stress_tally& tally) : tally_(tally) {}
  void op(long i) override {
    const auto v = static_cast<std::uint64_t>(i % 128);
    histogram_.record(v);
    values_.fetch_add(v, std::memory_order_relaxed);
  }
  void signal_op() noexcept override {
    histogram_.record(1);
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int) override {
    histogram_snapshot s;
    const bool reset = ++snapshots_ % 4 == 0;
    const std::error_code e =
        reset ? histogram_.snapshot_and_reset_or_error(s) : histogram_.snapshot_or_error(s);
    if (!tally_.count_drain(e)) return;
    if (!consistent(s)) tally_.corrupt.fetch_add(1, std::memory_order_relaxed);
    if (reset) {
      const std::lock_guard<std::mutex> hold(taken_mutex_);
      taken_.merge(s);
    }
  }
  bool child_check() override {
    const histogram_snapshot before = histogram_.snapshot();
    histogram_.record(100);
    const histogram_snapshot after = histogram_.snapshot();
    return consistent(before) && after.count() == before.count() + 1 &&
           after.sum() == before.sum() + 100;
  }
  void verify(stress_result& r) override {
    histogram_snapshot all = histogram_.snapshot();
    if (!consistent(all)) ++r.corrupt;
    {
      const std::lock_guard<std::mutex> hold(taken_mutex_);
      all.merge(taken_);
    }
    const std::uint64_t expected = r.ops + r.handler_ops;
    if (all.count() < expected) r.lost = expected - all.count();
    if (all.count() > expected) r.duplicated = all.count() - expected;
    if (all.sum() != values_.load() + r.handler_ops) ++r.corrupt;
  }

 private:
  static bool consistent(const histogram_snapshot& s) {
    std::uint64_t weighted = 0, n = 0;
    for (std::size_t b = 0; b < s.buckets().size(); ++b) {
      weighted += b * s[b];
      n += s[b];
    }
    return n == s.count() && weighted == s.sum();
  }

  stress_tally& tally_;
  histogram<M> histogram_{histogram_layout(6, 127)};
  std::atomic<std::uint64_t> values_{0};
  std::uint64_t snapshots_ = 0;  // the drainer's
  std::mutex taken_mutex_;
  histogram_snapshot taken_{histogram_layout(6, 127)};
};

// ---- pool: objects allocated and freed through the per-CPU caches, handed between threads ----
// Every object must come zeroed in every slot and be held by one owner at a time (its tag in
// every slot stays the owner's); at the end every object is freed and none is live.
template <index_mode M>
class pool_workload final : public stress_workload {
  static constexpr int kMailboxes = 16;

 public:
  explicit pool_workload(stress_tally& tally) : tally_(tally) {}
  void op(long i) override {
    auto p = pool_.template allocate<std::int64_t>();
    if (!holds(&p[0], 0)) tally_.corrupt.fetch_add(1, std::memory_order_relaxed);
    const std::int64_t tag = next_tag_.fetch_add(1, std::memory_order_relaxed);
    for (std::int64_t& v : p) v = tag;
    if (i % kYieldEvery == 0) sched_yield();  // hold it across a reschedule
    if (!holds(&p[0], tag)) tally_.duplicated.fetch_add(1, std::memory_order_relaxed);
    // Hand it to whichever thread visits this mailbox next; free what was there.
    const auto other = mailbox_[static_cast<std::size_t>(i) % kMailboxes].exchange(
        reinterpret_cast<std::intptr_t>(&p[0]), std::memory_order_acq_rel);
    if (other != 0) release(reinterpret_cast<std::int64_t*>(other));
  }
  // Allocation's slow path takes a mutex: not for a signal handler. The signals still abort
  // the workers' critical sections.
  void signal_op() noexcept override {}
  void remote(int index) override { tally_.count_drain(pool_.try_drain_caches(index).error); }
  bool child_check() override {
    std::vector<percpu_ptr<std::int64_t, M>> mine;
    for (int i = 0; i < 100; ++i) {
      mine.push_back(pool_.template allocate<std::int64_t>());
      if (!holds(&mine.back()[0], 0)) return false;
      mine.back()[0] = 1;
    }
    for (auto& p : mine) pool_.free(p);
    return true;
  }
  void verify(stress_result& r) override {
    for (auto& m : mailbox_)
      if (const auto left = m.exchange(0)) release(reinterpret_cast<std::int64_t*>(left));
    r.lost = pool_.stats().live_objects;  // allocated and never freed
  }

 private:
  bool holds(const std::int64_t* slot0, std::int64_t tag) const {
    for (int s = 0; s < pool_.slots(); ++s)
      if (slot0[static_cast<std::size_t>(s) * (pool_.stride() / sizeof(std::int64_t))] != tag)
        return false;
    return true;
  }
  void release(std::int64_t* p) {
    if (!holds(p, *p)) tally_.duplicated.fetch_add(1, std::memory_order_relaxed);
    pool_.free_bytes(p, sizeof(std::int64_t));
  }

  stress_tally& tally_;
  pool<M> pool_{pool_options{.debug = false}};
  std::atomic<std::intptr_t> mailbox_[kMailboxes] = {};
  std::atomic<std::int64_t> next_tag_{1};
};

// percpu malloc (its functions called directly): workers allocate objects of every size class
// and some large ones, tag them, and hand them through mailboxes to other threads, which check
// the tags and free them; the signal handler allocates and frees (the allocator may refuse with
// NULL when the handler interrupted its own locked code); the drainer drains other indices'
// caches and lowers their capacities; a forked child allocates. The allocator picks its own
// index mode (mm_cid where the kernel has it): the run's mode only labels the run.
class malloc_workload final : public stress_workload {
  static constexpr int kMailboxes = 16;

 public:
  explicit malloc_workload(stress_tally& tally) : tally_(tally) {}
  void op(long i) override {
    const std::size_t size = size_of(i);
    auto* p = static_cast<std::int64_t*>(malloc_impl::allocate(size));
    if (p == nullptr) {
      tally_.corrupt.fetch_add(1, std::memory_order_relaxed);  // out of memory: not expected
      return;
    }
    allocated_.fetch_add(1, std::memory_order_relaxed);
    write_tags(p, size, next_tag_.fetch_add(1, std::memory_order_relaxed));
    if (i % kYieldEvery == 0) sched_yield();  // hold it across a reschedule
    if (!has_tags(p)) tally_.duplicated.fetch_add(1, std::memory_order_relaxed);
    const auto other = mailbox_[static_cast<std::size_t>(i) % kMailboxes].exchange(
        reinterpret_cast<std::intptr_t>(p), std::memory_order_acq_rel);
    if (other != 0) release(reinterpret_cast<std::int64_t*>(other));
  }
  void signal_op() noexcept override {
    auto* p = static_cast<std::int64_t*>(malloc_impl::allocate(48));
    if (p == nullptr) return;  // refused inside the allocator's locked code (reentrancy.h)
    write_tags(p, 48, -1);
    if (!has_tags(p)) tally_.duplicated.fetch_add(1, std::memory_order_relaxed);
    malloc_impl::deallocate(p);
    tally_.handler_ops.fetch_add(1, std::memory_order_relaxed);
  }
  void remote(int index) override {
    malloc_impl::cache_drain(index);
    malloc_impl::cache_shrink_unused(index);
    tally_.drains.fetch_add(1, std::memory_order_relaxed);
  }
  bool child_check() override {
    std::vector<std::int64_t*> mine;
    for (int i = 0; i < 100; ++i) {
      auto* p = static_cast<std::int64_t*>(malloc_impl::allocate(size_of(i)));
      if (p == nullptr) return false;
      write_tags(p, size_of(i), i);
      mine.push_back(p);
    }
    for (auto* p : mine) {
      if (!has_tags(p)) return false;
      malloc_impl::deallocate(p);
    }
    return true;
  }
  void verify(stress_result& r) override {
    for (auto& m : mailbox_)
      if (const auto left = m.exchange(0)) release(reinterpret_cast<std::int64_t*>(left));
    r.lost = allocated_.load() - freed_.load();
  }

 private:
  // Every class in turn, and now and then a large allocation.
  static std::size_t size_of(long i) {
    if (i % 97 == 0) return 300000;
    const auto cls = 1 + static_cast<std::size_t>(i) % (malloc_impl::kClassCount - 1);
    return malloc_impl::kClasses[cls].size;
  }
  // Word 0 holds the size, the last word and a middle one the tag. (Word 1 is the allocator's
  // free tag while the object is cached; a user may write it, as here in larger objects.)
  static void write_tags(std::int64_t* p, std::size_t size, std::int64_t tag) {
    const std::size_t words = size / sizeof(std::int64_t);
    p[0] = static_cast<std::int64_t>(size);
    p[words - 1] = tag;
    p[words / 2] = tag;
  }
  static bool has_tags(const std::int64_t* p) {
    const std::size_t words = static_cast<std::size_t>(p[0]) / sizeof(std::int64_t);
    return words >= 2 && p[words - 1] == p[words / 2];
  }
  void release(std::int64_t* p) {
    if (!has_tags(p)) tally_.duplicated.fetch_add(1, std::memory_order_relaxed);
    malloc_impl::deallocate(p);
    freed_.fetch_add(1, std::memory_order_relaxed);
  }

  stress_tally& tally_;
  std::atomic<std::intptr_t> mailbox_[kMailboxes] = {};
  std::atomic<std::int64_t> next_tag_{1};
  std::atomic<std::uint64_t> allocated_{0}, freed_{0};
};

template <index_mode M>
std::unique_ptr<stress_workload> make_for_mode(const std::string& s, int threads,
                                               stress_tally& tally) {
  if (s == "counter") return std::make_unique<counter_workload<M>>(tally);
  if (s == "freelist") return std::make_unique<freelist_workload<M>>(threads, tally);
  if (s == "buffer") return std::make_unique<buffer_workload<M>>(threads, tally);
  if (s == "memcpy_buffer") return std::make_unique<memcpy_buffer_workload<M>>(threads, tally);
  if (s == "spinlock") return std::make_unique<spinlock_workload<M>>(tally);
  if (s == "rwsem") return std::make_unique<rwsem_workload<M>>(tally);
  if (s == "ref") return std::make_unique<ref_workload<M>>(threads, tally);
  if (s == "batched") return std::make_unique<batched_workload<M>>(threads, tally);
  if (s == "histogram") return std::make_unique<histogram_workload<M>>(tally);
  if (s == "pool") return std::make_unique<pool_workload<M>>(tally);
  if (s == "malloc") return std::make_unique<malloc_workload>(tally);
  throw std::invalid_argument("unknown structure: " + s);
}

}  // namespace

std::unique_ptr<stress_workload> make_stress_workload(const std::string& structure, index_mode mode,
                                                      int threads, stress_tally& tally) {
  if (mode == index_mode::cpu_id)
    return make_for_mode<index_mode::cpu_id>(structure, threads, tally);
  return make_for_mode<index_mode::mm_cid>(structure, threads, tally);
}

}  // namespace percpu::cli
