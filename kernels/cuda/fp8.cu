// kernels/cuda/fp8.cu: the fp8 linear of backend.h (fp8_matmul_forward, fp8_matmul_backward,
// fp8_scales_update) for activations T = float, bf16, fp16. Each operand is rounded to its
// 8-bit format into the context's fp8 scratch (CUDA_SCRATCH_FP8, laid out as
// kernels/fp8_format.h's fp8_scratch_bytes), then cuBLASLt multiplies the codes with the
// inverse scales as its A/B scale pointers (matmul.cu cuda_gemm_fp8: the plan cache, and the
// simple kernel with a NOTICE where cuBLASLt's fp8 kernels do not apply).
//
// Rounding: x * scale as one fp32 product (__fmul_rn, never contracted), then cvt.rn.satfinite
// (cuda_fp8.h) on compute capability 8.9 and up; the cubins of older GPUs (no such
// instruction) use fp8_format.h's fp8_encode, the same function bit for bit (the CPU
// reference's; tests/gpu/test_backend_ops checks the GPU against it).
//
// amax: max |x| is kept as the int bits of |x| (sign cleared), reduced per block and folded
// into the device float with atomicMax on int. For floats with the sign bit clear the int
// order is the float order, and |NaN| (exponent all ones, mantissa non-zero) is above +inf:
// a NaN propagates as backend.h asks. The entries hold values >= 0 (model/fp8.c); the max is
// order-free, so the result is deterministic. Delayed scaling (s.current == 0) reads the
// scale from device memory in the rounding kernel, so rounding and amax are one pass;
// current scaling runs an amax pass, a tiny kernel (scale = fp8_scale_from_amax(amax, margin
// 0), inv = 1/scale) and then the rounding pass.
//
// Layouts (row-major bytes; N16 = fp8_rows_padded(N)):
//   forward   q4 (N, I) | w4 (count*O, I)        out_z (N,O) = q4 w4_z^T
//             col-major m=O n=N k=I: A = w4_z (lda I, batch stride O*I), B = q4 (ldb I, stride 0)
//   backward  g5 (N, O) | g5^T (O, N16) | w4^T (I, O) | q4^T (I, N16)
//             dinp (N,I) (+)= g5 w4:   m=I n=N k=O:   A = w4^T (lda O),   B = g5 (ldb O)
//             dW   (O,I)  += g5^T q4:  m=I n=O k=N16: A = q4^T (lda N16), B = g5^T (ldb N16)
// (cuBLASLt's fp8 kernels take A transposed and B not: every operand is stored K-contiguous.)
// The transposed copies come from a shared-memory tile that reads and writes coalesced
// (fp8_cast_transpose_kernel; a 64 x 64 byte tile for unaligned shapes); g5 and g5^T come out
// of the same pass. Rows N..N16-1 of the transposed copies
// are written zero (they add nothing to dW). Fast accumulation on the forward only
// (Transformer Engine's choice): without it cuBLASLt promotes the tensor cores' partial sums
// (about 14 bits, Hopper) into fp32 at intervals; the gradients' GEMMs keep that.
//
// cuBLASLt's scale pointers must be 16-byte aligned: with the inv entries of an Fp8Scales
// (4-byte steps) cublasLtMatmul returns NOT_SUPPORTED although the heuristic offered an
// algorithm (H200, CUDA 13.0: aligned 16 runs, offsets 4, 8, 12 fail). So each rounding pass
// also copies its operand's inv[k] into slot k of CUDA_SCRATCH_FP8_INV (16 bytes a slot; one
// thread, no extra launch), and the GEMM reads the slots.
#include <cuda_fp8.h>

#include "gemm.cuh"
#include "relu_drop.cuh"

namespace {

enum { FP8_THREADS = 256, FP8_TILE = 64, FP8_TILE_LD = FP8_TILE + 4 };  // LD: 4-byte stores, 2-way conflicts
static_assert(FP8_THREADS == FP8_TILE * 4, "the transposed store gives each thread 16 bytes of the tile");

// ---- rounding and amax ---------------------------------------------------------------------

// x -> the code of format F: round to nearest even, saturate to the largest finite.
template <Fp8Format F> __device__ __forceinline__ uint32_t fp8_cvt(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return (uint32_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, F == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
#else
    return (uint32_t)fp8_encode(x, F);
#endif
}
// Two codes, lo in the low byte (one cvt instruction on 8.9+).
template <Fp8Format F> __device__ __forceinline__ uint32_t fp8_cvt2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE,
                                              F == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
#else
    return (uint32_t)fp8_encode(lo, F) | (uint32_t)fp8_encode(hi, F) << 8;
#endif
}
// Eight scaled values -> eight codes, element k in byte k of (lo, hi).
template <Fp8Format F> __device__ __forceinline__ uint2 fp8_cvt8(const float (&x)[8], float s) {
    uint2 q;
    q.x = fp8_cvt2<F>(__fmul_rn(x[0], s), __fmul_rn(x[1], s)) |
          fp8_cvt2<F>(__fmul_rn(x[2], s), __fmul_rn(x[3], s)) << 16;
    q.y = fp8_cvt2<F>(__fmul_rn(x[4], s), __fmul_rn(x[5], s)) |
          fp8_cvt2<F>(__fmul_rn(x[6], s), __fmul_rn(x[7], s)) << 16;
    return q;
}

// |x| as int bits (the amax order, see the top).
__device__ __forceinline__ int fp8_abs_bits(float x) { return __float_as_int(x) & 0x7fffffff; }

__device__ __forceinline__ int warp_max_int(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// *amax = max(*amax, the block's largest bits): one atomic per block. Every thread calls it
// (it holds a barrier); blockDim.x a multiple of 32.
__device__ void fp8_amax_commit(float *amax, int bits) {
    __shared__ int part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    bits = warp_max_int(bits);
    if (lane == 0) part[warp] = bits;
    __syncthreads();
    if (warp == 0) {
        bits = warp_max_int(lane < (int)(blockDim.x >> 5) ? part[lane] : 0);
        if (lane == 0 && bits > 0) atomicMax((int *)amax, bits);
    }
}

// The scales a rounding pass of operand k reads and stages (NULL for an amax-only pass): codes
// of x * *scale; its first thread copies *inv to *inv_slot (the GEMM's 16-byte aligned scale
// pointer, the top) and each set also_inv[j] to also_slot[j]: the inverse scales of operands
// kept from earlier (the forward's input and the step's weight codes, Fp8Scales.inp_t, .w4),
// whose passes do not run in this call.
struct Fp8Operand {
    const float *scale, *inv;
    float *inv_slot;
    const float *also_inv[2];
    float *also_slot[2];
};
__device__ __forceinline__ void fp8_stage_inv(const Fp8Operand &op) {
    *op.inv_slot = *op.inv;
#pragma unroll
    for (int j = 0; j < 2; j++)
        if (op.also_inv[j]) *op.also_slot[j] = *op.also_inv[j];
}

// ---- kernels -------------------------------------------------------------------------------

// Entry z = blockIdx.y: src_z (n) at src + z * src_stride (elements of T). QUANT: dst_z (n)
// at dst + z * dst_stride = codes of src_z * *op.scale, and fp8_stage_inv(op). AMAX:
// *amax max= max |src_z|. vec: packs of 8 (src_z 16-byte aligned, dst_z 8-byte aligned), two a
// step with both loads issued first, and a scalar tail.
template <typename T, Fp8Format F, bool QUANT, bool AMAX>
__global__ void fp8_rows_kernel(uint8_t *__restrict__ dst, size_t dst_stride, const T *__restrict__ src,
                                size_t src_stride, size_t n, Fp8Operand op, float *amax, bool vec) {
    if (QUANT && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) fp8_stage_inv(op);
    src += blockIdx.y * src_stride;
    if (QUANT) dst += blockIdx.y * dst_stride;
    const float s = QUANT ? *op.scale : 0.0f;
    const size_t stride = (size_t)gridDim.x * blockDim.x, t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int m = 0;
    size_t done = 0;
    if (vec) {
        const size_t nv = n / 8;
        for (size_t p0 = t; p0 < nv; p0 += 2 * stride) {
            float x[2][8];
            const bool two = p0 + stride < nv;
            load_vec<T, 8>(x[0], src + p0 * 8);
            if (two) load_vec<T, 8>(x[1], src + (p0 + stride) * 8);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                if (i == 1 && !two) break;
                if (AMAX)
#pragma unroll
                    for (int k = 0; k < 8; k++) m = max(m, fp8_abs_bits(x[i][k]));
                if (QUANT) *reinterpret_cast<uint2 *>(dst + (p0 + i * stride) * 8) = fp8_cvt8<F>(x[i], s);
            }
        }
        done = nv * 8;
    }
    for (size_t i = done + t; i < n; i += stride) {
        const float x = to_float(src[i]);
        if (AMAX) m = max(m, fp8_abs_bits(x));
        if (QUANT) dst[i] = (uint8_t)fp8_cvt<F>(__fmul_rn(x, s));
    }
    if (AMAX) fp8_amax_commit(amax, m);
}

// src (R, C) row-major -> tr (C, ld_tr): tr[c][r] = code of src[r][c] * *op.scale for r < R and
// 0 for R <= r < ld_tr (the padding); rm (R, C) the same codes row-major when not NULL;
// fp8_stage_inv(op); AMAX: *amax max= max |src|. Block: the 64 x 64 tile at rows
// blockIdx.y * 64, columns blockIdx.x * 64 (the grid covers ld_tr rows: tiles past R write the
// zeros). vec_in: C a multiple of 8 and src 16-byte aligned (rm then 8-byte aligned); vec_out:
// ld_tr a multiple of 16 and tr 16-byte aligned.
template <typename T, Fp8Format F, bool AMAX>
__global__ void fp8_transpose_kernel(uint8_t *__restrict__ tr, int ld_tr, uint8_t *__restrict__ rm,
                                     const T *__restrict__ src, int R, int C, Fp8Operand op, float *amax,
                                     bool vec_in, bool vec_out) {
    constexpr int ROWS = FP8_TILE * 8 / FP8_THREADS;  // row packs of 8 a thread loads
    __shared__ __align__(16) uint8_t tile[FP8_TILE * FP8_TILE_LD];  // tile[r][c]
    const int r0 = blockIdx.y * FP8_TILE, c0 = blockIdx.x * FP8_TILE, t = threadIdx.x;
    if (blockIdx.x == 0 && blockIdx.y == 0 && t == 0) fp8_stage_inv(op);
    const float s = *op.scale;
    int m = 0;
    // load: thread t rounds 8 consecutive columns of ROWS rows (coalesced packs, loads first)
    const int lc = (t % 8) * 8, c = c0 + lc;
    float x[ROWS][8];
    bool in[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int r = r0 + t / 8 + i * (FP8_THREADS / 8);
        in[i] = r < R && c < C;
        if (vec_in && in[i]) load_vec<T, 8>(x[i], src + (size_t)r * C + c);  // c + 8 <= C
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int lr = t / 8 + i * (FP8_THREADS / 8), r = r0 + lr;
        uint2 q = make_uint2(0u, 0u);
        if (in[i] && vec_in) {
            if (AMAX)
#pragma unroll
                for (int k = 0; k < 8; k++) m = max(m, fp8_abs_bits(x[i][k]));
            q = fp8_cvt8<F>(x[i], s);
            if (rm) *reinterpret_cast<uint2 *>(rm + (size_t)r * C + c) = q;
        } else if (in[i]) {
            const T *p = src + (size_t)r * C + c;
            for (int k = 0; k < 8 && c + k < C; k++) {
                const float v = to_float(p[k]);
                if (AMAX) m = max(m, fp8_abs_bits(v));
                const uint32_t code = fp8_cvt<F>(__fmul_rn(v, s));
                if (rm) rm[(size_t)r * C + c + k] = (uint8_t)code;
                if (k < 4) q.x |= code << (8 * k);
                else q.y |= code << (8 * (k - 4));
            }
        }
        *reinterpret_cast<uint32_t *>(tile + lr * FP8_TILE_LD + lc) = q.x;
        *reinterpret_cast<uint32_t *>(tile + lr * FP8_TILE_LD + lc + 4) = q.y;
    }
    if (AMAX) fp8_amax_commit(amax, m);
    __syncthreads();
    // store: 64 output rows (the tile's columns) of 64 bytes; thread t writes 16 bytes of row t / 4
    const int oc = t / 4, orr = (t % 4) * 16, oc_g = c0 + oc, r = r0 + orr;
    if (oc_g >= C || r >= ld_tr) return;
    uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < 16; j++) w[j / 4] |= (uint32_t)tile[(orr + j) * FP8_TILE_LD + oc] << (8 * (j % 4));
    uint8_t *dst = tr + (size_t)oc_g * ld_tr + r;
    if (vec_out) {  // r + 16 <= ld_tr
        *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        for (int j = 0; j < 16 && r + j < ld_tr; j++) dst[j] = (uint8_t)(w[j / 4] >> (8 * (j % 4)));
    }
}

// The fast transposing pass, for fp8_transpose when C % 8 == 0, ld_tr % 16 == 0 and src, tr
// 16-byte aligned (fp8_transpose_kernel otherwise): the same codes, padding and amax. A block
// rounds a 128-row x 64-column tile, a thread 4 rows x 8 columns (its four 16-byte loads in
// flight together). The 4 codes of one column become one 32-bit word in registers (byte
// permutes: byte i = row 4 * ty + i), stored into a shared (64 columns x 32 words) tile whose
// 4-word groups are XOR-swizzled by the column's pack (column / 8): a warp's stores hit 32
// different banks and 8 threads' 16-byte reads 8 different groups. Each thread then writes two
// 16-byte pieces of the transposed rows (8 threads: 128 contiguous bytes). Rows R..ld_tr-1 are
// loaded as zeros (code 0). The old kernel's 64 x 64 tile moved a byte a shared access and
// reached 1.5-2.7 TB/s in the step (ncu).
enum { FP8_CT_ROWS = 128, FP8_CT_COLS = 64, FP8_CT_WORDS = FP8_CT_ROWS / 4 };
static_assert(FP8_THREADS == (FP8_CT_COLS / 8) * (FP8_CT_ROWS / 4), "a thread: 4 rows x 8 columns of the tile");
static_assert(FP8_CT_WORDS == 32 && FP8_CT_COLS / 8 == 8, "the swizzle: 8 packs of columns, 8 groups of 4 words");

// Column pack g's 4-word group p (rows 16p .. 16p+15 of the tile) sits at group p ^ g.
__device__ __forceinline__ int fp8_ct_word(int col, int word) { return col * FP8_CT_WORDS + (word ^ (4 * ((col / 8) % 8))); }

// Where the fast pass's values come from, in two steps so that a thread's four rows are all
// loaded before any is computed (their loads in flight together): fetch(r, c, raw) loads row
// r's columns c .. c+7 (C % 8 == 0, 16-byte aligned rows), make(r, c, raw, x) gives their
// values as the activation dtype T holds them. The plain source reads them; the ReLU FFN's
// sources (fp8_relu_drop_matmul_*) compute them as relu_drop_forward / relu_drop_backward
// (set) would store them (relu_drop.cuh), so h and da never reach memory.
struct Fp8Raw {
    float v[8];
    unsigned byte;  // the keep byte (Fp8SrcReluDropGrad)
};
template <typename T> struct Fp8SrcPlain {
    const T *__restrict__ src;
    int C;
    __device__ __forceinline__ void fetch(int r, int c, Fp8Raw &raw) const {
        load_vec<T, 8>(raw.v, src + (size_t)r * C + c);
    }
    __device__ __forceinline__ void make(int, int, const Fp8Raw &raw, float (&x)[8]) const {
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = raw.v[k];
    }
};
template <typename T> struct Fp8SrcReluDrop {  // h = relu_drop_forward(a), its keep bits written
    const T *__restrict__ a;
    uint8_t *__restrict__ bits;  // NULL: not written
    PointDrop drop;
    int C;
    __device__ __forceinline__ void fetch(int r, int c, Fp8Raw &raw) const {
        load_vec<T, 8>(raw.v, a + (size_t)r * C + c);
    }
    __device__ __forceinline__ void make(int r, int c, const Fp8Raw &raw, float (&y)[8]) const {
        const size_t i = (size_t)r * C + c;
        const unsigned byte = relu_drop_values8<T>(raw.v, i, drop, y);
        if (bits) bits[i / 8] = (uint8_t)byte;
    }
};
template <typename T> struct Fp8SrcReluDropGrad {  // da = relu_drop_backward(dh, bits), set
    const T *__restrict__ dh;
    const uint8_t *__restrict__ bits;
    PointDrop drop;
    int C;
    __device__ __forceinline__ void fetch(int r, int c, Fp8Raw &raw) const {
        const size_t i = (size_t)r * C + c;
        load_vec<T, 8>(raw.v, dh + i);
        raw.byte = bits[i / 8];
    }
    __device__ __forceinline__ void make(int, int, const Fp8Raw &raw, float (&y)[8]) const {
        float v[8];
        relu_drop_grads8<T>(raw.v, raw.byte, drop, v);
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = round_to<T>(__fadd_rn(0.0f, v[k]));  // the set store: 0 + v
    }
};

// tr NULL: the row-major codes (rm) only, no shared tile.
template <typename T, Fp8Format F, bool AMAX, class Src>
__global__ void __launch_bounds__(FP8_THREADS)
    fp8_cast_transpose_kernel(uint8_t *__restrict__ tr, int ld_tr, uint8_t *__restrict__ rm, Src src, int R, int C,
                              Fp8Operand op, float *amax) {
    __shared__ __align__(16) uint32_t tile[FP8_CT_COLS * FP8_CT_WORDS];  // [column][row word], swizzled
    const int t = threadIdx.x, tx = t % 8, ty = t / 8;
    const int r0 = blockIdx.y * FP8_CT_ROWS, c0 = blockIdx.x * FP8_CT_COLS, c = c0 + 8 * tx;
    if (blockIdx.x == 0 && blockIdx.y == 0 && t == 0) fp8_stage_inv(op);
    const float s = *op.scale;
    Fp8Raw raw[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (c < C && r0 + 4 * ty + i < R) src.fetch(r0 + 4 * ty + i, c, raw[i]);
    float x[4][8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = r0 + 4 * ty + i;
        if (c < C && r < R) {
            src.make(r, c, raw[i], x[i]);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) x[i][k] = 0.0f;
        }
    }
    int m = 0;
    uint2 q[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = r0 + 4 * ty + i;
        if (AMAX)
#pragma unroll
            for (int k = 0; k < 8; k++) m = max(m, fp8_abs_bits(x[i][k]));
        q[i] = fp8_cvt8<F>(x[i], s);  // 0 -> code 0 in both formats
        if (rm && c < C && r < R) *reinterpret_cast<uint2 *>(rm + (size_t)r * C + c) = q[i];
    }
    if (AMAX) fp8_amax_commit(amax, m);
    if (!tr) return;
    // rows (a, b, c, d) x bytes -> word k = (a_k, b_k, c_k, d_k): pairs interleaved, then pairs of pairs
    uint32_t w[8];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t a = h ? q[0].y : q[0].x, b = h ? q[1].y : q[1].x;
        const uint32_t cc = h ? q[2].y : q[2].x, d = h ? q[3].y : q[3].x;
        const uint32_t ab_lo = __byte_perm(a, b, 0x5140), ab_hi = __byte_perm(a, b, 0x7362);  // a0 b0 a1 b1 | a2 b2 a3 b3
        const uint32_t cd_lo = __byte_perm(cc, d, 0x5140), cd_hi = __byte_perm(cc, d, 0x7362);
        w[4 * h + 0] = __byte_perm(ab_lo, cd_lo, 0x5410);  // a0 b0 c0 d0
        w[4 * h + 1] = __byte_perm(ab_lo, cd_lo, 0x7632);  // a1 b1 c1 d1
        w[4 * h + 2] = __byte_perm(ab_hi, cd_hi, 0x5410);
        w[4 * h + 3] = __byte_perm(ab_hi, cd_hi, 0x7632);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) tile[fp8_ct_word(8 * tx + k, ty)] = w[k];
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int piece = t + j * FP8_THREADS, col = piece / 8, p = piece % 8;  // 16 bytes: rows 16p .. 16p+15
        const int oc = c0 + col, orow = r0 + 16 * p;
        if (oc >= C || orow >= ld_tr) continue;  // ld_tr % 16 == 0: a piece is all in or all out
        const uint4 v = *reinterpret_cast<const uint4 *>(&tile[fp8_ct_word(col, 4 * p)]);
        *reinterpret_cast<uint4 *>(tr + (size_t)oc * ld_tr + orow) = v;
    }
}

// Current scaling (backend.h): for each operand k in mask (bit k), scale[k] from amax[k]
// (fp8_scale_from_amax, margin 0) and inv[k] = 1 / scale[k] (__frcp_rn: the correctly rounded
// 1.0f / scale of the CPU).
__global__ void fp8_scale_current_kernel(Fp8Scales s, int mask) {
    const int k = threadIdx.x;
    if (k >= FP8_OPERANDS || !((mask >> k) & 1)) return;
    const float sc = fp8_scale_from_amax(s.amax[k], fp8_operand_format(k), 0, s.scale[k]);
    s.scale[k] = sc;
    s.inv[k] = __frcp_rn(sc);
}

// max(a, b) where a NaN wins (the CPU's reduction, kernels/cpu/fp8.c).
__device__ __forceinline__ float fp8_nan_max(float a, float b) { return (b > a || isnan(b)) ? b : a; }

// fp8_scales_update: one warp per entry e < entries. History row e (hist_len) gets amax[e] at
// col, amax[e] = 0, then scale[e] (and inv[e]) follow the row's max |h| (NaN: not finite, the
// scale is kept by fp8_scale_from_amax).
__global__ void fp8_scales_update_kernel(float *scale, float *inv, float *amax, float *history, int entries,
                                         int hist_len, int col, int margin) {
    const int e = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x & 31;
    if (e >= entries) return;  // whole warps (blockDim.x is a multiple of 32)
    float *row = history + (size_t)e * hist_len;
    const float a = amax[e];
    float m = 0.0f;
    for (int j = lane; j < hist_len; j += 32) m = fp8_nan_max(m, fabsf(j == col ? a : row[j]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fp8_nan_max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) {
        row[col] = a;
        amax[e] = 0.0f;
        const float sc = fp8_scale_from_amax(m, fp8_operand_format(e % FP8_OPERANDS), margin, scale[e]);
        scale[e] = sc;
        inv[e] = __frcp_rn(sc);
    }
}

// ---- launches --------------------------------------------------------------------------------

// The 16-byte slot of operand k's inverse scale (CUDA_SCRATCH_FP8_INV, the top).
float *fp8_inv_slot(int k) {
    return (float *)cuda_scratch_reserve(CUDA_SCRATCH_FP8_INV, FP8_OPERANDS * 16) + 4 * k;
}

Fp8Operand fp8_operand(Fp8Scales s, int k) {
    return Fp8Operand{s.scale + k, s.inv + k, fp8_inv_slot(k), {NULL, NULL}, {NULL, NULL}};
}
const Fp8Operand FP8_AMAX_ONLY = {NULL, NULL, NULL, {NULL, NULL}, {NULL, NULL}};
// op also stages operand k's inverse scale (kept codes whose pass does not run now).
void fp8_operand_stage(Fp8Operand &op, Fp8Scales s, int k) {
    const int j = op.also_inv[0] ? 1 : 0;
    op.also_inv[j] = s.inv + k, op.also_slot[j] = fp8_inv_slot(k);
}

// count entries of n elements (fp8_rows_kernel): dst NULL: amax only; amax NULL: codes only.
template <typename T, Fp8Format F>
void fp8_rows(uint8_t *dst, size_t dst_stride, const T *src, size_t src_stride, size_t n, int count,
              Fp8Operand op, float *amax) {
    if (n == 0 || count <= 0) return;
    if (count > 65535) t5_fail("cuda fp8: %d weights in one call exceed the grid limit (65535)", count);
    const bool vec = n % 8 == 0 && aligned16(src) && (count == 1 || src_stride * sizeof(T) % 16 == 0) &&
                     (!dst || (((uintptr_t)dst & 7) == 0 && (count == 1 || dst_stride % 8 == 0)));
    const dim3 grid(grid_stride_blocks(vec ? n / 8 : n, FP8_THREADS), (unsigned)count);
    if (dst && amax)
        fp8_rows_kernel<T, F, true, true><<<grid, FP8_THREADS, 0, t5_stream()>>>(
            dst, dst_stride, src, src_stride, n, op, amax, vec);
    else if (dst)
        fp8_rows_kernel<T, F, true, false><<<grid, FP8_THREADS, 0, t5_stream()>>>(
            dst, dst_stride, src, src_stride, n, op, amax, vec);
    else
        fp8_rows_kernel<T, F, false, true><<<grid, FP8_THREADS, 0, t5_stream()>>>(
            dst, dst_stride, src, src_stride, n, op, amax, vec);
    cudaLaunchCheck();
}

// The fast pass (fp8_cast_transpose_kernel) over src's (R, C) values: tr (C, ld_tr) when not
// NULL (then ld_tr % 16 == 0, tr 16-byte aligned, ld_tr >= R), rm (R, C) when not NULL (8-byte
// aligned); C % 8 == 0 and src's rows 16-byte aligned; amax NULL: no reduction.
template <typename T, Fp8Format F, class Src>
void fp8_cast_transpose(uint8_t *tr, int ld_tr, uint8_t *rm, Src src, int R, int C, Fp8Operand op, float *amax) {
    if (R <= 0 || C <= 0) return;
    const int rows = tr ? ld_tr : R;
    const dim3 grid((unsigned)CEIL_DIV(C, FP8_CT_COLS), (unsigned)CEIL_DIV(rows, FP8_CT_ROWS));
    if (grid.y > 65535) t5_fail("cuda fp8: %d rows exceed the transpose's grid limit (%d)", rows, 65535 * FP8_CT_ROWS);
    if (amax)
        fp8_cast_transpose_kernel<T, F, true, Src><<<grid, FP8_THREADS, 0, t5_stream()>>>(
            tr, ld_tr, rm, src, R, C, op, amax);
    else
        fp8_cast_transpose_kernel<T, F, false, Src><<<grid, FP8_THREADS, 0, t5_stream()>>>(
            tr, ld_tr, rm, src, R, C, op, amax);
    cudaLaunchCheck();
}

// src (R, C) -> tr (C, ld_tr) and rm (R, C) when not NULL (the fast pass where the shapes
// allow, else fp8_transpose_kernel); amax NULL: no reduction.
template <typename T, Fp8Format F>
void fp8_transpose(uint8_t *tr, int ld_tr, uint8_t *rm, const T *src, int R, int C, Fp8Operand op, float *amax) {
    if (R <= 0 || C <= 0) return;
    const bool vec_in = C % 8 == 0 && aligned16(src) && (!rm || ((uintptr_t)rm & 7) == 0);
    const bool vec_out = ld_tr % 16 == 0 && aligned16(tr);
    if (vec_in && vec_out) {
        fp8_cast_transpose<T, F>(tr, ld_tr, rm, Fp8SrcPlain<T>{src, C}, R, C, op, amax);
        return;
    }
    const dim3 grid((unsigned)CEIL_DIV(C, FP8_TILE), (unsigned)CEIL_DIV(ld_tr, FP8_TILE));
    if (grid.y > 65535) t5_fail("cuda fp8: %d rows exceed the transpose's grid limit (%d)", ld_tr, 65535 * FP8_TILE);
    if (amax)
        fp8_transpose_kernel<T, F, true><<<grid, FP8_THREADS, 0, t5_stream()>>>(
            tr, ld_tr, rm, src, R, C, op, amax, vec_in, vec_out);
    else
        fp8_transpose_kernel<T, F, false><<<grid, FP8_THREADS, 0, t5_stream()>>>(
            tr, ld_tr, rm, src, R, C, op, amax, vec_in, vec_out);
    cudaLaunchCheck();
}

void fp8_scale_current(Fp8Scales s, int mask) {
    fp8_scale_current_kernel<<<1, 32, 0, t5_stream()>>>(s, mask);
    cudaLaunchCheck();
}

// The amax a rounding pass reduces into: operand k's in delayed mode, none in current mode
// (its amax pass ran first).
float *fp8_fused_amax(Fp8Scales s, int k) { return s.current ? NULL : s.amax + k; }

// ---- the ops ----------------------------------------------------------------------------------

// Whether the forward rounds its weight now: always, unless the step's codes are kept
// (Fp8Scales.w4) and an earlier forward of this step rounded them.
bool fp8_weight_rounds(Fp8Scales s) { return !s.w4 || s.w_round; }

// The forward's input operand: with the step's weight codes read as kept, its pass also stages
// the weight's inverse scale.
Fp8Operand fp8_input_operand(Fp8Scales s) {
    Fp8Operand op = fp8_operand(s, FP8_INP);
    if (!fp8_weight_rounds(s)) fp8_operand_stage(op, s, FP8_WEIGHT);
    return op;
}

// The forward's weights (count at w + z * weight_stride) rounded into the scratch's w4, or
// into the step's kept codes (s.w4 and its transpose s.w4t, one pass) or read from them; then
// the GEMM out_z = q4 w4_z^T, q4 (N, I) in the scratch already.
template <typename T>
void fp8_forward_gemm(Dtype dt, void *out, size_t out_stride, const uint8_t *q4, uint8_t *w4, const T *w,
                      size_t weight_stride, int N, int I, int O, int count, Fp8Scales s) {
    const size_t oi = (size_t)O * I;
    if (s.w4) {
        if (count > 1 && weight_stride != oi)
            t5_fail("cuda fp8: kept weight codes need the %d weights adjacent (stride %zu, not %zu)", count,
                    weight_stride, oi);
        if (s.w_round)
            fp8_transpose<T, FP8_E4M3>(s.w4t, count * O, s.w4, w, count * O, I, fp8_operand(s, FP8_WEIGHT),
                                       fp8_fused_amax(s, FP8_WEIGHT));
        w4 = s.w4;
    } else {
        fp8_rows<T, FP8_E4M3>(w4, oi, w, weight_stride, oi, count, fp8_operand(s, FP8_WEIGHT),
                              fp8_fused_amax(s, FP8_WEIGHT));
    }
    cuda_gemm_fp8(dt, O, N, I, w4, FP8_E4M3, I, (long long)oi, fp8_inv_slot(FP8_WEIGHT), q4, FP8_E4M3, I, 0,
                  fp8_inv_slot(FP8_INP), out, O, (long long)out_stride, count, 0, 1);
}

template <typename T>
void fp8_forward(Dtype dt, void *out, size_t out_stride, const void *inp, const void *weight, size_t weight_stride,
                 int N, int I, int O, int count, Fp8Scales s) {
    if (N <= 0 || O <= 0 || count <= 0) return;
    if (I <= 0) {  // empty sums; nothing read
        for (int z = 0; z < count; z++)
            cudaCheck(cudaMemsetAsync((T *)out + z * out_stride, 0, (size_t)N * O * sizeof(T), t5_stream()));
        return;
    }
    const size_t ni = (size_t)N * I, oi = (size_t)O * I;
    uint8_t *q4 = (uint8_t *)cuda_scratch_reserve(CUDA_SCRATCH_FP8, fp8_scratch_bytes(N, I, O, count));  // (N, I)
    uint8_t *w4 = q4 + FP8_REGION(ni);  // (count*O, I)
    const T *x = (const T *)inp, *w = (const T *)weight;
    const bool wround = fp8_weight_rounds(s);
    if (s.current) {
        fp8_rows<T, FP8_E4M3>(NULL, 0, x, 0, ni, 1, FP8_AMAX_ONLY, s.amax + FP8_INP);
        if (wround) fp8_rows<T, FP8_E4M3>(NULL, 0, w, weight_stride, oi, count, FP8_AMAX_ONLY, s.amax + FP8_WEIGHT);
        fp8_scale_current(s, 1 << FP8_INP | (wround ? 1 << FP8_WEIGHT : 0));
    }
    if (s.inp_t)  // q4 for this product and its transpose kept for the backward, one pass
        fp8_transpose<T, FP8_E4M3>(s.inp_t, (int)fp8_rows_padded(N), q4, x, N, I, fp8_input_operand(s),
                                   fp8_fused_amax(s, FP8_INP));
    else
        fp8_rows<T, FP8_E4M3>(q4, 0, x, 0, ni, 1, fp8_input_operand(s), fp8_fused_amax(s, FP8_INP));
    fp8_forward_gemm<T>(dt, out, out_stride, q4, w4, w, weight_stride, N, I, O, count, s);
}

// The backward's scratch: g5 (N, O) | g5^T (O, N16) | w4^T (I, O) | q4^T (I, N16).
struct Fp8Backward {
    uint8_t *g5, *g5t, *w4t, *q4t;
};
Fp8Backward fp8_backward_scratch(int N, int I, int O) {
    const size_t no = (size_t)N * O, N16 = fp8_rows_padded(N);
    Fp8Backward b;
    b.g5 = (uint8_t *)cuda_scratch_reserve(CUDA_SCRATCH_FP8, fp8_scratch_bytes(N, I, O, 1));
    b.g5t = b.g5 + FP8_REGION(no);
    b.w4t = b.g5t + FP8_REGION((size_t)O * N16);
    b.q4t = b.w4t + FP8_REGION((size_t)I * O);
    return b;
}

// The GRAD operand's pass: g5 for dinp, g5^T for dweight (one pass when both). With the
// forward's input kept (the weight gradient reads it) or the step's weight codes (dinp reads
// them), the pass also stages their inverse scales.
Fp8Operand fp8_grad_operand(Fp8Scales s, const void *dinp, const void *dweight) {
    Fp8Operand op = fp8_operand(s, FP8_GRAD);
    if (dweight && s.inp_t) fp8_operand_stage(op, s, FP8_INP);
    if (dinp && s.w4t) fp8_operand_stage(op, s, FP8_WEIGHT);
    return op;
}

// The two products from g5 / g5^T (in b already): dinp (N,I) (+)= g5 w4 with W (O, I) -> w4^T
// (I, O); dW (O,I) += g5^T q4 with inp (N, I) -> q4^T (I, N16), or the forward's kept copy.
template <typename T>
void fp8_backward_gemms(Dtype dt, void *dinp, void *dweight, const T *x, const T *w, int N, int I, int O,
                        int dinp_set, Fp8Scales s, Fp8Backward b) {
    const int N16 = (int)fp8_rows_padded(N);
    if (dinp) {
        const uint8_t *w4t = s.w4t;  // the step's kept codes: scale and amax the forward's, slot staged
        if (!w4t) {
            fp8_transpose<T, FP8_E4M3>(b.w4t, O, NULL, w, O, I, fp8_operand(s, FP8_WEIGHT),
                                       fp8_fused_amax(s, FP8_WEIGHT));
            w4t = b.w4t;
        }
        cuda_gemm_fp8(dt, I, N, O, w4t, FP8_E4M3, O, 0, fp8_inv_slot(FP8_WEIGHT), b.g5, FP8_E5M2, O, 0,
                      fp8_inv_slot(FP8_GRAD), dinp, I, 0, 1, !dinp_set, 0);
    }
    if (dweight) {
        const uint8_t *q4t = s.inp_t;  // kept: its scale and amax are the forward's, its slot staged by the GRAD pass
        if (!q4t) {
            fp8_transpose<T, FP8_E4M3>(b.q4t, N16, NULL, x, N, I, fp8_operand(s, FP8_INP), fp8_fused_amax(s, FP8_INP));
            q4t = b.q4t;
        }
        cuda_gemm_fp8(dt, I, O, N16, q4t, FP8_E4M3, N16, 0, fp8_inv_slot(FP8_INP), b.g5t, FP8_E5M2, N16, 0,
                      fp8_inv_slot(FP8_GRAD), dweight, I, 0, 1, 1, 0);
    }
}

// Only the operands a product reads are reduced and rounded (as the CPU's): GRAD always,
// WEIGHT when dinp is set, INP when dweight is set.
template <typename T>
void fp8_backward(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp, const void *weight, int N,
                  int I, int O, int dinp_set, Fp8Scales s) {
    if (N <= 0 || I <= 0 || O <= 0) {  // empty operands: only dinp = (empty sum) needs writing
        if (dinp && dinp_set && N > 0 && I > 0)
            cudaCheck(cudaMemsetAsync(dinp, 0, (size_t)N * I * sizeof(T), t5_stream()));
        return;
    }
    const size_t no = (size_t)N * O;
    const Fp8Backward b = fp8_backward_scratch(N, I, O);
    const T *g = (const T *)dout, *x = (const T *)inp, *w = (const T *)weight;
    const bool round_inp = dweight && !s.inp_t;  // kept by the forward: its scale and amax stand
    const bool round_w = dinp && !s.w4t;         // likewise the step's weight codes
    if (s.current) {
        fp8_rows<T, FP8_E5M2>(NULL, 0, g, 0, no, 1, FP8_AMAX_ONLY, s.amax + FP8_GRAD);
        if (round_w) fp8_rows<T, FP8_E4M3>(NULL, 0, w, 0, (size_t)O * I, 1, FP8_AMAX_ONLY, s.amax + FP8_WEIGHT);
        if (round_inp) fp8_rows<T, FP8_E4M3>(NULL, 0, x, 0, (size_t)N * I, 1, FP8_AMAX_ONLY, s.amax + FP8_INP);
        fp8_scale_current(s, 1 << FP8_GRAD | (round_w ? 1 << FP8_WEIGHT : 0) | (round_inp ? 1 << FP8_INP : 0));
    }
    if (!dinp && !dweight) {  // nothing to compute; the GRAD amax still counts
        if (!s.current) fp8_rows<T, FP8_E5M2>(NULL, 0, g, 0, no, 1, FP8_AMAX_ONLY, s.amax + FP8_GRAD);
        return;
    }
    if (dweight)
        fp8_transpose<T, FP8_E5M2>(b.g5t, (int)fp8_rows_padded(N), dinp ? b.g5 : NULL, g, N, O,
                                   fp8_grad_operand(s, dinp, dweight), fp8_fused_amax(s, FP8_GRAD));
    else
        fp8_rows<T, FP8_E5M2>(b.g5, 0, g, 0, no, 1, fp8_grad_operand(s, dinp, dweight), fp8_fused_amax(s, FP8_GRAD));
    fp8_backward_gemms<T>(dt, dinp, dweight, x, w, N, I, O, dinp_set, s, b);
}

// ---- the ReLU FFN's linears with the activation in the rounding pass ----------------------------
// fp8_relu_drop_matmul_forward / _backward (backend.h): where the fast pass applies (delayed
// scaling, C % 8 == 0, 16-byte aligned rows; the forward also needs the kept input, since h is
// never stored), the activation's values go straight from the pass that computes them to fp8
// (Fp8SrcReluDrop, Fp8SrcReluDropGrad); otherwise the two ops run in turn through a scratch
// buffer (CUDA_SCRATCH_FP8_ACT) for h or da. Either way bitwise the two ops.

template <typename T>
void fp8_relu_forward(Dtype dt, void *out, uint8_t *bits, const void *a, const void *weight, int N, int I, int O,
                      DropoutArgs drop, Fp8Scales s) {
    const size_t ni = (size_t)N * I;
    const bool fast = N > 0 && I > 0 && O > 0 && !s.current && s.inp_t && I % 8 == 0 && aligned16(a) &&
                      aligned16(s.inp_t);
    if (!fast) {
        void *h = cuda_scratch_reserve(CUDA_SCRATCH_FP8_ACT, ni * sizeof(T) + 16);
        cuda_relu_drop_forward(dt, h, bits, a, ni, drop);
        fp8_forward<T>(dt, out, 0, h, weight, 0, N, I, O, 1, s);
        return;
    }
    uint8_t *q4 = (uint8_t *)cuda_scratch_reserve(CUDA_SCRATCH_FP8, fp8_scratch_bytes(N, I, O, 1));  // (N, I)
    fp8_cast_transpose<T, FP8_E4M3>(s.inp_t, (int)fp8_rows_padded(N), q4,
                                    Fp8SrcReluDrop<T>{(const T *)a, bits, point_drop(drop), I}, N, I,
                                    fp8_input_operand(s), s.amax + FP8_INP);
    fp8_forward_gemm<T>(dt, out, 0, q4, q4 + FP8_REGION(ni), (const T *)weight, 0, N, I, O, 1, s);
}

template <typename T>
void fp8_relu_backward(Dtype dt, void *dinp, void *dweight, const void *dh, const uint8_t *bits, const void *inp,
                       const void *weight, int N, int I, int O, int dinp_set, DropoutArgs drop, Fp8Scales s) {
    const size_t no = (size_t)N * O;
    const bool fast =
        N > 0 && I > 0 && O > 0 && !s.current && (dinp || dweight) && O % 8 == 0 && aligned16(dh);
    if (!fast) {
        void *da = cuda_scratch_reserve(CUDA_SCRATCH_FP8_ACT, no * sizeof(T) + 16);
        cuda_relu_drop_backward(dt, da, dh, bits, no, drop, 1);
        fp8_backward<T>(dt, dinp, dweight, da, inp, weight, N, I, O, dinp_set, s);
        return;
    }
    const Fp8Backward b = fp8_backward_scratch(N, I, O);
    fp8_cast_transpose<T, FP8_E5M2>(dweight ? b.g5t : NULL, (int)fp8_rows_padded(N), dinp ? b.g5 : NULL,
                                    Fp8SrcReluDropGrad<T>{(const T *)dh, bits, point_drop(drop), O}, N, O,
                                    fp8_grad_operand(s, dinp, dweight), s.amax + FP8_GRAD);
    fp8_backward_gemms<T>(dt, dinp, dweight, (const T *)inp, (const T *)weight, N, I, O, dinp_set, s, b);
}
}  // namespace

// ---- entry points (cuda_ops.h) -------------------------------------------------------------------

extern "C" void cuda_fp8_matmul_forward(Dtype dt, void *out, size_t out_stride, const void *inp, const void *weight,
                                        size_t weight_stride, int N, int I, int O, int count, Fp8Scales s) {
    DISPATCH_DTYPE(dt, fp8_forward, dt, out, out_stride, inp, weight, weight_stride, N, I, O, count, s);
}

extern "C" void cuda_fp8_matmul_backward(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp,
                                         const void *weight, int N, int I, int O, int dinp_set, Fp8Scales s) {
    DISPATCH_DTYPE(dt, fp8_backward, dt, dinp, dweight, dout, inp, weight, N, I, O, dinp_set, s);
}

extern "C" void cuda_fp8_scales_update(float *scale, float *inv, float *amax, float *history, int n, int hist_len,
                                       int col, int margin) {
    if (n <= 0) return;
    if (hist_len < 1 || col < 0 || col >= hist_len)
        t5_fail("cuda fp8_scales_update: column %d outside the amax history of %d steps", col, hist_len);
    const int entries = n * FP8_OPERANDS, threads = 256;
    const unsigned blocks = (unsigned)CEIL_DIV((size_t)entries * 32, (size_t)threads);
    fp8_scales_update_kernel<<<blocks, threads, 0, t5_stream()>>>(scale, inv, amax, history, entries, hist_len, col,
                                                                  margin);
    cudaLaunchCheck();
}

extern "C" void cuda_fp8_relu_drop_matmul_forward(Dtype dt, void *out, uint8_t *bits, const void *a, const void *weight,
                                                  int N, int I, int O, DropoutArgs drop, Fp8Scales s) {
    DISPATCH_DTYPE(dt, fp8_relu_forward, dt, out, bits, a, weight, N, I, O, drop, s);
}

extern "C" void cuda_fp8_relu_drop_matmul_backward(Dtype dt, void *dinp, void *dweight, const void *dh,
                                                   const uint8_t *bits, const void *inp, const void *weight, int N,
                                                   int I, int O, int dinp_set, DropoutArgs drop, Fp8Scales s) {
    DISPATCH_DTYPE(dt, fp8_relu_backward, dt, dinp, dweight, dh, bits, inp, weight, N, I, O, dinp_set, drop, s);
}
