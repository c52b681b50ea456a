// The current-index sections of the architecture percpu is built for: x86-64 or aarch64 (each in
// its own directory, with the same functions in namespace percpu::arch).
#pragma once

#if defined(__x86_64__)
#include "percpu/arch/x86_64/current_ops.h"
#elif defined(__aarch64__)
#include "percpu/arch/aarch64/current_ops.h"
#endif
