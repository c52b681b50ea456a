// A process-wide list of live objects of one kind, for fork() handlers that must visit each
// (percpu_rwsem's child repair, percpu_counter's fold locks, histograms' flips): the objects carry
// their own links (next_, prev_), so enrolling allocates nothing.
#pragma once

#include <mutex>

namespace percpu::detail {

/// T has public members `T* next_` and `T* prev_`, touched only by the registry. add() and
/// remove() take the registry's mutex; lock() and unlock() hold it across a fork() (the prepare
/// handler locks, the parent's and child's unlock), and for_each() visits the objects while
/// the caller holds it.
template <class T>
class intrusive_registry {
 public:
  void add(T* t) {
    std::lock_guard<std::mutex> hold(mutex_);
    t->next_ = head_;
    t->prev_ = nullptr;
    if (head_ != nullptr) head_->prev_ = t;
    head_ = t;
  }
  void remove(T* t) {
    std::lock_guard<std::mutex> hold(mutex_);
    if (t->prev_ != nullptr) {
      t->prev_->next_ = t->next_;
    } else {
      head_ = t->next_;
    }
    if (t->next_ != nullptr) t->next_->prev_ = t->prev_;
  }
  void lock() { mutex_.lock(); }
  void unlock() { mutex_.unlock(); }
  template <class F>
  void for_each(F&& f) {
    for (T* t = head_; t != nullptr; t = t->next_) f(*t);
  }

 private:
  std::mutex mutex_;
  T* head_ = nullptr;
};

}  // namespace percpu::detail
