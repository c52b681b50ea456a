// percpu malloc's transfer caches and central free lists (see central.h).
#include "malloc/central.h"

#include <pthread.h>

#include <atomic>
#include <cstring>

#include "malloc/fast_path.h"
#include "malloc/free_tag.h"
#include "malloc/reentrancy.h"

namespace percpu::malloc_impl {
namespace {

// Two locks a class: one for the transfer cache (held for a copy of one batch of pointers), one
// for the spans (held while objects are taken from their spans' bitmaps or set back in them; the
// objects' tags, a likely miss each, are checked outside it): a thread filling its cache from the
// spans does not hold up the threads moving batches through the transfer cache (original
// xmalloc-test spent a third of central_remove waiting for the class's one lock). No code holds
// both, except the fork handlers and the statistics, which take the transfer lock first.
struct class_state {
  // Guarded by transfer_lock:
  pthread_mutex_t transfer_lock;  // all-zero is PTHREAD_MUTEX_INITIALIZER on glibc
  std::size_t batches;            // full batches in `transfer`
  // Batches removed and not yet matched by an insertion, up to kTransferCredit[cls]: the transfer
  // cache takes more than kTransferAlways batches only on credit (removals keep up).
  std::size_t credit;
  void* transfer[kTransferBatches][kMaxBatch];
  // Guarded by span_lock (32 KiB from transfer_lock: the two never share a cache line):
  alignas(64) pthread_mutex_t span_lock;
  span* nonempty;  // spans with free objects, doubly linked
  std::size_t spans;
  std::size_t free_in_spans;
};

class_state g_classes[kClassCount];

// Classes whose locks have been or may be taken: set (under g_first_use) before a class's first
// lock, never cleared. Only they can hold objects or have a thread inside their locks, so the
// maintenance pass, the statistics and the fork handlers skip the others without touching their
// state, a page or two each: the first maintenance pass touched 54 pages (216 KiB) in a process
// that used one class, and the fork handlers 108 (424 KiB).
std::atomic<bool> g_class_used[kClassCount];

// Taken to mark a class used, and by the fork handlers around their walk of the used classes:
// a class cannot become used (and its locks be taken) between that walk and the fork.
pthread_mutex_t g_first_use = PTHREAD_MUTEX_INITIALIZER;

// A class's lock, counted for signal handlers (reentrancy.h).
class locked : counted_lock {
 public:
  explicit locked(pthread_mutex_t& lock) : counted_lock(&lock) {}
};

// Marks `cls` used before the caller first takes one of its locks.
void mark_used(std::size_t cls) {
  if (g_class_used[cls].load(std::memory_order_acquire)) return;
  locked l(g_first_use);
  g_class_used[cls].store(true, std::memory_order_release);
}

void push_front(span*& list, span* s) {
  s->prev = nullptr;
  s->next = list;
  if (list != nullptr) list->prev = s;
  list = s;
}

void unlink(span*& list, span* s) {
  if (s->prev != nullptr) {
    s->prev->next = s->next;
  } else {
    list = s->next;
  }
  if (s->next != nullptr) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
}

static_assert(
    [] {
      for (std::size_t c = 1; c < kClassCount; ++c)
        if (kClasses[c].objects_per_span() > kSpanMapWords * 64) return false;
      return true;
    }(),
    "a span's free-object bitmap (span::free_map) holds every object of its class");

// A new span carved into objects of `cls`, on the nonempty list; nullptr without memory.
span* new_span(class_state& c, std::size_t cls) {
  const size_class_info& info = kClasses[cls];
  span* s = page_heap().allocate_span(info.pages, cls);
  if (s == nullptr) return nullptr;
  // Every object starts with the span tag (free_tag.h): one not yet handed out reads as free,
  // so a stray free of it is caught without a per-object live map. This touches each page that
  // holds an object's start (for a class whose span has several pages, more than carving one
  // object would: at most one span per class is partly used, 392 KiB over all classes).
  const std::uint32_t objects = info.objects_per_span();
  for (std::uint32_t i = 0; i < objects; ++i) {
    char* p = s->start() + static_cast<std::size_t>(i) * info.size;
    free_tag_word(p) = span_tag_of(p);
  }
  for (std::uint32_t w = 0; w < kSpanMapWords; ++w) {
    const std::uint32_t first = w * 64;
    s->free_map[w] = objects >= first + 64 ? ~std::uint64_t{0}
                     : objects > first     ? (std::uint64_t{1} << (objects - first)) - 1
                                           : 0;
  }
  push_front(c.nonempty, s);
  ++c.spans;
  c.free_in_spans += objects;
  return s;
}

// Takes up to `n` free objects of span `s` (which has one) into `out`, lowest addresses first,
// under the class's span lock; returns how many. Reads only the span's bitmap: the objects'
// span tags are checked by the caller once the lock is released (check_taken).
std::size_t take_from(class_state& c, span* s, const size_class_info& info, void** out,
                      std::size_t n) {
  std::size_t got = 0;
  char* const base = s->start();
  for (std::size_t w = 0; w < kSpanMapWords && got < n; ++w) {
    std::uint64_t bits = s->free_map[w];
    while (bits != 0 && got < n) {
      const std::size_t i = w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      out[got++] = base + i * info.size;
    }
    s->free_map[w] = bits;
  }
  s->allocated += static_cast<std::uint32_t>(got);
  c.free_in_spans -= got;
  if (s->allocated == info.objects_per_span()) unlink(c.nonempty, s);
  return got;
}

// Moves object `p` between the free tags (free_tag.h): its word must carry `from` (else the
// process stops, naming `fault` and `p`) and gets `to`.
void move_tag(void* p, std::uint64_t from, std::uint64_t to, const char* fault) {
  std::uint64_t& word = free_tag_word(p);
  if (PERCPU_UNLIKELY(word != from)) slow::fatal(fault, p);
  word = to;
}

// Objects just taken from their spans must carry the span tag (an object a stray free put in a
// cache while it was free in its span may since have gone to a user), and get the cached tag:
// live until the allocator hands them to a user. Outside the span lock: the loads, one likely
// miss each, are independent and overlap.
void check_taken(void* const* objects, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    move_tag(objects[i], span_tag_of(objects[i]), cached_tag_of(objects[i]),
             "malloc(): an object free in its span has lost its free tag (a double free, a "
             "free of a pointer not allocated, or a write after free)");
}

// Stops the process unless every object of `s` (all of them back) carries the span tag: a stray
// free can make a span's count reach 0 while a user still holds one of its objects.
void check_all_free(const span* s) {
  const size_class_info& info = kClasses[s->size_class];
  char* p = s->start();
  for (std::uint32_t i = 0; i < info.objects_per_span(); ++i, p += info.size)
    if (PERCPU_UNLIKELY(free_tag_word(p) != span_tag_of(p)))
      slow::fatal(
          "free(): a span emptied while this object of it is not free (an earlier double "
          "free, or a free of a pointer not allocated, of one of its objects)",
          p);
}

// Frees emptied span `s` to the page heap after check_all_free(), both outside the class's span
// lock when the caller can (emptied_spans): the span is off the class's lists, so no one else
// reaches its objects through it.
void release_emptied(span* s) {
  check_all_free(s);
  page_heap().free_span(s);
}

// Spans emptied under a class's lock, checked and freed to the page heap once it is released:
// the scan of each object's tag (check_all_free) and the page heap's work (coalescing, and the
// release of memory beyond its bound, which may take milliseconds) hold no class's lock.
class emptied_spans {
 public:
  emptied_spans() = default;
  emptied_spans(const emptied_spans&) = delete;
  emptied_spans& operator=(const emptied_spans&) = delete;
  ~emptied_spans() {
    for (std::size_t i = 0; i < n_; ++i) release_emptied(spans_[i]);
  }
  /// Keeps `s` for the destructor; false (keeping nothing) when full.
  bool add(span* s) {
    if (n_ == kMax) return false;
    spans_[n_++] = s;
    return true;
  }

 private:
  // Few: each is a thread's stack (400 threads that touch one more page each hold 1.6 MiB);
  // a call that empties more spans frees the rest under the lock.
  static constexpr std::size_t kMax = 16;
  span* spans_[kMax];
  std::size_t n_ = 0;
};

// Takes the transfer cache's last batch (it has one) into `out`; under c.transfer_lock.
void take_batch(class_state& c, void** out, std::size_t n) {
  --c.batches;
  std::memcpy(out, c.transfer[c.batches], n * sizeof(void*));
}

// Checks cached object `p`, on its way back to its span, for the cached tag (a second copy of
// an object freed twice carries the span tag by now, or none) and gives it the span tag:
// before the span lock is taken, so that its likely miss holds no lock.
void retag(void* p) {
  move_tag(p, cached_tag_of(p), span_tag_of(p),
           "free(): double free, or a pointer that is not allocated (an object returned to its "
           "span without its free tag)");
}

// Sets retagged object `p` back in its span's bitmap, under the class's span lock: its bit must
// be clear (set: the object is free in the span already, returned twice).
void give_back(class_state& c, std::size_t cls, void* p, const size_class_info& info,
               emptied_spans& emptied) {
  span* s = page_heap().span_of(p);
  // A stale copy of an object whose span has gone (and whose pages hold another class's
  // objects now) must not be linked into that span under this class's lock.
  if (PERCPU_UNLIKELY(s == nullptr || s->kind != span::state::small || s->size_class != cls))
    slow::fatal(
        "free(): double free, or a pointer that is not allocated (a cached object whose "
        "span is gone)",
        p);
  const auto index = static_cast<std::size_t>(static_cast<char*>(p) - s->start()) / info.size;
  std::uint64_t& w = s->free_map[index / 64];
  const std::uint64_t bit = std::uint64_t{1} << (index % 64);
  if (PERCPU_UNLIKELY((w & bit) != 0))
    slow::fatal("free(): double free (an object returned to its span twice)", p);
  const bool was_full = s->allocated == info.objects_per_span();
  w |= bit;
  --s->allocated;
  ++c.free_in_spans;
  if (was_full) push_front(c.nonempty, s);
  if (s->allocated == 0) {  // every object is back: the pages go back to the page heap
    unlink(c.nonempty, s);
    --c.spans;
    c.free_in_spans -= info.objects_per_span();
    if (!emptied.add(s)) release_emptied(s);
  }
}

}  // namespace

std::size_t central_remove(std::size_t cls, void** out, std::size_t n) noexcept {
  mark_used(cls);
  class_state& c = g_classes[cls];
  const size_class_info& info = kClasses[cls];
  {
    locked l(c.transfer_lock);
    if (c.credit < kTransferCredit[cls]) ++c.credit;
    if (n == info.batch && c.batches > 0) {
      take_batch(c, out, n);
      return n;
    }
  }
  std::size_t got = 0;
  {
    locked l(c.span_lock);
    while (got < n) {
      span* s = c.nonempty != nullptr ? c.nonempty : new_span(c, cls);
      if (s == nullptr) break;
      got += take_from(c, s, info, out + got, n - got);
    }
  }
  check_taken(out, got);
  return got;
}

void central_insert(std::size_t cls, void* const* objects, std::size_t n) noexcept {
  mark_used(cls);  // a load: objects of `cls` exist only once central_remove() marked it
  class_state& c = g_classes[cls];
  const size_class_info& info = kClasses[cls];
  emptied_spans emptied;  // freed after the locks below are released
  // Kept as a batch while someone takes batches out (producer and consumer threads, or phases
  // of one thread). A class that is only freed (a program emptying its data) sends its objects
  // home to their spans, with one of the transfer cache's batches each time, so that the spans
  // empty and go back to the page heap instead of staying pinned by one cached object each.
  void* cached[kMaxBatch];
  std::size_t n_cached = 0;
  if (n == info.batch) {
    locked l(c.transfer_lock);
    if (c.batches < kTransferAlways || (c.batches < kTransferBatches && c.credit > 0)) {
      if (c.batches >= kTransferAlways) --c.credit;
      std::memcpy(c.transfer[c.batches], objects, n * sizeof(void*));
      ++c.batches;
      return;
    }
    if (c.credit == 0) {
      take_batch(c, cached, n);
      n_cached = n;
    }
  }
  for (std::size_t i = 0; i < n_cached; ++i) retag(cached[i]);
  for (std::size_t i = 0; i < n; ++i) retag(objects[i]);
  locked l(c.span_lock);
  for (std::size_t i = 0; i < n_cached; ++i) give_back(c, cls, cached[i], info, emptied);
  for (std::size_t i = 0; i < n; ++i) give_back(c, cls, objects[i], info, emptied);
}

std::size_t central_release_transfer(std::size_t cls) noexcept {
  if (!g_class_used[cls].load(std::memory_order_acquire)) return 0;
  class_state& c = g_classes[cls];
  const size_class_info& info = kClasses[cls];
  std::size_t to_move;
  {
    locked l(c.transfer_lock);
    to_move = c.batches - c.batches / 2;
  }
  // A batch at a time: copied out under the transfer lock, linked to its spans under theirs.
  std::size_t moved = 0;
  for (; to_move > 0; --to_move) {
    void* batch[kMaxBatch];
    {
      locked l(c.transfer_lock);
      if (c.batches == 0) break;
      take_batch(c, batch, info.batch);
    }
    for (std::size_t i = 0; i < info.batch; ++i) retag(batch[i]);
    emptied_spans emptied;  // freed after the span lock is released
    locked l(c.span_lock);
    for (std::size_t i = 0; i < info.batch; ++i) give_back(c, cls, batch[i], info, emptied);
    moved += info.batch;
  }
  return moved;
}

central_stats central_stats_of(std::size_t cls) noexcept {
  if (!g_class_used[cls].load(std::memory_order_acquire)) return central_stats{};
  class_state& c = g_classes[cls];
  locked t(c.transfer_lock);
  locked l(c.span_lock);
  return central_stats{c.spans, c.free_in_spans, c.batches * kClasses[cls].batch};
}

void central_lock_all() noexcept {
  pthread_mutex_lock(&g_first_use);
  for (std::size_t cls = 1; cls < kClassCount; ++cls) {
    if (!g_class_used[cls].load(std::memory_order_relaxed)) continue;
    pthread_mutex_lock(&g_classes[cls].transfer_lock);
    pthread_mutex_lock(&g_classes[cls].span_lock);
  }
}

void central_unlock_all() noexcept {
  // The same classes as central_lock_all(): none became used while g_first_use was held.
  for (std::size_t cls = 1; cls < kClassCount; ++cls) {
    if (!g_class_used[cls].load(std::memory_order_relaxed)) continue;
    pthread_mutex_unlock(&g_classes[cls].span_lock);
    pthread_mutex_unlock(&g_classes[cls].transfer_lock);
  }
  pthread_mutex_unlock(&g_first_use);
}

}  // namespace percpu::malloc_impl
