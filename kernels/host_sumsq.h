// kernels/host_sumsq.h: sums of squares over gradients in HOST memory, for a device backend
// whose gradients were streamed to the host (ZeRO-Offload, zero/grads_reduce_scatter.c):
// the clip norm is taken where the gradient lies. Chunks of 64Ki elements summed in double
// over threads, then the chunks in order: the CUDA reduction's exact value (a double sum of
// fp32 squares) up to the order of the double additions.
#pragma once
#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// sum of g[i]^2 over n elements of dtype dt (fp32, bf16 or fp16), as double
double host_sumsq(Dtype dt, const void *g, size_t n);

#ifdef __cplusplus
}
#endif
