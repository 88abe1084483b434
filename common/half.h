// common/half.h: fp16 and bf16 <-> fp32 conversions (round to nearest even, nan kept
// quiet), inline so that loops over large buffers (checkpoint I/O, the offloaded optimizer)
// vectorize. formats/safetensors.h exports them as st_*.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t half_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float half_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float half_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    if (exp == 0x1F) return half_bits_f32(sign | 0x7F800000u | (man << 13));  // inf, nan (payload kept)
    if (exp != 0) return half_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0) return half_bits_f32(sign);  // +-0
    uint32_t e = 113;                     // subnormal: normalize
    while (!(man & 0x400)) {
        man <<= 1;
        e--;
    }
    return half_bits_f32(sign | (e << 23) | ((man & 0x3FF) << 13));
}

static inline uint16_t half_f32_to_f16(float f) {
    uint32_t x = half_f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));  // nan stays (quiet) nan
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00);  // >= 65520 rounds to inf (and inf)
    if (ax >= 0x38800000u) {                                   // normal half
        uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1FFF;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    if (ax <= 0x33000000u) return (uint16_t)sign;  // <= 2^-25: ties to even (zero)
    // subnormal half: value = m * 2^(e-150), unit 2^-24, so shift by 126 - e (14..24)
    uint32_t e = ax >> 23, m = (ax & 0x7FFFFF) | 0x800000, shift = 126 - e;
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float half_bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline uint16_t half_f32_to_bf16(float f) {
    uint32_t x = half_f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet nan, never inf
    x += 0x7FFF + ((x >> 16) & 1);  // round to nearest even; overflow carries into inf
    return (uint16_t)(x >> 16);
}

// n fp32 values narrowed to bf16 (bf16 != 0) or fp16, in parallel (weights going to a
// 16-bit device copy).
static inline void half_from_f32_array(uint16_t *dst, const float *src, size_t n, int bf16) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = bf16 ? half_f32_to_bf16(src[i]) : half_f32_to_f16(src[i]);
}
