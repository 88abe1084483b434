// kernels/cuda/rmsnorm.cu: T5's RMS norm (HF T5LayerNorm): no mean, no bias.
//   forward   rstd (N) = 1/sqrtf(mean(x^2) + eps) (fp32), out = weight * T(x * rstd):
//             HF multiplies in fp32, converts to the weight's dtype when that is 16-bit,
//             then multiplies by the weight; for T = float this is kernels/cpu/rmsnorm.c.
//             One block per row, 16-byte packs, the row re-read from L1/L2 for the output.
//   backward  dinp += r * (w*g - xhat * mean(w*g*xhat)), xhat = x*r in fp32;
//             dweight += sum over rows of g * xhat, deterministically: block b owns the
//             fixed row range [b*R, (b+1)*R) (R from N alone), sums its rows per column
//             in shared memory (each column owned by one thread), writes one fp32 partial
//             row; a second kernel sums the partials in block order and adds into dweight.
//   residual  residual_rmsnorm_forward: a sublayer's x_out = x_in + dropout(y) and the next
//             sublayer's forward norm of x_out in one warp-per-row kernel (bf16, fp32).
#include "common.cuh"
#include "point_drop.cuh"

#define RMS_MAX_THREADS 256
#define RMS_MAX_PARTIALS 1024  // fp32 partial rows of dweight (blocks of the backward)
#define RMS_DW_GROUPS 32       // row groups of the dweight kernel (its blockDim.y)
// Rows a backward block takes at least: 2, not 8, so a t5-large B=16 norm (N = 2048) runs 1024
// blocks, not 256 (H200: bench B=16 513 -> 521 / 526 samples/s; 17.4 us a call in the step's
// profile). N >= 2048 now always gives RMS_MAX_PARTIALS blocks.
#define RMS_MIN_ROWS 2

// ---- forward ----------------------------------------------------------------------------------

template <typename T, int V>
__global__ void __launch_bounds__(RMS_MAX_THREADS)
    rmsnorm_forward_kernel(T *out, float *rstd, const T *inp, const T *weight, int D, float eps) {
    const size_t n = blockIdx.x;
    const T *x = inp + n * D;
    T *y = out + n * D;
    float ss = 0.0f;
    for (int c = threadIdx.x * V; c < D; c += blockDim.x * V) {
        float f[V];
        load_vec<T, V>(f, x + c);
#pragma unroll
        for (int k = 0; k < V; k++) ss += f[k] * f[k];
    }
    ss = block_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (threadIdx.x == 0) rstd[n] = r;
    for (int c = threadIdx.x * V; c < D; c += blockDim.x * V) {
        float f[V], w[V], o[V];
        load_vec<T, V>(f, x + c);
        load_vec<T, V>(w, weight + c);
#pragma unroll
        for (int k = 0; k < V; k++) o[k] = w[k] * round_to<T>(f[k] * r);
        store_vec<T, V>(y + c, o);
    }
}

// ---- forward, warp per row (the t5 path) -------------------------------------------------
// One warp per row, the row held in registers (NP packs of V per lane: D <= 32*V*NP, D % V
// == 0), RMS_WARPS rows per block: no block-wide barriers per row, which bounded the
// block-per-row kernel above at t5-large's D = 1024 (128 threads, two __syncthreads per
// row). H200, bf16 N=8192 D=1024: 12.7 -> 11.7 us per call inside a t5-large step (8 us,
// 4.1 TB/s, when the input is in L2). Sums are fixed shuffle trees: deterministic.
// The same idea for backward was measured slower (warp-per-row rows, the warps' dweight sums
// meeting in shared memory: 54.9 us at 4 rows per warp, 84 us at 1, against the block
// kernel's 29.4 us), so backward keeps the block-per-row kernel below.
#define RMS_WARPS 8

// The end of a one-warp row norm (rmsnorm_forward_warp_kernel, residual_rmsnorm_warp_kernel):
// the lanes' sums of squares ss of the row values f (lane's packs as loaded) -> rstd, and
// y = weight * T(x * rstd) written pack by pack.
template <typename T, int V, int NP>
__device__ __forceinline__ void rms_warp_finish(T *y, float *rstd, const float (&f)[NP][V], float ss, const T *weight,
                                                int D, float eps, int lane) {
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) *rstd = r;
#pragma unroll
    for (int t = 0; t < NP; t++) {
        const int c = (lane + 32 * t) * V;
        if (c < D) {
            float w[V], o[V];
            load_vec<T, V>(w, weight + c);
#pragma unroll
            for (int k = 0; k < V; k++) o[k] = w[k] * round_to<T>(f[t][k] * r);
            store_vec<T, V>(y + c, o);
        }
    }
}

template <typename T, int V, int NP>
__global__ void __launch_bounds__(32 * RMS_WARPS)
    rmsnorm_forward_warp_kernel(T *out, float *rstd, const T *inp, const T *weight, int N, int D, float eps) {
    const int lane = threadIdx.x % 32, n = blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    if (n >= N) return;
    const T *x = inp + (size_t)n * D;
    T *y = out + (size_t)n * D;
    float f[NP][V];
    float ss = 0.0f;
#pragma unroll
    for (int t = 0; t < NP; t++) {
        const int c = (lane + 32 * t) * V;
        if (c < D) {
            load_vec<T, V>(f[t], x + c);
#pragma unroll
            for (int k = 0; k < V; k++) ss += f[t][k] * f[t][k];
        }
    }
    rms_warp_finish<T, V, NP>(y, rstd + n, f, ss, weight, D, eps, lane);
}

// Packs per lane of the warp kernels for a row of D (0: D too long or not whole packs).
static int rms_warp_np(int D, int P) {
    if (D % P != 0) return 0;
    const int np = CEIL_DIV(D / P, 32);
    return np <= 1 ? 1 : np <= 2 ? 2 : np <= 4 ? 4 : np <= 8 ? 8 : 0;
}

template <typename T, int P, int NP>
static void rms_forward_warp_launch(T *out, float *rstd, const T *inp, const T *weight, int N, int D, float eps) {
    rmsnorm_forward_warp_kernel<T, P, NP>
        <<<CEIL_DIV(N, RMS_WARPS), 32 * RMS_WARPS, 0, t5_stream()>>>(out, rstd, inp, weight, N, D, eps);
}


template <typename T>
static void rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight, int N, int D, float eps) {
    if (N <= 0 || D <= 0) return;
    constexpr int P = pack_of<T>();
    const bool vec = D % P == 0 && aligned16(out) && aligned16(inp) && aligned16(weight);
    const int np = vec ? rms_warp_np(D, P) : 0;
    if (np) {
        T *o = (T *)out;
        const T *x = (const T *)inp, *w = (const T *)weight;
        switch (np) {
        case 1: rms_forward_warp_launch<T, P, 1>(o, rstd, x, w, N, D, eps); break;
        case 2: rms_forward_warp_launch<T, P, 2>(o, rstd, x, w, N, D, eps); break;
        case 4: rms_forward_warp_launch<T, P, 4>(o, rstd, x, w, N, D, eps); break;
        default: rms_forward_warp_launch<T, P, 8>(o, rstd, x, w, N, D, eps); break;
        }
        cudaLaunchCheck();
        return;
    }
    const int threads = row_block_threads(vec ? D / P : D, RMS_MAX_THREADS);
    if (vec)
        rmsnorm_forward_kernel<T, P>
            <<<N, threads, 0, t5_stream()>>>((T *)out, rstd, (const T *)inp, (const T *)weight, D, eps);
    else
        rmsnorm_forward_kernel<T, 1>
            <<<N, threads, 0, t5_stream()>>>((T *)out, rstd, (const T *)inp, (const T *)weight, D, eps);
    cudaLaunchCheck();
}

// ---- residual add + forward, fused (residual_rmsnorm_forward) -------------------------------
// A sublayer's residual add x_out = x_in + dropout(y) (DropoutAddF's arithmetic: the kept
// value rounded to T, then one fp32 add rounded to T) and the next sublayer's norm of x_out,
// one warp per row as rmsnorm_forward_warp_kernel: the rounded x_out stays in registers for
// the norm instead of being read back (one (N,D) pass and a launch fewer). The sum of
// squares runs over the same values in the same order (per lane: packs, then elements; then
// warp_sum), so rstd and out are bitwise the separate kernels'. The dropout mask of element
// i = row*D + c is dropout_add's (keep_pack: c and D are multiples of V, so i is too).
// x_out may alias x_in or y: each lane reads its elements before writing them.
template <typename T, int V, int NP>
__global__ void __launch_bounds__(32 * RMS_WARPS)
    residual_rmsnorm_warp_kernel(T *x_out, T *out, float *rstd, const T *y, const T *x_in, const T *weight, int N,
                                 int D, float eps, PointDrop drop) {
    const int lane = threadIdx.x % 32, n = blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    if (n >= N) return;
    const size_t row = (size_t)n * D;
    float f[NP][V];
    float ss = 0.0f;
#pragma unroll
    for (int t = 0; t < NP; t++) {
        const int c = (lane + 32 * t) * V;
        if (c < D) {
            float a[V], b[V];
            load_vec<T, V>(a, y + row + c);
            load_vec<T, V>(b, x_in + row + c);
            if (drop.p == 0.0f) {
#pragma unroll
                for (int k = 0; k < V; k++) a[k] = __fadd_rn(a[k], b[k]);
            } else {
                bool kp[V];
                drop.keep_pack<V>(row + c, kp);
#pragma unroll
                for (int k = 0; k < V; k++) a[k] = __fadd_rn(drop.value_kept<T>(a[k], kp[k]), b[k]);
            }
            store_vec<T, V>(x_out + row + c, a);
#pragma unroll
            for (int k = 0; k < V; k++) f[t][k] = round_to<T>(a[k]);  // the value x_out now holds
#pragma unroll
            for (int k = 0; k < V; k++) ss += f[t][k] * f[t][k];
        }
    }
    rms_warp_finish<T, V, NP>(out + row, rstd + n, f, ss, weight, D, eps, lane);
}

template <typename T, int P, int NP>
static void residual_rms_launch(T *x_out, T *out, float *rstd, const T *y, const T *x_in, const T *weight, int N,
                                int D, float eps, PointDrop drop) {
    residual_rmsnorm_warp_kernel<T, P, NP><<<CEIL_DIV(N, RMS_WARPS), 32 * RMS_WARPS, 0, t5_stream()>>>(
        x_out, out, rstd, y, x_in, weight, N, D, eps, drop);
}

// 1: launched fused; 0: the shape or alignment needs the separate kernels.
template <typename T>
static int residual_rmsnorm_forward(void *x_out, void *out, float *rstd, const void *y, const void *x_in,
                                    const void *weight, int N, int D, float eps, DropoutArgs drop) {
    constexpr int P = pack_of<T>();
    const bool vec = D % P == 0 && aligned16(x_out) && aligned16(out) && aligned16(y) && aligned16(x_in) &&
                     aligned16(weight);
    const int np = vec ? rms_warp_np(D, P) : 0;
    if (!np) return 0;
    const PointDrop pd = point_drop(drop);
    T *xo = (T *)x_out, *o = (T *)out;
    const T *yy = (const T *)y, *xi = (const T *)x_in, *w = (const T *)weight;
    switch (np) {
    case 1: residual_rms_launch<T, P, 1>(xo, o, rstd, yy, xi, w, N, D, eps, pd); break;
    case 2: residual_rms_launch<T, P, 2>(xo, o, rstd, yy, xi, w, N, D, eps, pd); break;
    case 4: residual_rms_launch<T, P, 4>(xo, o, rstd, yy, xi, w, N, D, eps, pd); break;
    default: residual_rms_launch<T, P, 8>(xo, o, rstd, yy, xi, w, N, D, eps, pd); break;
    }
    cudaLaunchCheck();
    return 1;
}

// ---- backward ---------------------------------------------------------------------------------

// Block b: rows [b*R, min(N, (b+1)*R)). Shared acc (D floats) laid out [k][pack] so that
// consecutive threads touch consecutive words. partial (gridDim.x, D). DROP: also writes
// dnext = dropout(the new dinp) as dropout_forward would from the stored values (the next
// backward sublayer's input gradient: rmsnorm_backward_dropout).
template <typename T, int V, bool DROP>
__global__ void __launch_bounds__(RMS_MAX_THREADS)
    rmsnorm_backward_kernel(T *dinp, float *partial, const T *dout, const T *inp, const T *weight,
                            const float *rstd, int N, int D, int R, T *dnext, PointDrop drop) {
    extern __shared__ float acc[];
    const int P = D / V;  // packs per row (D % V == 0 by the launch)
    for (int p = threadIdx.x; p < P; p += blockDim.x)
#pragma unroll
        for (int k = 0; k < V; k++) acc[k * P + p] = 0.0f;
    const int n0 = blockIdx.x * R, n1 = min(N, n0 + R);
    for (int n = n0; n < n1; n++) {
        const T *x = inp + (size_t)n * D, *g = dout + (size_t)n * D;
        T *dx = dinp + (size_t)n * D;
        const float r = rstd[n];
        float dot = 0.0f;
        for (int p = threadIdx.x; p < P; p += blockDim.x) {
            float xf[V], gf[V], wf[V];
            load_vec<T, V>(xf, x + p * V);
            load_vec<T, V>(gf, g + p * V);
            load_vec<T, V>(wf, weight + p * V);
#pragma unroll
            for (int k = 0; k < V; k++) dot += wf[k] * gf[k] * (xf[k] * r);
        }
        dot = block_sum(dot);
        const float mean_dot = dot / (float)D;
        for (int p = threadIdx.x; p < P; p += blockDim.x) {
            float xf[V], gf[V], wf[V], d[V];
            load_vec<T, V>(xf, x + p * V);
            load_vec<T, V>(gf, g + p * V);
            load_vec<T, V>(wf, weight + p * V);
            load_vec<T, V>(d, dx + p * V);
#pragma unroll
            for (int k = 0; k < V; k++) {
                const float xhat = xf[k] * r;
                d[k] += r * (wf[k] * gf[k] - xhat * mean_dot);
                acc[k * P + p] += gf[k] * xhat;
            }
            store_vec<T, V>(dx + p * V, d);
            if constexpr (DROP) {
                bool kp[V];
                drop.keep_pack<V>((size_t)n * D + (size_t)p * V, kp);
#pragma unroll
                for (int k = 0; k < V; k++) d[k] = drop.value_kept<T>(round_to<T>(d[k]), kp[k]);
                store_vec<T, V>(dnext + (size_t)n * D + p * V, d);
            }
        }
    }
    float *dst = partial + (size_t)blockIdx.x * D;
    for (int p = threadIdx.x; p < P; p += blockDim.x)
#pragma unroll
        for (int k = 0; k < V; k++) dst[p * V + k] = acc[k * P + p];
}

// dweight[c] += sum over b of partial[b, c], in a fixed order. block (32, RMS_DW_GROUPS):
// thread (tx, ty) sums b = ty, ty+GROUPS, ... for column c = blockIdx.x*32 + tx; then
// ty 0 sums the GROUPS sums in order.
template <typename T>
__global__ void rmsnorm_dweight_kernel(T *dweight, const float *partial, int G, int D) {
    __shared__ float s[RMS_DW_GROUPS][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float a = 0.0f;
    if (c < D) {
#pragma unroll 8
        for (int b = threadIdx.y; b < G; b += RMS_DW_GROUPS) a += partial[(size_t)b * D + c];
    }
    s[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y != 0 || c >= D) return;
    float t = s[0][threadIdx.x];
#pragma unroll
    for (int y = 1; y < RMS_DW_GROUPS; y++) t += s[y][threadIdx.x];
    dweight[c] = from_float<T>(to_float(dweight[c]) + t);
}


template <typename T, int V, bool DROP>
static void rmsnorm_backward_launch(T *dinp, float *partial, const T *dout, const T *inp, const T *weight,
                                    const float *rstd, int N, int D, int R, int G, T *dnext, PointDrop drop) {
    const int threads = row_block_threads(D / V, RMS_MAX_THREADS);
    const size_t smem = (size_t)D * sizeof(float);
    // Up to 48 KiB per block (static + dynamic) without opting in; block_sum's static
    // shared array needs a few hundred bytes of it. Per instantiation (the attribute is
    // per kernel; the static mirrors it: state of this kernel function, not of the context).
    const size_t static_reserve = 1024;
    static size_t smem_opted = (48 << 10) - static_reserve;
    if (smem > smem_opted) {
        int dev = 0, max_optin = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        if (smem + static_reserve > (size_t)max_optin)
            t5_fail("rmsnorm_backward: d_model %d needs %zu bytes of shared memory, the GPU allows %d per block", D,
                    smem + static_reserve, max_optin);
        cudaCheck(cudaFuncSetAttribute(rmsnorm_backward_kernel<T, V, DROP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_opted = smem;
    }
    rmsnorm_backward_kernel<T, V, DROP>
        <<<G, threads, smem, t5_stream()>>>(dinp, partial, dout, inp, weight, rstd, N, D, R, dnext, drop);
    cudaLaunchCheck();
}

// dnext NULL: rmsnorm_backward; else rmsnorm_backward_dropout (backend.h).
template <typename T>
static void rmsnorm_backward(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                             const float *rstd, int N, int D, void *dnext, DropoutArgs next_drop) {
    if (N <= 0 || D <= 0) return;
    // Rows per block from N alone, so the summation order never depends on the device.
    int R = CEIL_DIV(N, RMS_MAX_PARTIALS);
    if (R < RMS_MIN_ROWS) R = RMS_MIN_ROWS;
    const int G = CEIL_DIV(N, R);
    const size_t need = (size_t)G * D * sizeof(float);
    float *rms_partial = (float *)cuda_scratch_reserve(CUDA_SCRATCH_RMSNORM, need);
    constexpr int P = pack_of<T>();
    const bool vec = D % P == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight) &&
                     (!dnext || aligned16(dnext));
    const PointDrop drop = point_drop(next_drop);
    T *dn = (T *)dnext;
#define RMS_BWD(VV, DD)                                                                                             \
    rmsnorm_backward_launch<T, VV, DD>((T *)dinp, rms_partial, (const T *)dout, (const T *)inp, (const T *)weight, \
                                       rstd, N, D, R, G, dn, drop)
    if (vec && dn) RMS_BWD(P, true);
    else if (vec) RMS_BWD(P, false);
    else if (dn) RMS_BWD(1, true);
    else RMS_BWD(1, false);
#undef RMS_BWD
    rmsnorm_dweight_kernel<T>
        <<<CEIL_DIV(D, 32), dim3(32, RMS_DW_GROUPS), 0, t5_stream()>>>((T *)dweight, rms_partial, G, D);
    cudaLaunchCheck();
}

extern "C" void cuda_rmsnorm_forward(Dtype dt, void *out, float *rstd, const void *inp, const void *weight, int N,
                                     int D, float eps) {
    DISPATCH_DTYPE(dt, rmsnorm_forward, out, rstd, inp, weight, N, D, eps);
}

extern "C" void cuda_rmsnorm_backward(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp,
                                      const void *weight, const float *rstd, int N, int D) {
    const DropoutArgs none = {0.0f, 0};
    DISPATCH_DTYPE(dt, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, N, D, NULL, none);
}

extern "C" void cuda_rmsnorm_backward_dropout(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp,
                                              const void *weight, const float *rstd, int N, int D, void *dnext,
                                              DropoutArgs next_drop) {
    DISPATCH_DTYPE(dt, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, N, D, dnext, next_drop);
}

// backend.h residual_rmsnorm_forward. fp16 keeps the two calls: HF's overflow guard clamps
// the whole tensor when ANY element is inf, which the norm of a row cannot know before every
// row's add has run (dropout_add_guard's flag); other shapes the warp kernel does not take
// (D not whole 16-byte packs, D > 32*8 packs, unaligned pointers) also run the two calls.
extern "C" void cuda_residual_rmsnorm_forward(Dtype dt, void *x_out, void *out, float *rstd, const void *y,
                                              const void *x_in, const void *weight, int N, int D, float eps,
                                              DropoutArgs drop) {
    if (N <= 0 || D <= 0) return;
    int fused = 0;
    if (dt == DTYPE_F32) fused = residual_rmsnorm_forward<float>(x_out, out, rstd, y, x_in, weight, N, D, eps, drop);
    else if (dt == DTYPE_BF16)
        fused = residual_rmsnorm_forward<__nv_bfloat16>(x_out, out, rstd, y, x_in, weight, N, D, eps, drop);
    if (fused) return;
    cuda_dropout_add_guard(dt, x_out, y, x_in, (size_t)N * D, drop);
    cuda_rmsnorm_forward(dt, out, rstd, x_out, weight, N, D, eps);
}
