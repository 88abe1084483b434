// kernels/fp8_format.h: the two 8-bit float formats of --fp8 (OCP FP8, as NVIDIA's
// __nv_fp8_e4m3 / __nv_fp8_e5m2), their rounding and the delayed-scaling rule, shared by
// every backend so the CPU reference rounds exactly as the GPU's cvt instruction does
// (tests/gpu/test_backend_ops checks the two bit for bit).
//
//   e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; largest finite 448, no infinity,
//         NaN = S.1111.111; smallest subnormal 2^-9. Weights and activations.
//   e5m2: sign, 5 exponent bits (bias 15), 2 mantissa bits; largest finite 57344, infinity
//         S.11111.00, NaN S.11111.xx; smallest subnormal 2^-16. Gradients (more range).
// Encoding is round to nearest, ties to even, then saturation to the largest finite
// (cvt.rn.satfinite): anything larger in magnitude, infinity included, becomes +-max;
// NaN stays NaN (0x7F with the sign).
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"  // FP8_INP, FP8_WEIGHT, FP8_GRAD

#ifdef __CUDACC__
#define FP8_FN __host__ __device__ static inline
#else
#define FP8_FN static inline
#endif

typedef enum { FP8_E4M3 = 0, FP8_E5M2 = 1 } Fp8Format;

#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f

FP8_FN float fp8_format_max(Fp8Format f) { return f == FP8_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }
FP8_FN int fp8_format_mantissa_bits(Fp8Format f) { return f == FP8_E4M3 ? 3 : 2; }
FP8_FN int fp8_format_bias(Fp8Format f) { return f == FP8_E4M3 ? 7 : 15; }

// x (fp32) -> the 8-bit code, round to nearest even, saturating.
FP8_FN uint8_t fp8_encode(float x, Fp8Format f) {
    const int man = fp8_format_mantissa_bits(f), bias = fp8_format_bias(f);
    const uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (isnan(x)) return (uint8_t)(sign | 0x7F);
    const float a = fabsf(x), maxv = fp8_format_max(f);
    if (a >= maxv) return (uint8_t)(sign | (f == FP8_E4M3 ? 0x7E : 0x7B));  // +-max (and infinity)
    if (a == 0.0f) return sign;
    int E;
    frexpf(a, &E);                     // a = frac * 2^E, frac in [0.5, 1); a = 0 gives E = 0
    int e = E - 1;                     // a in [2^e, 2^(e+1))
    if (e < 1 - bias) e = 1 - bias;    // subnormals share the smallest normal's quantum
    const float q = rintf(ldexpf(a, man - e));  // exact scaling by a power of two, then ties to even
    // q in [0, 2^(man+1)]: q == 2^(man+1) rounds up into the next binade (code arithmetic carries)
    const int code = (e - (1 - bias)) * (1 << man) + (int)q;  // subnormal codes q < 2^man at e = 1 - bias
    const int maxcode = f == FP8_E4M3 ? 0x7E : 0x7B;
    return (uint8_t)(sign | (code > maxcode ? maxcode : code));
}

// The 8-bit code -> its value in fp32 (exact).
FP8_FN float fp8_decode(uint8_t c, Fp8Format f) {
    const int man = fp8_format_mantissa_bits(f), bias = fp8_format_bias(f);
    const int e = (c & 0x7F) >> man, m = c & ((1 << man) - 1);
    const float s = (c & 0x80) ? -1.0f : 1.0f;
    if (f == FP8_E4M3 && (c & 0x7F) == 0x7F) return NAN;
    if (f == FP8_E5M2 && e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexpf((float)m, 1 - bias - man);
    return s * ldexpf((float)((1 << man) + m), e - bias - man);
}

// x rounded to format f's grid after scaling, back in fp32: fp8_decode(fp8_encode(x * scale)).
FP8_FN float fp8_round_scaled(float x, float scale, Fp8Format f) { return fp8_decode(fp8_encode(x * scale, f), f); }

// Delayed scaling (Transformer Engine's recipe): the scale that maps amax onto the format's
// largest finite, 2^-margin below it. amax 0 or not finite: `keep` (the previous scale).
FP8_FN float fp8_scale_from_amax(float amax, Fp8Format f, int margin, float keep) {
    if (!(amax > 0.0f) || !isfinite(amax)) return keep;
    const float s = ldexpf(fp8_format_max(f) / amax, -margin);
    return isfinite(s) ? s : keep;
}

// The format of operand kind k (FP8_INP, FP8_WEIGHT, FP8_GRAD of kernels/backend.h).
FP8_FN Fp8Format fp8_operand_format(int k) { return k == FP8_GRAD ? FP8_E5M2 : FP8_E4M3; }

// The scratch bytes of one fp8_matmul call (the CUDA backend's rounded copies; the memory
// planner counts the largest over the model's linears). Each region starts on 256 bytes;
// transposed copies have rows of N padded to a multiple of 16 (cuBLASLt's fp8 leading
// dimensions), the padding zero:
//   forward   q4 (N, I) | w4 (count * O, I)
//   backward  g5 (N, O) | g5^T (O, N16) | w4^T (I, O) | q4^T (I, N16)
#define FP8_REGION(b) ((((size_t)(b)) + 255) / 256 * 256)
FP8_FN size_t fp8_rows_padded(size_t N) { return (N + 15) / 16 * 16; }
FP8_FN size_t fp8_scratch_bytes(size_t N, size_t I, size_t O, size_t count) {
    const size_t N16 = fp8_rows_padded(N);
    const size_t fwd = FP8_REGION(N * I) + FP8_REGION(count * O * I);
    const size_t bwd = FP8_REGION(N * O) + FP8_REGION(O * N16) + FP8_REGION(I * O) + FP8_REGION(I * N16);
    return fwd > bwd ? fwd : bwd;
}
