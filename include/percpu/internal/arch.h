// The critical sections of the architecture percpu is built for, x86-64 or aarch64: each
// directory holds the same layers (area, sections, ops, pair, current_ops) with the same
// functions in namespace percpu::arch. The one place that chooses between them.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch.h> is internal: include <percpu/percpu.h>"
#endif

#include "percpu/internal/config.h"

#if defined(__x86_64__)
#include "percpu/internal/arch/x86_64/area.h"
#include "percpu/internal/arch/x86_64/current_ops.h"
#include "percpu/internal/arch/x86_64/ops.h"
#include "percpu/internal/arch/x86_64/pair.h"
#elif defined(__aarch64__)
#include "percpu/internal/arch/aarch64/area.h"
#include "percpu/internal/arch/aarch64/current_ops.h"
#include "percpu/internal/arch/aarch64/ops.h"
#include "percpu/internal/arch/aarch64/pair.h"
#else
#error "percpu's critical sections exist for x86-64 and aarch64 only"
#endif
