// kernels/dropout_rng.h: the counter-based dropout RNG shared by every backend, so a
// CUDA kernel draws exactly the mask the CPU reference draws.
//
// Element `index` of a call with seed `seed` draws
//   u = top 24 bits of splitmix64 output number index+1 of the stream keyed by mix(seed)
// as a float in [0,1) (exact multiples of 2^-24). The element is kept when u >= p and a
// kept value is multiplied by 1/(1-p) (fp32, as torch's noise.div_(1 - p)). The mask is
// a pure function of (seed, index): backward recomputes it, and a run's dropout state is
// one integer. p == 0 never touches the RNG.
#pragma once
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

DROPOUT_RNG_FN float dropout_rng_uniform(uint64_t seed, uint64_t index) {
    uint64_t key = dropout_rng_mix64(seed + DROPOUT_RNG_GAMMA);
    uint64_t z = dropout_rng_mix64(key + (index + 1) * DROPOUT_RNG_GAMMA);
    return (float)(z >> 40) * 0x1.0p-24f;
}

DROPOUT_RNG_FN float dropout_rng_scale(float p) { return 1.0f / (float)(1.0 - (double)p); }
