// Build-wide macros: symbol visibility and branch hints.
#pragma once

#if defined(PERCPU_STATIC_DEFINE)
#define PERCPU_API
#else
#define PERCPU_API __attribute__((visibility("default")))
#endif

#define PERCPU_LIKELY(x) __builtin_expect(!!(x), 1)
#define PERCPU_UNLIKELY(x) __builtin_expect(!!(x), 0)

#if !defined(__x86_64__)
#error "percpu supports x86-64 only for now (aarch64 is planned)"
#endif
