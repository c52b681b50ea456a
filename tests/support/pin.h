// Test helper: runs the calling thread on one CPU for a scope.
#pragma once

#include <sched.h>

namespace percpu::test {

class pinned {
 public:
  explicit pinned(int cpu) {
    sched_getaffinity(0, sizeof(saved_), &saved_);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ok_ = sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  ~pinned() { sched_setaffinity(0, sizeof(saved_), &saved_); }
  bool ok() const { return ok_; }

 private:
  cpu_set_t saved_;
  bool ok_ = false;
};

}  // namespace percpu::test
