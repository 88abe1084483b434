// kernels/cuda/context.cuh: the CUDA backend's context: every piece of per-device state
// the backend holds, in one object (CudaContext) that cuda_init() fills and that each
// CUDA Backend exposes as Backend.ctx. Internal to kernels/cuda/*.cu.
//
// Why the ops reach it through cuda_ctx() rather than an argument: the Backend ops keep
// the signatures of kernels/backend.h (model/ calls them unchanged, with no Backend *
// first argument), and a process drives one GPU (cuda_init refuses a second device: one
// rank per GPU), so "the context of the backend called through" is this process's one
// context. cuda_context is the only mutable file-scope object of kernels/cuda; the other
// statics left there are constant tables (static const), the three Backend structs (which
// only point at it), two flags read once from the environment (matmul.cu) and the shared
// memory size opted in per kernel instantiation (rmsnorm.cu: it mirrors an attribute the
// driver keeps on the kernel function itself).
#pragma once
#include <stddef.h>

#include <mutex>
#include <unordered_map>

#include <cublasLt.h>
#include <cuda_runtime.h>

#define CUDA_STAGE_SLOTS 8

// A device buffer an op grows on demand (through cuda_alloc, so it is counted in
// mem_in_use); the memory is the context's, reused by every later call.
struct CudaScratch {
    void *p;
    size_t bytes;
};
enum CudaScratchId {
    CUDA_SCRATCH_ATTENTION,      // attention.cu: per-call workspaces of forward / backward
    CUDA_SCRATCH_CROSSENTROPY,   // crossentropy.cu: CEResult, then per-row losses
    CUDA_SCRATCH_EMBEDDING,      // embedding.cu: sorted ids of the backward
    CUDA_SCRATCH_SUMSQ,          // optimizer.cu: [0] result, [1 ..] block sums
    CUDA_SCRATCH_SUMSQ_MANY,     // optimizer.cu: sumsq_many's ranges, results and block sums
    CUDA_SCRATCH_POSITION_DIAG,  // position_bias.cu: (H, Tq+Tk-1) diagonal sums of the backward
    CUDA_SCRATCH_RMSNORM,        // rmsnorm.cu: per-block partial dweight sums
    CUDA_SCRATCH_CLAMP_FLAG,     // elementwise.cu: the "any inf" flag of clamp_fp16_overflow
    CUDA_SCRATCH_GUARD_FLAGS,    // elementwise.cu: dropout_add_guard's two "any inf" flags, used in turn
    CUDA_SCRATCH_BEAM_TOPK,      // search.cu: (N, K) per-row candidates of beam_topk
    CUDA_SCRATCH_GEMM_POINTERS,  // matmul.cu: the entry addresses of a pointer-array batched GEMM
    CUDA_SCRATCH_FP8,            // fp8.cu: the rounded operands of one fp8 linear (fp8_format.h fp8_scratch_bytes)
    CUDA_SCRATCH_FP8_INV,        // fp8.cu: the call's inverse scales, 16-byte aligned (cuBLASLt's scale pointers)
    CUDA_SCRATCH_FP8_ACT,        // fp8.cu: h or da of fp8_relu_drop_matmul_* where its fast pass does not apply
    CUDA_SCRATCH_COUNT
};

struct GemmPlanCache;     // matmul.cu: cuBLASLt plans by shape (created on first use)
struct BucketTableCache;  // position_bias.cu: device bucket tables (created on first use)

struct CudaContext {
    int initialized;
    int device;
    int cc;                          // compute capability (major*10 + minor; T5_TEST_COMPUTE_CAPABILITY's when set)
    int sm_count;                    // multiprocessors, for grid sizes
    int tf32;                        // 1: fp32 GEMMs on TF32 tensor cores (--tf32); 0: exact fp32
    cudaStream_t stream;             // the non-blocking stream every op launches on: main_stream, or
                                     // side_stream between side_begin and side_end (side_stream.cu)
    cudaStream_t main_stream;        // the compute stream
    cudaStream_t side_stream;        // side_stream.cu's, made on first use
    cudaEvent_t side_fork;           // main's point the side stream starts after
    cudaEvent_t *side_marks;         // side_mark's points, n_side_marks of them
    int n_side_marks;
    cublasLtHandle_t lt;             // cuBLASLt handle and its workspace (matmul.cu)
    void *lt_workspace;
    // pinned staging ring of to_device (memory.cu)
    char *stage;                     // CUDA_STAGE_SLOTS x 1 MiB pinned host memory
    cudaEvent_t stage_done[CUDA_STAGE_SLOTS];  // recorded after each slot's copy
    unsigned stage_next;
    std::mutex stage_mutex;
    // asynchronous copies (memory.cu cuda_to_host_async / cuda_to_device_async), made on first use
    cudaStream_t copy_down, copy_up;             // device-to-host, host-to-device
    cudaEvent_t copy_after;                      // the compute stream's work before a copy
    cudaEvent_t copy_done[BACKEND_COPY_SLOTS];   // a slot's last copy
    // allocator bookkeeping (memory.cu); the allocator may be used from several host threads
    std::mutex mem_mutex;
    std::unordered_map<void *, size_t> live_blocks;  // pointer -> requested bytes
    size_t mem_in_use, mem_peak, mem_cap;            // mem_cap 0: none (--max_gpu_memory)
    size_t mem_total;                                // the device's memory (cudaDeviceProp.totalGlobalMem)
    // per-op state
    CudaScratch scratch[CUDA_SCRATCH_COUNT];
    GemmPlanCache *gemm_plans;
    BucketTableCache *bucket_tables;
};

extern CudaContext cuda_context;  // memory.cu; Backend.ctx of every CUDA backend points here

// The context, initialized (dies naming fn when cuda_init has not run: a bug in the caller).
CudaContext *cuda_ctx_checked(const char *fn);
#define cuda_ctx() cuda_ctx_checked(__func__)
// Grow a scratch buffer of the context to at least `bytes` (its contents are not kept).
void *cuda_scratch_reserve(CudaScratchId id, size_t bytes);

cublasLtHandle_t cuda_lt_handle(void);     // created by cuda_init
void *cuda_lt_workspace(size_t *bytes);    // 32 MiB, counted in cuda_mem_in_use; *bytes = its size
int cuda_sm_count(void);                   // multiprocessors of the device chosen by cuda_init
