// percpu: userspace per-CPU data through restartable sequences (rseq). Umbrella header.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include "percpu/abi.h"
#include "percpu/buffer.h"
#include "percpu/counter.h"
#include "percpu/cpu.h"
#include "percpu/freelist.h"
#include "percpu/histogram.h"
#include "percpu/membarrier.h"
#include "percpu/memcpy_buffer.h"
#include "percpu/ops.h"
#include "percpu/percpu_counter.h"
#include "percpu/percpu_ref.h"
#include "percpu/percpu_rwsem.h"
#include "percpu/pool.h"
#include "percpu/remote.h"
#include "percpu/runtime.h"
#include "percpu/slice.h"
#include "percpu/slot_array.h"
#include "percpu/spinlock.h"
#include "percpu/status.h"
#include "percpu/topology.h"
#include "percpu/unload.h"
