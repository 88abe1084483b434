// kernels/cuda/optimizer.cu: optimizer building blocks on fp32 state
// (kernels/cpu/optimizer.c is the reference).
//   sumsq         sum of g^2 as double, deterministic in two passes: a fixed grid (from n
//                 alone) of blocks, each thread summing 16-byte packs (fp32 within a pack,
//                 double across packs), a double block sum per block; then one block sums
//                 the block sums in order. One copy to the host.
//   sumsq_many    the same for many ranges of one buffer in two launches (grid y = range)
//                 and one copy back: each range's sum is bitwise sumsq's (the same grid per
//                 range, from its n and alignment alone, the same per-thread order, the same
//                 block and final sums). clip_grad_norm_'s per-parameter norms
//                 (tensor_norms: 500 tensors of t5-large) in one pass instead of 500 pairs of
//                 launches, each waited for.
//   adamw_update  torch.optim.AdamW step with the CPU's host-side scalar precomputation in
//                 double and the same fp32 operations per element, written with _rn
//                 intrinsics so that nothing is contracted into a multiply-add: master, m
//                 and v are bitwise those of the CPU reference (sqrtf and / are IEEE in
//                 both). param_out (when not NULL) receives T(master).
#include <math.h>

#include "common.cuh"

#define SUMSQ_THREADS 256
#define SUMSQ_MAX_BLOCKS 1024
// AdamW's elements a thread: 4 (one 16-byte fp32 access of master, m and v each), a block for
// every 256 packs. H200, t5-large's 737.7M parameters: 4.92 ms (4.20 TB/s of the 28 bytes a
// parameter moves) against 6.32 ms with the 16-byte bf16 pack of 8 and the capped grid-stride
// grid (two fp32 accesses each: more registers, fewer threads in flight)
#define ADAMW_PACK 4

// One block's part of sum(g^2) over n elements, the grid being G blocks (threads stride
// G * blockDim.x), V elements per 16-byte pack. Every thread of the block must call it.
template <typename T, int V>
__device__ __forceinline__ double sumsq_block_part(const T *g, size_t n, int G) {
    const size_t stride = (size_t)G * blockDim.x;
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t nv = n / V;
    double acc = 0.0;
    for (size_t p = t; p < nv; p += stride) {
        float f[V];
        load_vec<T, V>(f, g + p * V);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < V; k++) s += f[k] * f[k];
        acc += (double)s;
    }
    for (size_t i = nv * V + t; i < n; i += stride) {
        const float f = to_float(g[i]);
        acc += (double)(f * f);
    }
    return block_sum(acc);
}

template <typename T, int V>
__global__ void __launch_bounds__(SUMSQ_THREADS) sumsq_partial_kernel(double *partial, const T *g, size_t n) {
    const double acc = sumsq_block_part<T, V>(g, n, gridDim.x);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// The grid of sumsq over n elements of 16-byte packs of V: blocks of SUMSQ_THREADS, at most
// SUMSQ_MAX_BLOCKS (a function of n and V only).
__host__ __device__ static inline int sumsq_grid(size_t n, int V) {
    const size_t blocks = (n / V + (n % V != 0) + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    return (int)(blocks < SUMSQ_MAX_BLOCKS ? blocks : SUMSQ_MAX_BLOCKS);
}

// Range r = blockIdx.y of g: (offset, count) in ranges[2r], ranges[2r+1]; partial sums in
// partial[r * SUMSQ_MAX_BLOCKS + block].
template <typename T, int P>
__global__ void __launch_bounds__(SUMSQ_THREADS)
    sumsq_many_partial_kernel(double *partial, const T *g, const unsigned long long *ranges) {
    const int r = blockIdx.y;
    const T *x = g + ranges[2 * r];
    const size_t n = ranges[2 * r + 1];
    const bool packs = ((uintptr_t)x & 15u) == 0;
    const int G = sumsq_grid(n, packs ? P : 1);
    if ((int)blockIdx.x >= G) return;  // the whole block: block_sum's barriers stay uniform
    const double acc = packs ? sumsq_block_part<T, P>(x, n, G) : sumsq_block_part<T, 1>(x, n, G);
    if (threadIdx.x == 0) partial[(size_t)r * SUMSQ_MAX_BLOCKS + blockIdx.x] = acc;
}

__device__ __forceinline__ double sumsq_final_part(const double *partial, int G) {
    double s = 0.0;
    for (int i = threadIdx.x; i < G; i += blockDim.x) s += partial[i];
    return block_sum(s);
}

__global__ void sumsq_final_kernel(double *out, const double *partial, int G) {
    const double s = sumsq_final_part(partial, G);
    if (threadIdx.x == 0) *out = s;
}

// One block per range: out[r] = the sum of its partial sums, in order.
template <typename T, int P>
__global__ void sumsq_many_final_kernel(double *out, const double *partial, const T *g,
                                        const unsigned long long *ranges) {
    const int r = blockIdx.x;
    const bool packs = (((uintptr_t)(g + ranges[2 * r])) & 15u) == 0;
    const double s = sumsq_final_part(partial + (size_t)r * SUMSQ_MAX_BLOCKS, sumsq_grid(ranges[2 * r + 1], packs ? P : 1));
    if (threadIdx.x == 0) out[r] = s;
}


template <typename T> static double sumsq(const void *g, size_t n) {
    if (n == 0) return 0.0;
    double *sumsq_scratch =  // [0] result, [1 ..] block sums
        (double *)cuda_scratch_reserve(CUDA_SCRATCH_SUMSQ, (1 + SUMSQ_MAX_BLOCKS) * sizeof(double));
    constexpr int P = pack_of<T>();
    const int V = aligned16(g) ? P : 1;
    const int G = sumsq_grid(n, V);
    cudaStream_t st = t5_stream();
    if (V == P)
        sumsq_partial_kernel<T, P><<<G, SUMSQ_THREADS, 0, st>>>(sumsq_scratch + 1, (const T *)g, n);
    else
        sumsq_partial_kernel<T, 1><<<G, SUMSQ_THREADS, 0, st>>>(sumsq_scratch + 1, (const T *)g, n);
    cudaLaunchCheck();
    sumsq_final_kernel<<<1, 1024, 0, st>>>(sumsq_scratch, sumsq_scratch + 1, G);
    cudaLaunchCheck();
    double h;
    cuda_to_host(&h, sumsq_scratch, sizeof h);
    return h;
}

// sum(g^2) of n ranges (offsets, counts: host arrays) into out (n host doubles).
template <typename T> static void sumsq_many(double *out, const void *g, const size_t *offsets, const size_t *counts,
                                             int n) {
    if (n <= 0) return;
    if (n > 65535) t5_fail("sumsq_many: %d ranges; at most 65535 per call", n);
    const size_t table = 2 * (size_t)n * sizeof(unsigned long long), sums = (size_t)n * sizeof(double);
    // [0, table) the ranges, then n results, then n x SUMSQ_MAX_BLOCKS partial sums
    char *scratch = (char *)cuda_scratch_reserve(CUDA_SCRATCH_SUMSQ_MANY,
                                                 table + sums + (size_t)n * SUMSQ_MAX_BLOCKS * sizeof(double));
    unsigned long long *ranges = (unsigned long long *)scratch;
    double *res = (double *)(scratch + table), *partial = res + n;
    unsigned long long *h = (unsigned long long *)mallocCheck(table);
    int G = 1;
    for (int r = 0; r < n; r++) {
        h[2 * r] = offsets[r];
        h[2 * r + 1] = counts[r];
        const int g_r = sumsq_grid(counts[r], 1);  // the widest grid a range can ask for
        G = g_r > G ? g_r : G;
    }
    cuda_to_device(ranges, h, table);
    free(h);
    constexpr int P = pack_of<T>();
    cudaStream_t st = t5_stream();
    sumsq_many_partial_kernel<T, P><<<dim3((unsigned)G, (unsigned)n), SUMSQ_THREADS, 0, st>>>(partial, (const T *)g,
                                                                                               ranges);
    cudaLaunchCheck();
    sumsq_many_final_kernel<T, P><<<n, 1024, 0, st>>>(res, partial, (const T *)g, ranges);
    cudaLaunchCheck();
    cuda_to_host(out, res, sums);
}

template <typename T> struct AdamWF {
    float *master, *m, *v;
    T *param_out;  // NULL: none
    const T *grad;
    float grad_scale, decay, w1, w1_minus_1, beta2, w2, bc2_sqrt, eps, neg_step_size;
    int do_decay, small_w1;
    template <int V> __device__ void apply(size_t i) const {
        float g[V], p[V], mi[V], vi[V];
        load_vec<T, V>(g, grad + i);
        load_vec<float, V>(p, master + i);
        load_vec<float, V>(mi, m + i);
        load_vec<float, V>(vi, v + i);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float gk = __fmul_rn(g[k], grad_scale);
            float pk = do_decay ? __fmul_rn(p[k], decay) : p[k];
            // fused multiply-adds where torch's CPU lerp / addcmul have them (kernels/cpu/adamw_math.h)
            float mk = small_w1 ? __fmaf_rn(w1, __fsub_rn(gk, mi[k]), mi[k])
                                : __fmaf_rn(w1_minus_1, __fsub_rn(gk, mi[k]), gk);
            float vk = __fmaf_rn(__fmul_rn(w2, gk), gk, __fmul_rn(vi[k], beta2));
            const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vk), bc2_sqrt), eps);
            p[k] = __fadd_rn(pk, __fdiv_rn(__fmul_rn(neg_step_size, mk), denom));
            mi[k] = mk;
            vi[k] = vk;
        }
        store_vec<float, V>(master + i, p);
        store_vec<float, V>(m + i, mi);
        store_vec<float, V>(v + i, vi);
        if (param_out) store_vec<T, V>(param_out + i, p);
    }
};

template <typename T>
static void adamw_update(float *master, void *param_out, const void *grad, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale, int step) {
    if (step < 1) t5_fail("adamw_update: optimizer step %d, but steps count from 1", step);
    // the scalars exactly as kernels/cpu/optimizer.c computes them
    const double bc1 = 1.0 - pow((double)beta1, step);
    const double bc2 = 1.0 - pow((double)beta2, step);
    AdamWF<T> f;
    f.master = master;
    f.m = m;
    f.v = v;
    f.param_out = (T *)param_out;
    f.grad = (const T *)grad;
    f.grad_scale = grad_scale;
    f.decay = (float)(1.0 - (double)lr * (double)weight_decay);
    f.w1 = (float)(1.0 - (double)beta1);
    f.w1_minus_1 = f.w1 - 1.0f;
    f.beta2 = beta2;
    f.w2 = (float)(1.0 - (double)beta2);
    f.bc2_sqrt = (float)sqrt(bc2);
    f.eps = eps;
    f.neg_step_size = (float)(-((double)lr / bc1));
    f.do_decay = weight_decay != 0.0f;
    f.small_w1 = fabsf(f.w1) < 0.5f;
    const bool aligned =
        aligned16(master) && aligned16(m) && aligned16(v) && aligned16(grad) && aligned16(param_out);
    launch_pointwise<T, ADAMW_PACK>(f, n, aligned, true);
}

extern "C" double cuda_sumsq(Dtype dt, const void *g, size_t n) {
    switch (dt) {
    case DTYPE_F32: return sumsq<float>(g, n);
    case DTYPE_BF16: return sumsq<__nv_bfloat16>(g, n);
    case DTYPE_F16: return sumsq<__half>(g, n);
    default: dtype_unknown(dt, __func__);
    }
    return 0.0;
}

extern "C" void cuda_adamw_update(Dtype dt, float *master, void *param_out, const void *grad, float *m, float *v,
                                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                                  float grad_scale, int step) {
    DISPATCH_DTYPE(dt, adamw_update, master, param_out, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                   grad_scale, step);
}

extern "C" void cuda_sumsq_many(Dtype dt, double *out, const void *g, const size_t *offsets, const size_t *counts,
                                int n) {
    DISPATCH_DTYPE(dt, sumsq_many, out, g, offsets, counts, n);
}
