// kernels/dropout_rng.h: the counter-based dropout RNG shared by every backend, so a
// CUDA kernel draws exactly the mask the CPU reference draws.
//
// Element `index` of a call with seed `seed` draws 16 bits: lane index % 4 of splitmix64
// output number index/4 + 1 of the stream keyed by mix(seed), so one 64-bit hash serves
// four neighbouring elements (the attention softmax draws once per 4 keys: the RNG's
// multiplies were what bounded those kernels). u = bits / 2^16 in [0,1); the element is
// kept when u >= p (so p is effectively rounded up to a multiple of 2^-16: FlashAttention
// uses 8 bits), and a kept value is multiplied by 1/(1-p) (fp32, as torch's
// noise.div_(1 - p)). The mask is a pure function of (seed, index): backward recomputes
// it, and a run's dropout state is one integer. p == 0 never touches the RNG.
#pragma once
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DROPOUT_RNG_FN __host__ __device__ static inline
#else
#define DROPOUT_RNG_FN static inline
#endif

#define DROPOUT_RNG_GAMMA 0x9E3779B97F4A7C15ULL

// splitmix64's output function (Steele, Lea, Flood 2014)
DROPOUT_RNG_FN uint64_t dropout_rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// The per-seed half, computed once per call.
DROPOUT_RNG_FN uint64_t dropout_rng_key(uint64_t seed) { return dropout_rng_mix64(seed + DROPOUT_RNG_GAMMA); }

// The counter a group's bits are the hash of (mod 2^64): group + d has counter + d GAMMA, so a
// kernel stepping through groups adds instead of multiplying (attention_tile_dropout.cuh).
DROPOUT_RNG_FN uint64_t dropout_rng_counter(uint64_t key, uint64_t group) { return key + (group + 1) * DROPOUT_RNG_GAMMA; }

// The 64 bits of elements 4*group .. 4*group+3.
DROPOUT_RNG_FN uint64_t dropout_rng_bits(uint64_t key, uint64_t group) {
    return dropout_rng_mix64(dropout_rng_counter(key, group));
}

// u of the element in lane (0..3) of a group's bits.
DROPOUT_RNG_FN float dropout_rng_lane(uint64_t bits, unsigned lane) {
    return (float)((bits >> (16u * lane)) & 0xFFFFu) * 0x1.0p-16f;
}

// The keep test u >= p as an integer compare on the lane's 16 bits k: u = k 2^-16 is exact and
// so is p 2^16 (a power-of-two scale of a float), so u >= p exactly when k >= ceil(p 2^16). The
// attention tile kernels take this form (no int-to-float conversion a draw); tests/test_dropout_rng.c
// checks it against the float test for every k at many p. p <= 0: 0 (every draw kept); p = 1:
// 65536 (none kept, as u < 1).
DROPOUT_RNG_FN uint32_t dropout_rng_threshold(float p) { return p > 0.0f ? (uint32_t)ceilf(p * 65536.0f) : 0u; }

DROPOUT_RNG_FN float dropout_rng_uniform_keyed(uint64_t key, uint64_t index) {
    return dropout_rng_lane(dropout_rng_bits(key, index >> 2), (unsigned)(index & 3u));
}

DROPOUT_RNG_FN float dropout_rng_uniform(uint64_t seed, uint64_t index) {
    return dropout_rng_uniform_keyed(dropout_rng_key(seed), index);
}

DROPOUT_RNG_FN float dropout_rng_scale(float p) { return 1.0f / (float)(1.0 - (double)p); }
