// Build-wide macros: symbol visibility and branch hints. Also the language check: every public
// C++ header includes this one first, so a build with an older standard stops here with a
// clear message instead of an obscure error deep in a header.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/config.h> is internal: include <percpu/percpu.h>"
#endif

#if defined(__cplusplus) && __cplusplus < 202002L
#error "percpu needs C++20: compile with -std=c++20 (or -std=gnu++20) or later"
#endif

#if defined(PERCPU_STATIC_DEFINE)
#define PERCPU_API
#else
#define PERCPU_API __attribute__((visibility("default")))
#endif

/// For the critical sections and the layers that wrap them: they must be inlined into the
/// caller's fast path (an out-of-line section costs a call and its register saves).
#define PERCPU_ALWAYS_INLINE inline __attribute__((always_inline))
/// The same for a lambda (written after its parameter list): the closures that carry a
/// section through dispatch() must not become calls either.
#define PERCPU_LAMBDA_ALWAYS_INLINE __attribute__((always_inline))

#define PERCPU_LIKELY(x) __builtin_expect(!!(x), 1)
#define PERCPU_UNLIKELY(x) __builtin_expect(!!(x), 0)
/// After a label: the path from it is cold, so GCC places it after the hot path (GCC's label
/// attribute; clang has none, and gets nothing).
#if defined(__clang__)
#define PERCPU_COLD_LABEL
#else
#define PERCPU_COLD_LABEL __attribute__((cold));
#endif

/// The spin-wait hint inside a busy loop (x86-64 `pause`, aarch64 `yield`): lets a sibling
/// hardware thread run and saves power while a lock holder finishes.
#if defined(__x86_64__)
#define PERCPU_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define PERCPU_CPU_RELAX() asm volatile("yield" ::: "memory")
#endif

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "percpu supports x86-64 and aarch64"
#endif
