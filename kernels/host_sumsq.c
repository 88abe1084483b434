// kernels/host_sumsq.c: see host_sumsq.h.
#include "host_sumsq.h"

#include <stdint.h>
#include <stdlib.h>

#include "../common/check.h"
#include "../common/half.h"

#define HOST_SUMSQ_CHUNK ((size_t)1 << 16)

static float widen(Dtype dt, const void *g, size_t i) {
    if (dt == DTYPE_F32) return ((const float *)g)[i];
    uint16_t h = ((const uint16_t *)g)[i];
    return dt == DTYPE_BF16 ? half_bf16_to_f32(h) : half_f16_to_f32(h);
}

double host_sumsq(Dtype dt, const void *g, size_t n) {
    size_t nchunks = (n + HOST_SUMSQ_CHUNK - 1) / HOST_SUMSQ_CHUNK;
    if (nchunks == 0) return 0.0;
    double *part = mallocCheck(nchunks * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i0 = c * HOST_SUMSQ_CHUNK, i1 = i0 + HOST_SUMSQ_CHUNK < n ? i0 + HOST_SUMSQ_CHUNK : n;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) {
            float f = widen(dt, g, i);
            s += (double)(f * f);
        }
        part[c] = s;
    }
    double total = 0.0;
    for (size_t c = 0; c < nchunks; c++) total += part[c];
    free(part);
    return total;
}
