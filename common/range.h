// common/range.h: a range of elements of a flat buffer, and the ceil split of n elements over
// ranks that ZeRO's partitions (zero/partition.h) and the ranged collectives (comm/comm.h)
// share: rank r gets [r * chunk, min(n, (r + 1) * chunk)) with chunk = ceil(n / world).
#pragma once
#include <stddef.h>

typedef struct {
    size_t begin, end;  // elements, end exclusive
} Range;

Range range_split_ceil(size_t n, int world, int rank);
