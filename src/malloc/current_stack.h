// percpu malloc's per-CPU stack sections for the architecture the library is built for: x86-64
// or aarch64 (each in its own file, with the same functions in namespace percpu::arch).
#pragma once

#if defined(__x86_64__)
#include "malloc/current_stack_x86_64.h"
#elif defined(__aarch64__)
#include "malloc/current_stack_aarch64.h"
#endif
