// Storage for a global object that is never destroyed: for state that threads may still touch
// after exit() began (a thread joined from a static destructor, a detached thread), where a
// destroyed object would be read after its destructor ran. Nothing is allocated: the object
// lives in the wrapper's own static storage, so it can be made inside fork handlers and other
// places where the allocator must not be called.
#pragma once

#include <new>
#include <utility>

namespace percpu::detail {

/// Holds a T constructed in place and never destroyed. Declare it as a function-local static
/// (thread-safe construction on first use): `static never_destroyed<T> x(args...); x.get()`.
template <class T>
class never_destroyed {
 public:
  template <class... Args>
  explicit never_destroyed(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
  }
  never_destroyed(const never_destroyed&) = delete;
  never_destroyed& operator=(const never_destroyed&) = delete;

  T& get() noexcept { return *std::launder(reinterpret_cast<T*>(storage_)); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace percpu::detail
