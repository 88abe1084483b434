// zero/partition.h: ZeRO's partitions as pure functions of offsets. A partition is a
// contiguous range of the flat parameter space (model/params.h), the same for parameters,
// gradients, master weights and optimizer moments: rank r owns
// [r * chunk, min(n, (r + 1) * chunk)) with chunk = ceil(n / world) (common/range.h, which the
// ranged collectives of comm/comm.h cut by too). A tensor may straddle two ranks;
// optim/adamw.c splits its update at the boundary.
#pragma once
#include "../common/range.h"

static inline Range partition_range(size_t n, int world, int rank) { return range_split_ceil(n, world, rank); }
