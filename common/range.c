// common/range.c: see range.h.
#include "range.h"

Range range_split_ceil(size_t n, int world, int rank) {
    size_t chunk = (n + (size_t)world - 1) / (size_t)world;
    size_t b = chunk * (size_t)rank, e = b + chunk;
    Range r = {b < n ? b : n, e < n ? e : n};
    return r;
}
