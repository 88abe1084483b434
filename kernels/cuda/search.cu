// kernels/cuda/search.cu: the generation-search ops on the device (backend.h beam_topk,
// beam_table_reorder; kernels/cpu/search.c is the reference). So that a step brings back only
// (B, K) candidates instead of the (N, V) logits:
//   beam_topk   1. one block per row (N = B*beams): the row's fp32 log_softmax stats (online
//                  max / sum of exp, 16-byte loads when aligned), then the row's K best
//                  candidates lsm + beam score (or the raw logits: greedy) by block
//                  selection (below), flat index j*V + v;
//               2. beams > 1: one block per item selects the K best of its beams*K row
//                  candidates (the union of the rows' top K holds the item's top K).
//               Block selection of K: each thread holds the best of its own elements (a
//               strided slice); K times the block takes the best of those (warp shuffles,
//               then one warp over the warps' winners) and only the thread whose element
//               was taken rescans its slice for the best element ranked after it. Order:
//               score descending, then flat index ascending (a strict total order, so
//               every thread agrees and the result is deterministic). Simple first: K
//               rounds of one block reduction each; K <= 128.
//   beam_table_reorder  positions 0..t-1 of each (cap) beam-table row copied from its
//               source row, the source rows read from a device int32 array; one contiguous
//               range of t ints per row, copied in the widest unit the alignment allows. A
//               source row outside [0, N) traps (the next synchronizing call fails naming
//               a faulted kernel).
#include <limits.h>

#include "common.cuh"

#define TOPK_ROW_THREADS 512
#define TOPK_MERGE_THREADS 256

// ---- block selection --------------------------------------------------------------------------

__device__ __forceinline__ bool topk_better(float av, int ai, float bv, int bi) {
    return av > bv || (av == bv && ai < bi);
}

// The better of the lanes' (v, i); every lane gets it (the order is total: symmetric).
__device__ __forceinline__ void warp_best(float &v, int &i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        if (topk_better(v2, i2, v, i)) v = v2, i = i2;
    }
}

// The best (v, i) of the block; every thread gets it. blockDim.x a multiple of 32; the
// leading barrier keeps a previous call's readers ahead of this call's writes.
__device__ __forceinline__ void block_best(float &v, int &i) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    warp_best(v, i);
    __syncthreads();
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    v = lane < nwarps ? sv[lane] : -INFINITY;
    i = lane < nwarps ? si[lane] : INT_MAX;
    warp_best(v, i);
}

// Candidates of one logits row: lsm + score (beam search) or the logit itself (greedy).
template <typename T> struct RowCands {
    const T *x;
    float m, log_s, score;
    int base;  // j*V: the row's beam within its item
    bool greedy;
    __device__ __forceinline__ void get(int e, float &v, int &i) const {
        const float f = to_float(x[e]);
        v = greedy ? f : __fadd_rn(__fsub_rn(__fsub_rn(f, m), log_s), score);  // as the CPU: ((x-m)-lse)+s
        i = base + e;
    }
};

// Candidates already computed: the rows' top K of one item.
struct ListCands {
    const float *v;
    const int *i;
    __device__ __forceinline__ void get(int e, float &v_, int &i_) const { v_ = v[e], i_ = i[e]; }
};

// The best of this thread's elements ranked after (lv, li) (all of them when !lim);
// (-inf, INT_MAX) when none.
template <typename Src>
__device__ void thread_best(const Src &src, int n, bool lim, float lv, int li, float &bv, int &bi) {
    bv = -INFINITY, bi = INT_MAX;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        float v;
        int i;
        src.get(e, v, i);
        if ((!lim || topk_better(lv, li, v, i)) && topk_better(v, i, bv, bi)) bv = v, bi = i;
    }
}

// out_v / out_i (K) = the K best of src's n elements, sorted; K <= n.
template <typename Src> __device__ void block_select_topk(const Src &src, int n, int K, float *out_v, int *out_i) {
    float bv;
    int bi;
    thread_best(src, n, false, 0.0f, 0, bv, bi);
    for (int k = 0; k < K; k++) {
        float v = bv;
        int i = bi;
        block_best(v, i);
        if (threadIdx.x == 0) out_v[k] = v, out_i[k] = i;
        if (bi == i) thread_best(src, n, true, v, i, bv, bi);  // indices are unique: only the owner
    }
}

// ---- log_softmax stats --------------------------------------------------------------------------

// Merge (max, sum exp(x - max)) pairs; _rn operations keep it symmetric for the shuffles.
__device__ __forceinline__ void topk_lse_merge(float &m, float &s, float m2, float s2) {
    const float nm = fmaxf(m, m2);
    if (nm == -INFINITY) return;  // both empty
    s = __fadd_rn(__fmul_rn(s, expf(m - nm)), __fmul_rn(s2, expf(m2 - nm)));
    m = nm;
}

// Row max m and log(sum exp(x - m)), in every thread of the block. P elements per load.
template <typename T, int P> __device__ void row_lse_stats(const T *x, int V, float &m, float &log_s) {
    __shared__ float sh_m[32], sh_s[32];
    float s = 0.0f;
    m = -INFINITY;
    for (int c = threadIdx.x * P; c < V; c += blockDim.x * P) {
        float f[P];
        load_vec<T, P>(f, x + c);
        float lm = f[0], ls = 0.0f;
#pragma unroll
        for (int k = 1; k < P; k++) lm = fmaxf(lm, f[k]);
        if (lm == -INFINITY) continue;  // a pack of masked tokens
#pragma unroll
        for (int k = 0; k < P; k++) ls += expf(f[k] - lm);
        topk_lse_merge(m, s, lm, ls);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        topk_lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) sh_m[warp] = m, sh_s[warp] = s;
    __syncthreads();
    m = lane < nwarps ? sh_m[lane] : -INFINITY;
    s = lane < nwarps ? sh_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        topk_lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    log_s = logf(s);
}

// ---- beam_topk ----------------------------------------------------------------------------------

template <typename T, int P>
__global__ void __launch_bounds__(TOPK_ROW_THREADS)
    beam_topk_row_kernel(float *row_v, int *row_i, const T *logits, const float *beam_scores, int beams, int V,
                         int K) {
    const int r = blockIdx.x;
    const T *x = logits + (size_t)r * V;
    float m = 0.0f, log_s = 0.0f;
    if (beam_scores) row_lse_stats<T, P>(x, V, m, log_s);
    const RowCands<T> src = {x, m, log_s, beam_scores ? beam_scores[r] : 0.0f, (r % beams) * V, beam_scores == nullptr};
    block_select_topk(src, V, K, row_v + (size_t)r * K, row_i + (size_t)r * K);
}

__global__ void __launch_bounds__(TOPK_MERGE_THREADS)
    beam_topk_merge_kernel(float *out_v, int *out_i, const float *row_v, const int *row_i, int beams, int K) {
    const size_t b = blockIdx.x, nk = (size_t)beams * K;
    const ListCands src = {row_v + b * nk, row_i + b * nk};
    block_select_topk(src, beams * K, K, out_v + b * K, out_i + b * K);
}

template <typename T>
static void topk_launch(float *out_v, int *out_i, const void *logits, const float *beam_scores, int B, int beams,
                        int V, int K) {
    if (B < 1 || beams < 1 || V < 1 || K < 1 || K > V || K > BEAM_TOPK_MAX_K)
        t5_fail("beam_topk: B %d, beams %d, V %d, K %d: need each >= 1 and K <= min(V, %d)", B, beams, V, K,
                BEAM_TOPK_MAX_K);
    const int N = B * beams;
    float *row_v = out_v;
    int *row_i = out_i;
    if (beams > 1) {  // (N, K) scores, then (N, K) indices
        row_v = (float *)cuda_scratch_reserve(CUDA_SCRATCH_BEAM_TOPK, (size_t)N * K * (sizeof(float) + sizeof(int)));
        row_i = (int *)(row_v + (size_t)N * K);
    }
    cudaStream_t st = t5_stream();
    constexpr int P = pack_of<T>();
    const bool vec = V % P == 0 && aligned16(logits);
    const int threads = row_block_threads(vec ? V / P : V, TOPK_ROW_THREADS);
    if (vec)
        beam_topk_row_kernel<T, P><<<N, threads, 0, st>>>(row_v, row_i, (const T *)logits, beam_scores, beams, V, K);
    else
        beam_topk_row_kernel<T, 1><<<N, threads, 0, st>>>(row_v, row_i, (const T *)logits, beam_scores, beams, V, K);
    cudaLaunchCheck();
    if (beams == 1) return;
    beam_topk_merge_kernel<<<B, TOPK_MERGE_THREADS, 0, st>>>(out_v, out_i, row_v, row_i, beams, K);
    cudaLaunchCheck();
}

extern "C" void cuda_beam_topk(Dtype dt, float *out_scores, int *out_idx, const void *logits,
                               const float *beam_scores, int B, int beams, int V, int K) {
    DISPATCH_DTYPE(dt, topk_launch, out_scores, out_idx, logits, beam_scores, B, beams, V, K);
}

// ---- beam_table_reorder -----------------------------------------------------------------------------------

template <typename U>
__global__ void table_reorder_kernel(U *__restrict__ dst, const U *__restrict__ src, const int *__restrict__ src_rows,
                                  int N, size_t row_units, size_t copy_units) {
    for (int i = blockIdx.y; i < N; i += gridDim.y) {
        const int s = src_rows[i];
        if (s < 0 || s >= N) __trap();  // a bug in the caller: fail loudly, not silently
        const U *sp = src + (size_t)s * row_units;
        U *dp = dst + (size_t)i * row_units;
        for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < copy_units; u += (size_t)gridDim.x * blockDim.x)
            dp[u] = sp[u];
    }
}

template <typename U>
static void table_reorder_units(void *dst, const void *src, const int *src_rows, int N, size_t row_bytes,
                             size_t copy_bytes) {
    const int threads = 256;
    const size_t r = row_bytes / sizeof(U), c = copy_bytes / sizeof(U);
    size_t gx = CEIL_DIV(c, (size_t)threads);
    if (gx > 1024) gx = 1024;
    const unsigned gy = N < 65535 ? (unsigned)N : 65535u;
    table_reorder_kernel<U><<<dim3((unsigned)gx, gy), threads, 0, t5_stream()>>>((U *)dst, (const U *)src, src_rows, N,
                                                                              r, c);
    cudaLaunchCheck();
}

extern "C" void cuda_beam_table_reorder(int *dst, const int *src, const int *src_rows, int N, int cap, int t) {
    if (t < 0 || t > cap) t5_fail("beam_table_reorder: %d positions to copy, but the table holds %d", t, cap);
    if (N <= 0 || t == 0) return;
    const size_t row_bytes = (size_t)cap * sizeof(int), copy_bytes = (size_t)t * sizeof(int);
    uintptr_t al = (uintptr_t)dst | (uintptr_t)src | (uintptr_t)row_bytes | (uintptr_t)copy_bytes | 16u;
    al &= ~al + 1;  // the lowest set bit: the widest unit every address and length allows
    if (al >= 16) table_reorder_units<uint4>(dst, src, src_rows, N, row_bytes, copy_bytes);
    else if (al >= 8) table_reorder_units<uint2>(dst, src, src_rows, N, row_bytes, copy_bytes);
    else table_reorder_units<unsigned int>(dst, src, src_rows, N, row_bytes, copy_bytes);
}
