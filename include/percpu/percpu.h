// percpu: userspace per-CPU data through restartable sequences (rseq). Umbrella header.
#pragma once

#include "percpu/abi.h"
#include "percpu/counter.h"
#include "percpu/cpu.h"
#include "percpu/membarrier.h"
#include "percpu/ops.h"
#include "percpu/runtime.h"
#include "percpu/slot_array.h"
#include "percpu/status.h"
#include "percpu/topology.h"
