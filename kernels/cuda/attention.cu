// kernels/cuda/attention.cu: T5 attention core (after the q/k/v projections) on batched
// cuBLASLt GEMMs over the B*H heads (gemm.cuh's cuda_gemm_heads, reading and writing the
// heads where they sit inside the rows of q, k, v, out: no permutes) plus kernels of our
// own: a row softmax and its backward, and the position-bias gradient's sum over b.
// Semantics are kernels/backend.h's and the CPU reference's (kernels/cpu/attention.c):
// no 1/sqrt(dk) scaling, bias (H,Tq,Tk) shared by the batch, key_mask (B,kv_rows),
// causal masks key j > q_offset + i, masked keys get probability exactly 0, a row with
// every key masked gets att = 0 and out = 0, att holds the probabilities before dropout.
//
// Shapes (letters as backend.h; head (b,h) of a row-major tensor X (B,T,H*dk) is the
// (T,dk) matrix at X + b*T*H*dk + h*dk with row stride H*dk):
//   q (B,Tq,H*dk), k and v (B,kv_rows,H*dk) (first Tk rows), out (B,Tq,H*dk)
//   att (B,H,Tq,Tk); scratch Pd (B,H,Tq,Tk) with dropout, dP (B,H,Tq,Tk) in backward
// Row-major products per head and their column-major cuBLASLt form (m,n,k; A op, B op):
//   S  = Q K^T   (Tq,Tk) -> m=Tk n=Tq k=dk; A=K T, B=Q N         (into att, then softmax in place)
//   O  = Pd V    (Tq,dk) -> m=dk n=Tq k=Tk; A=V N, B=Pd N        (into out)
//   dPd = dO V^T (Tq,Tk) -> m=Tk n=Tq k=dk; A=V T, B=dO N
//   dV = Pd^T dO (Tk,dk) -> m=dk n=Tk k=Tq; A=dO N, B=Pd T       (into / added to dv)
//   dQ = dS K    (Tq,dk) -> m=dk n=Tq k=Tk; A=K N, B=dS N        (into / added to dq)
//   dK = dS^T Q  (Tk,dk) -> m=dk n=Tk k=Tq; A=Q N, B=dS T        (into / added to dk)
// Adding into a gradient is the GEMM's beta = 1 (fp32 sum of the old value and the
// product, one rounding).
// Dropout: the softmax kernel also writes the dropped probabilities Pd = round(round(P) *
// mask * 1/(1-p)) into scratch (mask from kernels/dropout_rng.h, element index = the
// flattened (b,h,i,j)), and O = Pd V is a plain GEMM. Backward regenerates the same Pd
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
// Measured on an H200 before the permutes went (bf16, B=64 H=16 T=128 dk=64, bias + mask
// + dropout 0.1): forward 0.147 ms, backward 0.233 ms; the two softmax kernels ~58 + 40 us
// (the dropout RNG's 64-bit multiplies make them compute-bound), the six GEMMs ~18 us
// each, dbias ~15 us, and eleven head permutes ~10-13 us each, which the pointer-array
// GEMMs replaced (docs/CUDA.md has the figures after).
//
// Scratch: one device buffer grown by cuda_alloc when a call needs more than the last
// (never per call), reused by every call on the stream. No host synchronization.
#include <math.h>

#include "../dropout_rng.h"
#include "attention_flash.cuh"
#include "attention_fused.cuh"
#include "gemm.cuh"

namespace attn {

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

// kernels/dropout_rng.h's mask: the per-seed key is computed once on the host; one hash
// serves 4 neighbouring keys (the vectorized kernels hold exactly such a group).
static inline unsigned long long dropout_key(uint64_t seed) { return dropout_rng_key(seed); }
__device__ __forceinline__ bool dropout_keep(unsigned long long key, uint64_t index, float p) {
    return dropout_rng_uniform_keyed(key, index) >= p;
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
            s[t] = expf((live >> t) & 1u ? s[t] - mx : -INFINITY);  // no branch around expf (attention_flash.cu)
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
// index needs a division; a chunk's 4 dropout draws are one hash (one RNG group). (The scalar kernels spent ~130 instructions per element, which made them
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
            s[c][e] = expf((live >> (c * SM_VEC + e)) & 1u ? s[c][e] - mx : -INFINITY);  // no branch around expf
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
            const uint64_t bits = dropout_rng_bits(a.key, (base + j0) / SM_VEC);  // base + j0 is a multiple of 4
            float D[SM_VEC];
#pragma unroll
            for (int e = 0; e < SM_VEC; e++) D[e] = dropout_rng_lane(bits, e) >= a.p ? P[e] * a.scale : 0.0f;
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
                const uint64_t bits = dropout_rng_bits(key, (base + j0) / SM_VEC);
                float D[SM_VEC];
#pragma unroll
                for (int e = 0; e < SM_VEC; e++) {
                    const bool keep = dropout_rng_lane(bits, e) >= p;
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

// Head (b,h) of a row-major (B,rows,H*dk) tensor; of a (B,H,Tq,Tk) one.
// rows ld elements apart: H*dk, or more for a gradient interleaved with others (backend.h)
static GemmHeads heads_in_rows_ld(const void *p, int rows, int ld, int dk) {
    return GemmHeads{p, ld, (long long)rows * ld, (long long)dk};
}
static GemmHeads heads_in_rows(const void *p, int rows, int H, int dk) { return heads_in_rows_ld(p, rows, H * dk, dk); }
static GemmHeads heads_of_scores(const void *p, int H, int Tq, int Tk) {
    return GemmHeads{p, Tk, (long long)H * Tq * Tk, (long long)Tq * Tk};
}

template <typename T>
static void attention_forward_t(Dtype dt, T *out, T *att, const T *q, const T *k, const T *v, const T *bias,
                                const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk, int causal,
                                int q_offset, DropoutArgs drop) {
    const size_t att_el = (size_t)B * H * Tq * Tk;
    const int dropping = drop.p != 0.0f;
    T *pd = dropping ? (T *)att_scratch_reserve(att_align(att_el * sizeof(T))) : nullptr;
    const GemmHeads Qh = heads_in_rows(q, Tq, H, dk), Kh = heads_in_rows(k, kv_rows, H, dk),
                    Vh = heads_in_rows(v, kv_rows, H, dk), Oh = heads_in_rows(out, Tq, H, dk),
                    Sh = heads_of_scores(att, H, Tq, Tk), Pdh = heads_of_scores(dropping ? pd : att, H, Tq, Tk);
    // scores S (Tq,Tk) = Q K^T into att
    cuda_gemm_heads(dt, 1, 0, Tk, Tq, dk, Kh, Qh, Sh, B, H, 0);
    attn::SoftmaxArgs a;
    a.key_mask = key_mask;
    a.rows = B * H * Tq;
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
    // O (Tq,dk) = Pd V, into out
    cuda_gemm_heads(dt, 0, 0, dk, Tq, Tk, Vh, Pdh, Oh, B, H, 0);
}

// dbias (H,Tq,Tk) += sum over b of dS (B,H,Tq,Tk)
template <typename T> static void attention_dbias(T *dbias, const T *ds, int B, int H, int Tq, int Tk) {
    const size_t n = (size_t)H * Tq * Tk;
    const int threads = 256;
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    attn::dbias_reduce_kernel<T><<<(unsigned)blocks, threads, 0, t5_stream()>>>(dbias, ds, B, n);
    cudaLaunchCheck();
}

template <typename T>
static void attention_backward_t(Dtype dt, T *dq, T *dk_, T *dv, T *dbias, const T *dout, const T *att, const T *q,
                                 const T *k, const T *v, int B, int Tq, int Tk, int H, int dk, DropoutArgs drop,
                                 int dqkv_set, int ldq, int ldkv) {
    const size_t att_el = (size_t)B * H * Tq * Tk;
    const int dropping = drop.p != 0.0f, add = !dqkv_set;
    // slots: dP (then dS), Pd
    const size_t off_pd = att_align(att_el * sizeof(T)), total = off_pd + (dropping ? off_pd : 0);
    {  // attention_flash_backward.cu where it applies: scratch only for dS, when dbias is wanted
        T *ds = dbias ? (T *)att_scratch_reserve(off_pd) : nullptr;
        if (attention_flash_backward(dt, dq, dk_, dv, ds, dout, att, q, k, v, B, Tq, Tk, H, dk, drop, dqkv_set, ldq,
                                     ldkv)) {
            if (dbias) attention_dbias(dbias, ds, B, H, Tq, Tk);
            return;
        }
    }
    char *base = att_scratch_reserve(total);
    T *dp = (T *)base, *pd = dropping ? (T *)(base + off_pd) : nullptr;
    const int dense = ldq == H * dk && ldkv == H * dk;  // attention_fused.cu writes dense gradients only
    if (dense && attention_fused_backward(dt, dq, dk_, dv, dbias ? dp : nullptr, dout, att, q, k, v, B, Tq, Tk, H, dk,
                                          drop, dqkv_set)) {
        if (dbias) attention_dbias(dbias, dp, B, H, Tq, Tk);
        return;
    }
    const GemmHeads Qh = heads_in_rows(q, Tq, H, dk), Kh = heads_in_rows(k, Tk, H, dk),
                    Vh = heads_in_rows(v, Tk, H, dk), dOh = heads_in_rows(dout, Tq, H, dk),
                    dPh = heads_of_scores(dp, H, Tq, Tk), Pdh = heads_of_scores(dropping ? pd : att, H, Tq, Tk);
    // dPd (Tq,Tk) = dO V^T
    cuda_gemm_heads(dt, 1, 0, Tk, Tq, dk, Vh, dOh, dPh, B, H, 0);
    // dS in place; Pd regenerated for dV
    softmax_backward<T>(dp, pd, att, B, H, Tq, Tk, drop, dropping ? dropout_rng_scale(drop.p) : 1.0f);
    // dV (Tk,dk) = Pd^T dO;  dQ (Tq,dk) = dS K;  dK (Tk,dk) = dS^T Q
    if (dv) cuda_gemm_heads(dt, 0, 1, dk, Tk, Tq, dOh, Pdh, heads_in_rows_ld(dv, Tk, ldkv, dk), B, H, add);
    if (dq) cuda_gemm_heads(dt, 0, 0, dk, Tq, Tk, Kh, dPh, heads_in_rows_ld(dq, Tq, ldq, dk), B, H, add);
    if (dk_) cuda_gemm_heads(dt, 0, 1, dk, Tk, Tq, Qh, dPh, heads_in_rows_ld(dk_, Tk, ldkv, dk), B, H, add);
    if (dbias) attention_dbias(dbias, dp, B, H, Tq, Tk);
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
    if (attention_fused_forward(dt, out, att, q, k, v, bias, key_mask, B, Tq, Tk, kv_rows, H, d_kv, causal, q_offset,
                                drop))
        return;
    if (attention_flash_forward(dt, out, att, q, k, v, bias, key_mask, B, Tq, Tk, kv_rows, H, d_kv, causal, q_offset,
                                drop))
        return;
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
                                        int Tk, int H, int d_kv, DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv) {
    attention_check_shape("cuda_attention_backward", B, Tq, Tk, Tk, H, d_kv);
    attention_check_dropout(drop);
    if (B == 0 || Tq == 0 || Tk == 0 || H == 0 || d_kv == 0) return;
    const int ldq = ld_dq ? ld_dq : H * d_kv, ldkv = ld_dkv ? ld_dkv : H * d_kv;
    if (ldq < H * d_kv || ldkv < H * d_kv)
        t5_fail("cuda_attention_backward: gradient row strides %d, %d below H*d_kv = %d", ldq, ldkv, H * d_kv);
    switch (dt) {
        case DTYPE_F32:
            attention_backward_t<float>(dt, (float *)dq, (float *)dk, (float *)dv, (float *)dbias, (const float *)dout,
                                        (const float *)att, (const float *)q, (const float *)k, (const float *)v, B,
                                        Tq, Tk, H, d_kv, drop, dqkv_set, ldq, ldkv);
            break;
        case DTYPE_BF16:
            attention_backward_t<__nv_bfloat16>(
                dt, (__nv_bfloat16 *)dq, (__nv_bfloat16 *)dk, (__nv_bfloat16 *)dv, (__nv_bfloat16 *)dbias,
                (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)att, (const __nv_bfloat16 *)q,
                (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, B, Tq, Tk, H, d_kv, drop, dqkv_set, ldq, ldkv);
            break;
        case DTYPE_F16:
            attention_backward_t<__half>(dt, (__half *)dq, (__half *)dk, (__half *)dv, (__half *)dbias,
                                         (const __half *)dout, (const __half *)att, (const __half *)q,
                                         (const __half *)k, (const __half *)v, B, Tq, Tk, H, d_kv, drop, dqkv_set, ldq, ldkv);
            break;
        default: dtype_unknown(dt, __func__);
    }
}
