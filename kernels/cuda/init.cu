// kernels/cuda/init.cu: the random init in place (backend.h init_random): each element's
// normal draw made on the GPU from kernels/init_rng.h, the code the CPU runs, so start-up
// copies nothing (t5-large: 738M draws, 3 GB of fp32 master and 1.5 GB of 16-bit
// weights that would otherwise cross PCIe). Rounding: init_rng.h.
#include "../init_rng.h"
#include "common.cuh"
#include "cuda_ops.h"

template <typename T>
__global__ void init_random_kernel(T *dst, size_t n, uint64_t key, uint64_t first, double std, int is_const) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = is_const ? (float)std : init_rng_value(key, first + i, std);
        dst[i] = from_float<T>(v);
    }
}

template <typename T>
static void init_random(void *dst, size_t n, uint64_t key, uint64_t first, double std, int is_const) {
    const int threads = 256;
    init_random_kernel<T><<<grid_stride_blocks(n, threads), threads, 0, t5_stream()>>>((T *)dst, n, key, first, std,
                                                                                         is_const);
    cudaLaunchCheck();
}

extern "C" void cuda_init_random(void *dst, Dtype dt, size_t n, uint64_t key, uint64_t first, double std,
                                 int is_const) {
    if (n == 0) return;
    DISPATCH_DTYPE(dt, init_random, dst, n, key, first, std, is_const);
}
