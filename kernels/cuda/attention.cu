// kernels/cuda/attention.cu: T5 attention core (after the q/k/v projections) on
// strided-batched cuBLASLt GEMMs (batch = B*H, matmul.cu's cuda_gemm_strided) plus
// three kinds of kernels of our own: head permutes, a row softmax, its backward.
// Semantics are kernels/backend.h's and the CPU reference's (kernels/cpu/attention.c):
// no 1/sqrt(dk) scaling, bias (H,Tq,Tk) shared by the batch, key_mask (B,kv_rows),
// causal masks key j > q_offset + i, masked keys get probability exactly 0, a row with
// every key masked gets att = 0 and out = 0, att holds the probabilities before dropout.
//
// Shapes (letters as backend.h; bh = b*H + h):
//   q (B,Tq,H*dk), k and v (B,kv_rows,H*dk) (first Tk rows), out (B,Tq,H*dk)
//   att (B,H,Tq,Tk); scratch Qp (B,H,Tq,dk), Kp and Vp (B,H,Tk,dk) = heads made contiguous
// Row-major products and their column-major cuBLASLt form (m,n,k; A op, B op):
//   S  = Qp Kp^T  (Tq,Tk) -> m=Tk n=Tq k=dk; A=Kp T, B=Qp N        (into att, then softmax in place)
//   O  = Pd Vp    (Tq,dk) -> m=dk n=Tq k=Tk; A=Vp N, B=Pd N
//   dPd = dO Vp^T (Tq,Tk) -> m=Tk n=Tq k=dk; A=Vp T, B=dOp N
//   dV = Pd^T dO  (Tk,dk) -> m=dk n=Tk k=Tq; A=dOp N, B=Pd T
//   dQ = dS Kp    (Tq,dk) -> m=dk n=Tq k=Tk; A=Kp N, B=dS N
//   dK = dS^T Qp  (Tk,dk) -> m=dk n=Tk k=Tq; A=Qp N, B=dS T
// Dropout: the softmax kernel also writes the dropped probabilities Pd = round(round(P) *
// mask * 1/(1-p)) into scratch (mask from kernels/dropout_rng.h, element index = the
// flattened (b,h,i,j)), and O = Pd Vp is a plain GEMM. Backward regenerates the same Pd
// from att in the softmax-backward kernel (one pass over P) for dV. p == 0: Pd is att.
// Scores, probabilities and dS are stored in the activation dtype (as HF does); all
// arithmetic in between is fp32.
//
// Determinism: no atomics. Row sums are fixed warp-shuffle trees, dbias is a per-element
// loop over b in order (fp32) then one add into dbias, the GEMMs are cached cuBLASLt
// algorithms: the same inputs give bitwise the same outputs.
//
// Softmax kernels: one warp per row; a vectorized version (4 keys per access, grid
// (Tq/8, H, B)) when Tk % 4 == 0 and Tk <= 1024 (every t5 training shape), scalar ones
// otherwise (any Tk; registers up to 1024 keys, then three passes over memory).
//
// Measured on an H200 (bf16, B=64 H=16 T=128 dk=64, bias + mask + dropout 0.1): forward
// 0.147 ms, backward 0.233 ms. Of that, the two softmax kernels take ~58 + 40 us (the
// dropout RNG's 64-bit multiplies make them compute-bound), the six GEMMs ~18 us each,
// dbias ~15 us, and the eleven head permutes ~10-13 us each (at ~3.4 TB/s): q, k, v and
// their gradients in a head-major layout upstream would remove the permutes.
//
// Scratch: one device buffer grown by cuda_alloc when a call needs more than the last
// (never per call), reused by every call on the stream. No host synchronization.
#include <math.h>

#include "../dropout_rng.h"
#include "common.cuh"

// Column-major strided-batched C = op(A) op(B) (+ C when accumulate); matmul.cu.
void cuda_gemm_strided(Dtype dt, int transa, int transb, int m, int n, int k, const void *A, int lda, long long sa,
                       const void *B, int ldb, long long sb, void *C, int ldc, long long sc, int batch,
                       int accumulate);

namespace attn {

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
    T v[N];
};

// ---- head permutes -------------------------------------------------------------------------
// dst (B,H,T,r) = src (B,rows,H,r) (first T rows), in units U of r per head row. Pure
// data movement, so one kernel serves every dtype.
template <typename U>
__global__ void heads_split_kernel(U *__restrict__ dst, const U *__restrict__ src, int BH, int H, int T, int rows,
                                   int r) {
    const int per_bh = T * r;
    for (int bh = blockIdx.y; bh < BH; bh += gridDim.y) {
        const int b = bh / H, h = bh - b * H;
        for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < per_bh; u += gridDim.x * blockDim.x) {
            const int t = u / r, c = u - t * r;
            dst[(size_t)bh * per_bh + u] = src[(((size_t)b * rows + t) * H + h) * r + c];
        }
    }
}

// dst (B,T,H,r) = src (B,H,T,r).
template <typename U>
__global__ void heads_merge_kernel(U *__restrict__ dst, const U *__restrict__ src, int BH, int H, int T, int r) {
    const int per_bh = T * r;
    for (int bh = blockIdx.y; bh < BH; bh += gridDim.y) {
        const int b = bh / H, h = bh - b * H;
        for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < per_bh; u += gridDim.x * blockDim.x) {
            const int t = u / r, c = u - t * r;
            dst[(((size_t)b * T + t) * H + h) * r + c] = src[(size_t)bh * per_bh + u];
        }
    }
}

// dst (B,T,H*dk) += src (B,H,T,dk), VEC elements per thread, fp32 add, one rounding.
template <typename T, int VEC>
__global__ void heads_merge_add_kernel(T *__restrict__ dst, const T *__restrict__ src, int BH, int H, int Tn,
                                       int dk) {
    const int rv = dk / VEC, per_bh = Tn * rv;
    for (int bh = blockIdx.y; bh < BH; bh += gridDim.y) {
        const int b = bh / H, h = bh - b * H;
        for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < per_bh; u += gridDim.x * blockDim.x) {
            const int t = u / rv, c = u - t * rv;
            const Pack<T, VEC> s = *reinterpret_cast<const Pack<T, VEC> *>(src + ((size_t)bh * Tn + t) * dk + c * VEC);
            Pack<T, VEC> *dp = reinterpret_cast<Pack<T, VEC> *>(dst + (((size_t)b * Tn + t) * H + h) * dk + c * VEC);
            Pack<T, VEC> d = *dp;
#pragma unroll
            for (int e = 0; e < VEC; e++) d.v[e] = from_float<T>(to_float(d.v[e]) + to_float(s.v[e]));
            *dp = d;
        }
    }
}

// ---- softmax forward -------------------------------------------------------------------------
// One warp per row (b,h,i) of att (B,H,Tq,Tk), which holds the raw scores on entry.
// NPER > 0: lane keeps its NPER scores (j = lane + 32 t) in registers (Tk <= 32 NPER).
// NPER == 0: any Tk, three passes over the row in memory.
struct SoftmaxArgs {
    const int *key_mask;  // (B,kv_rows) or NULL
    int rows, H, Tq, Tk, kv_rows, causal, q_offset;
    float p, scale;  // dropout probability and 1/(1-p); p == 0: no dropout
    unsigned long long key;  // dropout_key(seed)
};

// kernels/dropout_rng.h's dropout_rng_uniform(seed, index) split in two: the per-seed
// half (the key) is computed once on the host, leaving one mix per element (the RNG's
// 64-bit multiplies dominated the softmax kernels). The tests compare the masks with
// the CPU's, which calls dropout_rng_uniform itself.
static inline unsigned long long dropout_key(uint64_t seed) { return dropout_rng_mix64(seed + DROPOUT_RNG_GAMMA); }
__device__ __forceinline__ bool dropout_keep(unsigned long long key, uint64_t index, float p) {
    return (float)(dropout_rng_mix64(key + (index + 1) * DROPOUT_RNG_GAMMA) >> 40) * 0x1.0p-24f >= p;
}

__device__ __forceinline__ bool key_live(const SoftmaxArgs &a, const int *mrow, int j, int qpos) {
    return !(mrow && mrow[j] == 0) && !(a.causal && j > qpos);
}

template <typename T>
__device__ __forceinline__ void softmax_store(T *att, T *pd, size_t idx, float P, const SoftmaxArgs &a) {
    const T Pt = from_float<T>(P);
    att[idx] = Pt;
    if (pd) {
        const bool keep = dropout_keep(a.key, idx, a.p);
        pd[idx] = from_float<T>(keep ? to_float(Pt) * a.scale : 0.0f);
    }
}

template <typename T, int NPER>
__global__ void softmax_forward_kernel(T *__restrict__ att, T *__restrict__ pd, const T *__restrict__ bias,
                                       SoftmaxArgs a) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= a.rows) return;
    const int i = row % a.Tq, bh = row / a.Tq, h = bh % a.H, b = bh / a.H, Tk = a.Tk, qpos = a.q_offset + i;
    const size_t base = (size_t)row * Tk;
    const T *brow = bias ? bias + ((size_t)h * a.Tq + i) * Tk : nullptr;
    const int *mrow = a.key_mask ? a.key_mask + (size_t)b * a.kv_rows : nullptr;
    float mx = -INFINITY;
    if constexpr (NPER > 0) {
        float s[NPER];
        unsigned live = 0;
#pragma unroll
        for (int t = 0; t < NPER; t++) {
            const int j = lane + 32 * t;
            s[t] = 0.0f;
            if (j < Tk && key_live(a, mrow, j, qpos)) {
                float x = to_float(att[base + j]);
                if (brow) x += to_float(brow[j]);
                s[t] = x;
                live |= 1u << t;
                mx = fmaxf(mx, x);
            }
        }
        mx = warp_max(mx);
        float sum = 0.0f;
#pragma unroll
        for (int t = 0; t < NPER; t++) {
            s[t] = (live >> t) & 1u ? expf(s[t] - mx) : 0.0f;
            sum += s[t];
        }
        sum = warp_sum(sum);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // sum == 0: every key masked
#pragma unroll
        for (int t = 0; t < NPER; t++) {
            const int j = lane + 32 * t;
            if (j < Tk) softmax_store(att, pd, base + j, s[t] * inv, a);
        }
    } else {
        for (int j = lane; j < Tk; j += 32)
            if (key_live(a, mrow, j, qpos)) mx = fmaxf(mx, to_float(att[base + j]) + (brow ? to_float(brow[j]) : 0.0f));
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int j = lane; j < Tk; j += 32)
            if (key_live(a, mrow, j, qpos)) sum += expf(to_float(att[base + j]) + (brow ? to_float(brow[j]) : 0.0f) - mx);
        sum = warp_sum(sum);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int j = lane; j < Tk; j += 32) {
            float P = 0.0f;
            if (key_live(a, mrow, j, qpos)) P = expf(to_float(att[base + j]) + (brow ? to_float(brow[j]) : 0.0f) - mx) * inv;
            softmax_store(att, pd, base + j, P, a);
        }
    }
}

// ---- softmax backward --------------------------------------------------------------------------
// One warp per row. On entry dp holds dPd = dO V^T; with g = dropout mask * scale * dPd
// (g = dPd without dropout) it leaves dS = P (g - sum_j P g) in place, and writes the
// dropped probabilities Pd into pd when pd != NULL (for dV).
template <typename T, int NPER>
__global__ void softmax_backward_kernel(T *__restrict__ dp, T *__restrict__ pd, const T *__restrict__ att,
                                        int rows, int Tk, float p, float scale, unsigned long long key) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const size_t base = (size_t)row * Tk;
    const bool dropping = p != 0.0f;
    float dot = 0.0f;
    if constexpr (NPER > 0) {
        float P[NPER], g[NPER];
#pragma unroll
        for (int t = 0; t < NPER; t++) {
            const int j = lane + 32 * t;
            P[t] = 0.0f;
            g[t] = 0.0f;
            if (j < Tk) {
                P[t] = to_float(att[base + j]);
                g[t] = to_float(dp[base + j]);
                if (dropping) {
                    const bool keep = dropout_keep(key, base + j, p);
                    g[t] = keep ? g[t] * scale : 0.0f;
                    if (pd) pd[base + j] = from_float<T>(keep ? P[t] * scale : 0.0f);
                }
                dot += P[t] * g[t];
            }
        }
        dot = warp_sum(dot);
#pragma unroll
        for (int t = 0; t < NPER; t++) {
            const int j = lane + 32 * t;
            if (j < Tk) dp[base + j] = from_float<T>(P[t] * (g[t] - dot));
        }
    } else {
        for (int j = lane; j < Tk; j += 32) {
            const float Pj = to_float(att[base + j]);
            float gj = to_float(dp[base + j]);
            if (dropping) {
                const bool keep = dropout_keep(key, base + j, p);
                gj = keep ? gj * scale : 0.0f;
                if (pd) pd[base + j] = from_float<T>(keep ? Pj * scale : 0.0f);
            }
            dot += Pj * gj;
        }
        dot = warp_sum(dot);
        for (int j = lane; j < Tk; j += 32) {  // the lane re-reads only its own elements
            const float Pj = to_float(att[base + j]);
            float gj = to_float(dp[base + j]);
            if (dropping) gj = dropout_keep(key, base + j, p) ? gj * scale : 0.0f;
            dp[base + j] = from_float<T>(Pj * (gj - dot));
        }
    }
}

// ---- softmax, vectorized (the t5 path) ------------------------------------------------------
// Same math as the kernels above for rows whose length is a multiple of 4 (Tk <= 1024)
// and 4-element-aligned buffers: each lane owns NC chunks of 4 consecutive keys (j =
// 4 (lane + 32 c) + e), loaded and stored as one vector; the grid is (Tq/8, H, B) so no
// index needs a division; the dropout counter of a chunk is formed once and stepped by
// additions. (The scalar kernels spent ~130 instructions per element, which made them
// compute-bound at ~1 TB/s.)
enum { SM_VEC = 4 };

template <typename T, int NC>
__global__ void softmax_forward_vec_kernel(T *__restrict__ att, T *__restrict__ pd, const T *__restrict__ bias,
                                           SoftmaxArgs a) {
    const int lane = threadIdx.x % 32, i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= a.Tq) return;
    const int Tk = a.Tk, qpos = a.q_offset + i;
    const size_t base = (((size_t)b * a.H + h) * a.Tq + i) * Tk;
    const T *brow = bias ? bias + ((size_t)h * a.Tq + i) * Tk : nullptr;
    const int *mrow = a.key_mask ? a.key_mask + (size_t)b * a.kv_rows : nullptr;
    float s[NC][SM_VEC];
    unsigned live = 0;  // bit c*SM_VEC + e
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int j0 = (lane + 32 * c) * SM_VEC;
        if (j0 < Tk) {
            load_vec<T, SM_VEC>(s[c], att + base + j0);
            if (brow) {
                float bb[SM_VEC];
                load_vec<T, SM_VEC>(bb, brow + j0);
#pragma unroll
                for (int e = 0; e < SM_VEC; e++) s[c][e] += bb[e];
            }
#pragma unroll
            for (int e = 0; e < SM_VEC; e++)
                if (key_live(a, mrow, j0 + e, qpos)) {
                    live |= 1u << (c * SM_VEC + e);
                    mx = fmaxf(mx, s[c][e]);
                }
        }
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; c++)
#pragma unroll
        for (int e = 0; e < SM_VEC; e++) {
            s[c][e] = (live >> (c * SM_VEC + e)) & 1u ? expf(s[c][e] - mx) : 0.0f;
            sum += s[c][e];
        }
    sum = warp_sum(sum);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // sum == 0: every key masked
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int j0 = (lane + 32 * c) * SM_VEC;
        if (j0 >= Tk) continue;
        float P[SM_VEC];
#pragma unroll
        for (int e = 0; e < SM_VEC; e++) P[e] = round_to<T>(s[c][e] * inv);
        store_vec<T, SM_VEC>(att + base + j0, P);
        if (pd) {
            const unsigned long long ctr = (base + j0 + 1) * DROPOUT_RNG_GAMMA;
            float D[SM_VEC];
#pragma unroll
            for (int e = 0; e < SM_VEC; e++) {
                const float u = (float)(dropout_rng_mix64(a.key + ctr + e * DROPOUT_RNG_GAMMA) >> 40) * 0x1.0p-24f;
                D[e] = u >= a.p ? P[e] * a.scale : 0.0f;
            }
            store_vec<T, SM_VEC>(pd + base + j0, D);
        }
    }
}

template <typename T, int NC>
__global__ void softmax_backward_vec_kernel(T *__restrict__ dp, T *__restrict__ pd, const T *__restrict__ att,
                                            int Tq, int H, int Tk, float p, float scale, unsigned long long key) {
    const int lane = threadIdx.x % 32, i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (i >= Tq) return;
    const size_t base = (((size_t)blockIdx.z * H + blockIdx.y) * Tq + i) * Tk;
    const bool dropping = p != 0.0f;
    float P[NC][SM_VEC], g[NC][SM_VEC];
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int j0 = (lane + 32 * c) * SM_VEC;
        if (j0 < Tk) {
            load_vec<T, SM_VEC>(P[c], att + base + j0);
            load_vec<T, SM_VEC>(g[c], dp + base + j0);
            if (dropping) {
                const unsigned long long ctr = (base + j0 + 1) * DROPOUT_RNG_GAMMA;
                float D[SM_VEC];
#pragma unroll
                for (int e = 0; e < SM_VEC; e++) {
                    const float u = (float)(dropout_rng_mix64(key + ctr + e * DROPOUT_RNG_GAMMA) >> 40) * 0x1.0p-24f;
                    const bool keep = u >= p;
                    g[c][e] = keep ? g[c][e] * scale : 0.0f;
                    D[e] = keep ? P[c][e] * scale : 0.0f;
                }
                if (pd) store_vec<T, SM_VEC>(pd + base + j0, D);
            }
#pragma unroll
            for (int e = 0; e < SM_VEC; e++) dot += P[c][e] * g[c][e];
        } else {
#pragma unroll
            for (int e = 0; e < SM_VEC; e++) P[c][e] = g[c][e] = 0.0f;
        }
    }
    dot = warp_sum(dot);
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int j0 = (lane + 32 * c) * SM_VEC;
        if (j0 >= Tk) continue;
        float d[SM_VEC];
#pragma unroll
        for (int e = 0; e < SM_VEC; e++) d[e] = P[c][e] * (g[c][e] - dot);
        store_vec<T, SM_VEC>(dp + base + j0, d);
    }
}

// dbias (n = H*Tq*Tk) += sum over b of ds (B,n): fp32 sum in b order, then one rounding.
template <typename T>
__global__ void dbias_reduce_kernel(T *__restrict__ dbias, const T *__restrict__ ds, int B, size_t n) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
#pragma unroll 8
        for (int b = 0; b < B; b++) s += to_float(ds[(size_t)b * n + e]);
        dbias[e] = from_float<T>(to_float(dbias[e]) + s);
    }
}

}  // namespace attn

// ---- host side -------------------------------------------------------------------------------
static size_t att_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

// The scratch buffer, grown to the largest request so far.
static char *att_scratch_reserve(size_t bytes) {
    return (char *)cuda_scratch_reserve(CUDA_SCRATCH_ATTENTION, bytes);
}

static unsigned addr_align(const void *p) {
    uintptr_t a = (uintptr_t)p | 16u;
    return (unsigned)(a & (~a + 1));
}

static dim3 heads_grid(int BH, int units_per_bh, int threads) {
    int gx = (units_per_bh + threads - 1) / threads;
    if (gx > 1024) gx = 1024;
    return dim3((unsigned)gx, (unsigned)(BH < 65535 ? BH : 65535));
}

// dst (B,H,T,dk) = src (B,rows,H*dk), es bytes per element.
static void heads_split(void *dst, const void *src, int B, int H, int T, int rows, int dk, size_t es) {
    const size_t row_bytes = (size_t)dk * es;
    const unsigned al = addr_align(dst) < addr_align(src) ? addr_align(dst) : addr_align(src);
    const int BH = B * H, threads = 256;
#define ATT_SPLIT(U)                                                                                      \
    do {                                                                                                  \
        int r = (int)(row_bytes / sizeof(U));                                                             \
        attn::heads_split_kernel<U><<<heads_grid(BH, T * r, threads), threads, 0, t5_stream()>>>(      \
            (U *)dst, (const U *)src, BH, H, T, rows, r);                                                 \
    } while (0)
    if (row_bytes % 16 == 0 && al >= 16) ATT_SPLIT(uint4);
    else if (row_bytes % 8 == 0 && al >= 8) ATT_SPLIT(uint2);
    else if (row_bytes % 4 == 0 && al >= 4) ATT_SPLIT(unsigned int);
    else ATT_SPLIT(unsigned short);
#undef ATT_SPLIT
    cudaLaunchCheck();
}

// dst (B,T,H*dk) = src (B,H,T,dk).
static void heads_merge(void *dst, const void *src, int B, int H, int T, int dk, size_t es) {
    const size_t row_bytes = (size_t)dk * es;
    const unsigned al = addr_align(dst) < addr_align(src) ? addr_align(dst) : addr_align(src);
    const int BH = B * H, threads = 256;
#define ATT_MERGE(U)                                                                                      \
    do {                                                                                                  \
        int r = (int)(row_bytes / sizeof(U));                                                             \
        attn::heads_merge_kernel<U><<<heads_grid(BH, T * r, threads), threads, 0, t5_stream()>>>(      \
            (U *)dst, (const U *)src, BH, H, T, r);                                                       \
    } while (0)
    if (row_bytes % 16 == 0 && al >= 16) ATT_MERGE(uint4);
    else if (row_bytes % 8 == 0 && al >= 8) ATT_MERGE(uint2);
    else if (row_bytes % 4 == 0 && al >= 4) ATT_MERGE(unsigned int);
    else ATT_MERGE(unsigned short);
#undef ATT_MERGE
    cudaLaunchCheck();
}

// dst (B,T,H*dk) += src (B,H,T,dk).
template <typename T>
static void heads_merge_add(T *dst, const T *src, int B, int H, int Tn, int dk) {
    const unsigned al = addr_align(dst) < addr_align(src) ? addr_align(dst) : addr_align(src);
    const int BH = B * H, threads = 256;
    constexpr int V16 = (int)(16 / sizeof(T));  // elements in 16 bytes
#define ATT_MERGE_ADD(V)                                                                                   \
    attn::heads_merge_add_kernel<T, V><<<heads_grid(BH, Tn * (dk / (V)), threads), threads, 0, t5_stream()>>>( \
        dst, src, BH, H, Tn, dk)
    if (dk % V16 == 0 && al >= 16) ATT_MERGE_ADD(V16);
    else if (dk % 2 == 0 && al >= 2 * sizeof(T)) ATT_MERGE_ADD(2);
    else ATT_MERGE_ADD(1);
#undef ATT_MERGE_ADD
    cudaLaunchCheck();
}

enum { SOFTMAX_WARPS = 8 };

// The vectorized kernels need Tk a multiple of 4 (<= 1024), 4-element-aligned rows and
// B, H within the grid's y/z limits; anything else takes the scalar kernels.
static bool softmax_vec_ok(int Tk, int B, int H, size_t es, const void *p0, const void *p1, const void *p2) {
    const uintptr_t a = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2;
    return Tk % attn::SM_VEC == 0 && Tk <= 32 * 8 * attn::SM_VEC && (a % (attn::SM_VEC * es)) == 0 && B <= 65535 &&
           H <= 65535;
}

template <typename T>
static void softmax_forward(T *att, T *pd, const T *bias, int B, const attn::SoftmaxArgs &a) {
    cudaStream_t s = t5_stream();
    const dim3 block(32 * SOFTMAX_WARPS);
    if (softmax_vec_ok(a.Tk, B, a.H, sizeof(T), att, pd, bias)) {
        const dim3 grid((unsigned)((a.Tq + SOFTMAX_WARPS - 1) / SOFTMAX_WARPS), (unsigned)a.H, (unsigned)B);
        const int chunks = (a.Tk + 32 * attn::SM_VEC - 1) / (32 * attn::SM_VEC);
        if (chunks <= 1) attn::softmax_forward_vec_kernel<T, 1><<<grid, block, 0, s>>>(att, pd, bias, a);
        else if (chunks <= 2) attn::softmax_forward_vec_kernel<T, 2><<<grid, block, 0, s>>>(att, pd, bias, a);
        else if (chunks <= 4) attn::softmax_forward_vec_kernel<T, 4><<<grid, block, 0, s>>>(att, pd, bias, a);
        else attn::softmax_forward_vec_kernel<T, 8><<<grid, block, 0, s>>>(att, pd, bias, a);
        cudaLaunchCheck();
        return;
    }
    const dim3 grid((unsigned)((a.rows + SOFTMAX_WARPS - 1) / SOFTMAX_WARPS));
    if (a.Tk <= 32) attn::softmax_forward_kernel<T, 1><<<grid, block, 0, s>>>(att, pd, bias, a);
    else if (a.Tk <= 64) attn::softmax_forward_kernel<T, 2><<<grid, block, 0, s>>>(att, pd, bias, a);
    else if (a.Tk <= 128) attn::softmax_forward_kernel<T, 4><<<grid, block, 0, s>>>(att, pd, bias, a);
    else if (a.Tk <= 256) attn::softmax_forward_kernel<T, 8><<<grid, block, 0, s>>>(att, pd, bias, a);
    else if (a.Tk <= 512) attn::softmax_forward_kernel<T, 16><<<grid, block, 0, s>>>(att, pd, bias, a);
    else if (a.Tk <= 1024) attn::softmax_forward_kernel<T, 32><<<grid, block, 0, s>>>(att, pd, bias, a);
    else attn::softmax_forward_kernel<T, 0><<<grid, block, 0, s>>>(att, pd, bias, a);
    cudaLaunchCheck();
}

template <typename T>
static void softmax_backward(T *dp, T *pd, const T *att, int B, int H, int Tq, int Tk, DropoutArgs drop,
                             float scale) {
    cudaStream_t s = t5_stream();
    const dim3 block(32 * SOFTMAX_WARPS);
    const unsigned long long key = attn::dropout_key(drop.seed);
    if (softmax_vec_ok(Tk, B, H, sizeof(T), dp, pd, att)) {
        const dim3 grid((unsigned)((Tq + SOFTMAX_WARPS - 1) / SOFTMAX_WARPS), (unsigned)H, (unsigned)B);
        const int chunks = (Tk + 32 * attn::SM_VEC - 1) / (32 * attn::SM_VEC);
#define ATT_SMBV(N) \
    attn::softmax_backward_vec_kernel<T, N><<<grid, block, 0, s>>>(dp, pd, att, Tq, H, Tk, drop.p, scale, key)
        if (chunks <= 1) ATT_SMBV(1);
        else if (chunks <= 2) ATT_SMBV(2);
        else if (chunks <= 4) ATT_SMBV(4);
        else ATT_SMBV(8);
#undef ATT_SMBV
        cudaLaunchCheck();
        return;
    }
    const int rows = B * H * Tq;
    const dim3 grid((unsigned)((rows + SOFTMAX_WARPS - 1) / SOFTMAX_WARPS));
#define ATT_SMB(N) attn::softmax_backward_kernel<T, N><<<grid, block, 0, s>>>(dp, pd, att, rows, Tk, drop.p, scale, key)
    if (Tk <= 32) ATT_SMB(1);
    else if (Tk <= 64) ATT_SMB(2);
    else if (Tk <= 128) ATT_SMB(4);
    else if (Tk <= 256) ATT_SMB(8);
    else if (Tk <= 512) ATT_SMB(16);
    else if (Tk <= 1024) ATT_SMB(32);
    else ATT_SMB(0);
#undef ATT_SMB
    cudaLaunchCheck();
}

static void attention_check_dropout(DropoutArgs drop) {
    if (!(drop.p >= 0.0f && drop.p <= 1.0f)) t5_fail("attention dropout probability %g is outside [0, 1]", drop.p);
}

template <typename T>
static void attention_forward_t(Dtype dt, T *out, T *att, const T *q, const T *k, const T *v, const T *bias,
                                const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk, int causal,
                                int q_offset, DropoutArgs drop) {
    const size_t es = sizeof(T);
    const int BH = B * H;
    const size_t q_el = (size_t)BH * Tq * dk, k_el = (size_t)BH * Tk * dk, att_el = (size_t)BH * Tq * Tk;
    const int dropping = drop.p != 0.0f;
    const size_t off_k = att_align(q_el * es), off_v = off_k + att_align(k_el * es), off_o = off_v + att_align(k_el * es),
                 off_pd = off_o + att_align(q_el * es), total = off_pd + (dropping ? att_align(att_el * es) : 0);
    char *base = att_scratch_reserve(total);
    T *qp = (T *)base, *kp = (T *)(base + off_k), *vp = (T *)(base + off_v), *op = (T *)(base + off_o);
    T *pd = dropping ? (T *)(base + off_pd) : nullptr;

    heads_split(qp, q, B, H, Tq, Tq, dk, es);
    heads_split(kp, k, B, H, Tk, kv_rows, dk, es);
    heads_split(vp, v, B, H, Tk, kv_rows, dk, es);
    // scores S (Tq,Tk) = Qp Kp^T into att
    cuda_gemm_strided(dt, 1, 0, Tk, Tq, dk, kp, dk, (long long)Tk * dk, qp, dk, (long long)Tq * dk, att, Tk,
                      (long long)Tq * Tk, BH, 0);
    attn::SoftmaxArgs a;
    a.key_mask = key_mask;
    a.rows = BH * Tq;
    a.H = H;
    a.Tq = Tq;
    a.Tk = Tk;
    a.kv_rows = kv_rows;
    a.causal = causal;
    a.q_offset = q_offset;
    a.p = drop.p;
    a.scale = dropping ? dropout_rng_scale(drop.p) : 1.0f;
    a.key = attn::dropout_key(drop.seed);
    softmax_forward<T>(att, pd, bias, B, a);
    // O (Tq,dk) = Pd Vp
    cuda_gemm_strided(dt, 0, 0, dk, Tq, Tk, vp, dk, (long long)Tk * dk, dropping ? pd : att, Tk, (long long)Tq * Tk,
                      op, dk, (long long)Tq * dk, BH, 0);
    heads_merge(out, op, B, H, Tq, dk, es);
}

template <typename T>
static void attention_backward_t(Dtype dt, T *dq, T *dk_, T *dv, T *dbias, const T *dout, const T *att, const T *q,
                                 const T *k, const T *v, int B, int Tq, int Tk, int H, int dk, DropoutArgs drop,
                                 int dqkv_set) {
    const size_t es = sizeof(T);
    const int BH = B * H;
    const size_t q_el = (size_t)BH * Tq * dk, k_el = (size_t)BH * Tk * dk, att_el = (size_t)BH * Tq * Tk;
    const int dropping = drop.p != 0.0f;
    // slots: Qp, Kp, Vp (then dVp), dOp, dQp, dKp, dP (then dS), Pd
    const size_t off_k = att_align(q_el * es), off_v = off_k + att_align(k_el * es),
                 off_do = off_v + att_align(k_el * es), off_dq = off_do + att_align(q_el * es),
                 off_dk = off_dq + att_align(q_el * es), off_dp = off_dk + att_align(k_el * es),
                 off_pd = off_dp + att_align(att_el * es),
                 total = off_pd + (dropping ? att_align(att_el * es) : 0);
    char *base = att_scratch_reserve(total);
    T *qp = (T *)base, *kp = (T *)(base + off_k), *vp = (T *)(base + off_v), *dop = (T *)(base + off_do);
    T *dqp = (T *)(base + off_dq), *dkp = (T *)(base + off_dk), *dp = (T *)(base + off_dp);
    T *pd = dropping ? (T *)(base + off_pd) : nullptr;
    const long long sq = (long long)Tq * dk, sk = (long long)Tk * dk, satt = (long long)Tq * Tk;

    heads_split(qp, q, B, H, Tq, Tq, dk, es);
    heads_split(kp, k, B, H, Tk, Tk, dk, es);
    heads_split(vp, v, B, H, Tk, Tk, dk, es);
    heads_split(dop, dout, B, H, Tq, Tq, dk, es);
    // dPd (Tq,Tk) = dO Vp^T
    cuda_gemm_strided(dt, 1, 0, Tk, Tq, dk, vp, dk, sk, dop, dk, sq, dp, Tk, satt, BH, 0);
    // dS in place; Pd regenerated for dV
    softmax_backward<T>(dp, pd, att, B, H, Tq, Tk, drop, dropping ? dropout_rng_scale(drop.p) : 1.0f);
    // dV (Tk,dk) = Pd^T dO, into the Vp slot (Vp is no longer needed)
    T *dvp = vp;
    if (dv) cuda_gemm_strided(dt, 0, 1, dk, Tk, Tq, dop, dk, sq, dropping ? pd : att, Tk, satt, dvp, dk, sk, BH, 0);
    // dQ (Tq,dk) = dS Kp;  dK (Tk,dk) = dS^T Qp
    if (dq) cuda_gemm_strided(dt, 0, 0, dk, Tq, Tk, kp, dk, sk, dp, Tk, satt, dqp, dk, sq, BH, 0);
    if (dk_) cuda_gemm_strided(dt, 0, 1, dk, Tk, Tq, qp, dk, sq, dp, Tk, satt, dkp, dk, sk, BH, 0);
    if (dbias) {
        const size_t n = (size_t)H * Tq * Tk;
        const int threads = 256;
        size_t blocks = (n + threads - 1) / threads;
        if (blocks > 65535) blocks = 65535;
        attn::dbias_reduce_kernel<T><<<(unsigned)blocks, threads, 0, t5_stream()>>>(dbias, dp, B, n);
        cudaLaunchCheck();
    }
    if (dqkv_set) {  // = 0 + sum: the merge alone (no read of the old contents)
        if (dq) heads_merge(dq, dqp, B, H, Tq, dk, es);
        if (dk_) heads_merge(dk_, dkp, B, H, Tk, dk, es);
        if (dv) heads_merge(dv, dvp, B, H, Tk, dk, es);
        return;
    }
    if (dq) heads_merge_add<T>(dq, dqp, B, H, Tq, dk);
    if (dk_) heads_merge_add<T>(dk_, dkp, B, H, Tk, dk);
    if (dv) heads_merge_add<T>(dv, dvp, B, H, Tk, dk);
}

static void attention_check_shape(const char *op, int B, int Tq, int Tk, int kv_rows, int H, int dk) {
    if (B < 0 || Tq < 0 || Tk < 0 || H < 0 || dk < 0 || kv_rows < Tk)
        t5_fail("%s: bad shape B=%d Tq=%d Tk=%d kv_rows=%d H=%d d_kv=%d (need non-negative sizes, kv_rows >= Tk)", op,
                B, Tq, Tk, kv_rows, H, dk);
    if ((long long)B * H * Tq > 0x7fffffffLL || (long long)Tq * Tk > 0x7fffffffLL || (long long)B * H > 0x7fffffffLL)
        t5_fail("%s: shape B=%d H=%d Tq=%d Tk=%d is too large for 32-bit row indices", op, B, H, Tq, Tk);
}

extern "C" void cuda_attention_forward(Dtype dt, void *out, void *att, const void *q, const void *k, const void *v,
                                       const void *bias, const int *key_mask, int B, int Tq, int Tk, int kv_rows,
                                       int H, int d_kv, int causal, int q_offset, DropoutArgs drop) {
    attention_check_shape("cuda_attention_forward", B, Tq, Tk, kv_rows, H, d_kv);
    attention_check_dropout(drop);
    if (B == 0 || Tq == 0 || H == 0 || d_kv == 0) return;
    const size_t es = dt == DTYPE_F32 ? 4 : 2;
    if (Tk == 0) {  // no keys: every row is fully masked
        cudaCheck(cudaMemsetAsync(out, 0, (size_t)B * Tq * H * d_kv * es, t5_stream()));
        return;
    }
    switch (dt) {
        case DTYPE_F32:
            attention_forward_t<float>(dt, (float *)out, (float *)att, (const float *)q, (const float *)k,
                                       (const float *)v, (const float *)bias, key_mask, B, Tq, Tk, kv_rows, H, d_kv,
                                       causal, q_offset, drop);
            break;
        case DTYPE_BF16:
            attention_forward_t<__nv_bfloat16>(dt, (__nv_bfloat16 *)out, (__nv_bfloat16 *)att,
                                               (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k,
                                               (const __nv_bfloat16 *)v, (const __nv_bfloat16 *)bias, key_mask, B, Tq,
                                               Tk, kv_rows, H, d_kv, causal, q_offset, drop);
            break;
        case DTYPE_F16:
            attention_forward_t<__half>(dt, (__half *)out, (__half *)att, (const __half *)q, (const __half *)k,
                                        (const __half *)v, (const __half *)bias, key_mask, B, Tq, Tk, kv_rows, H,
                                        d_kv, causal, q_offset, drop);
            break;
        default: dtype_unknown(dt, __func__);
    }
}

extern "C" void cuda_attention_backward(Dtype dt, void *dq, void *dk, void *dv, void *dbias, const void *dout,
                                        const void *att, const void *q, const void *k, const void *v, int B, int Tq,
                                        int Tk, int H, int d_kv, DropoutArgs drop, int dqkv_set) {
    attention_check_shape("cuda_attention_backward", B, Tq, Tk, Tk, H, d_kv);
    attention_check_dropout(drop);
    if (B == 0 || Tq == 0 || Tk == 0 || H == 0 || d_kv == 0) return;
    switch (dt) {
        case DTYPE_F32:
            attention_backward_t<float>(dt, (float *)dq, (float *)dk, (float *)dv, (float *)dbias, (const float *)dout,
                                        (const float *)att, (const float *)q, (const float *)k, (const float *)v, B,
                                        Tq, Tk, H, d_kv, drop, dqkv_set);
            break;
        case DTYPE_BF16:
            attention_backward_t<__nv_bfloat16>(
                dt, (__nv_bfloat16 *)dq, (__nv_bfloat16 *)dk, (__nv_bfloat16 *)dv, (__nv_bfloat16 *)dbias,
                (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)att, (const __nv_bfloat16 *)q,
                (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, B, Tq, Tk, H, d_kv, drop, dqkv_set);
            break;
        case DTYPE_F16:
            attention_backward_t<__half>(dt, (__half *)dq, (__half *)dk, (__half *)dv, (__half *)dbias,
                                         (const __half *)dout, (const __half *)att, (const __half *)q,
                                         (const __half *)k, (const __half *)v, B, Tq, Tk, H, d_kv, drop, dqkv_set);
            break;
        default: dtype_unknown(dt, __func__);
    }
}
