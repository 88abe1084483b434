// kernels/cuda/common.cuh: what every kernels/cuda/*.cu shares: checked CUDA / cuBLAS
// calls (file, line, the failing statement, a HINT), the dtype dispatch, and the pointwise
// kernel skeleton (grid-stride over 16-byte packs with a scalar tail); the kernels' own
// helpers (dtype load/store with fp32 math, 16-byte vector access, warp/block reductions)
// are device_common.cuh's, which this includes.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// backend.h and check.h are C headers without extern "C" guards: declare them with C
// linkage here, before cuda_ops.h includes backend.h again (#pragma once).
extern "C" {
#include "../../common/check.h"
#include "../backend.h"
}
#include "context.cuh"
#include "cuda_ops.h"
#include "device_common.cuh"

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// ---- checked calls ---------------------------------------------------------------------

static inline const char *cuda_error_hint(cudaError_t err) {
    switch (err) {
    case cudaErrorMemoryAllocation:
        return "the GPU is out of memory: lower the batch size, use a ZeRO stage or offload, or check "
               "nvidia-smi for other processes on this GPU";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        return "no usable CUDA GPU: check nvidia-smi, the driver version and CUDA_VISIBLE_DEVICES, or run "
               "with --device cpu";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
        return "this build has no code for this GPU (cuda_init checks the targets, so this is a bug: report it "
               "with the GPU's name and the output of make's feature line); make CUDA_ARCH=<its compute "
               "capability> rebuilds for it";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
        return "a kernel faulted (launches are asynchronous: the culprit may be an earlier one); rerun with "
               "CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer to find it";
    case cudaErrorInvalidConfiguration:
        return "a kernel launch had an invalid grid or block (a dimension 0 or too large): check the tensor "
               "shapes passed to this op";
    default:
        return "rerun with CUDA_LAUNCH_BLOCKING=1 (errors of asynchronous launches surface at a later call) or "
               "under compute-sanitizer";
    }
}

static inline void cuda_check(cudaError_t err, const char *stmt, const char *file, int line) {
    if (err == cudaSuccess) return;
    char msg[1024];
    snprintf(msg, sizeof msg, "CUDA error %s (%s) in %s", cudaGetErrorName(err), cudaGetErrorString(err), stmt);
    t5_die(file, line, msg, cuda_error_hint(err));
}

static inline void cublas_check(cublasStatus_t st, const char *stmt, const char *file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    char msg[1024];
    snprintf(msg, sizeof msg, "cuBLAS error %s (%s) in %s", cublasLtGetStatusName(st), cublasLtGetStatusString(st),
             stmt);
    t5_die(file, line, msg,
           st == CUBLAS_STATUS_NOT_SUPPORTED
               ? "cuBLASLt has no algorithm for this shape / dtype / layout: report the shapes"
               : "check the matrix shapes and leading dimensions; rerun with CUBLASLT_LOG_LEVEL=5 for cuBLASLt's "
                 "own log");
}

#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)
// After every kernel launch: catches bad launch configurations at once (cheap: no sync).
#define cudaLaunchCheck() cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline cudaStream_t t5_stream(void) { return (cudaStream_t)cuda_stream(); }

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Blocks for one item a thread: the grid-stride loop then runs once (at most 2^31 - 1 blocks).
static inline unsigned one_pass_blocks(size_t items, int threads) {
    size_t want = CEIL_DIV(items, (size_t)threads);
    if (want > 0x7fffffffu) want = 0x7fffffffu;
    return (unsigned)(want > 0 ? want : 1);
}

// Blocks for a grid-stride loop over `items` with `threads` per block: enough to cover
// the work once, at most 16 resident-ish blocks per multiprocessor.
static inline unsigned grid_stride_blocks(size_t items, int threads) {
    const unsigned want = one_pass_blocks(items, threads), cap = (unsigned)cuda_sm_count() * 16;
    return want < cap ? want : cap;
}

// Threads for a one-block-per-row kernel touching `packs` vector accesses per row:
// a multiple of 32, at most max_threads.
static inline int row_block_threads(int packs, int max_threads) {
    int t = CEIL_DIV(packs, 32) * 32;
    if (t < 32) t = 32;
    return t > max_threads ? max_threads : t;
}

// ---- dtype dispatch -------------------------------------------------------------------------

static inline void dtype_unknown(Dtype dt, const char *fn) {
    t5_fail("%s: unknown dtype code %d (supported: fp32, fp16, bf16)", fn, (int)dt);
}

// Calls FN<T>(args...) for the T of dt.
#define DISPATCH_DTYPE(dt, FN, ...)                                  \
    do {                                                             \
        switch (dt) {                                                \
        case DTYPE_F32: FN<float>(__VA_ARGS__); break;               \
        case DTYPE_BF16: FN<__nv_bfloat16>(__VA_ARGS__); break;      \
        case DTYPE_F16: FN<__half>(__VA_ARGS__); break;              \
        default: dtype_unknown(dt, __func__);                        \
        }                                                            \
    } while (0)

// ---- pointwise skeleton ---------------------------------------------------------------------
// F has `template <int V> __device__ void apply(size_t i) const` handling elements
// i .. i+V-1 (V = 1 or the 16-byte pack); F is passed by value (pointers and scalars).

template <int V, typename F> __global__ void pointwise_kernel(F f, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t nv = n / V;
    for (size_t p = t; p < nv; p += stride) f.template apply<V>(p * V);
    if constexpr (V > 1)
        for (size_t i = nv * V + t; i < n; i += stride) f.template apply<1>(i);
}

// Packs of V elements (16 bytes of T unless the caller says otherwise) when every pointer
// the functor touches is 16-byte aligned (`aligned`), single elements otherwise. one_pass: a
// block for every 256 items (AdamW: faster on the H200), else grid_stride_blocks (the
// activation and dropout kernels: ffn_act_backward measured 54.9 us capped, 58.4 one pass).
template <typename T, int V = pack_of<T>(), typename F>
static void launch_pointwise(const F &f, size_t n, bool aligned, bool one_pass = false) {
    if (n == 0) return;
    const int threads = 256;
    const size_t items = aligned ? CEIL_DIV(n, (size_t)V) : n;
    const unsigned blocks = one_pass ? one_pass_blocks(items, threads) : grid_stride_blocks(items, threads);
    if (aligned) {
        pointwise_kernel<V><<<blocks, threads, 0, t5_stream()>>>(f, n);
    } else {
        pointwise_kernel<1><<<blocks, threads, 0, t5_stream()>>>(f, n);
    }
    cudaLaunchCheck();
}
