// kernels/init_rng.h: the counter-based normal draws of the random init
// (model/params.c params_init_random), shared by every backend so the CUDA backend makes
// the CPU's weights where they live (backend.h init_random) instead of copying them.
//
// Element j of a tensor keyed `key` (a hash of the seed and the tensor's name, params.c)
// is lane j % 2 of Box-Muller pair j / 2, whose two uniforms are splitmix64 outputs
// number 2p and 2p+1 of the key. Everything is double until the final (float)(z * std).
// The CPU (glibc) and CUDA give the same float except, rarely (a few elements of a
// t5-large), by one unit in the last place: CUDA's double log, sin and cos are within 1-2
// units of the last double place of glibc's, which moves a float rounding only when the
// double lies that close to a rounding boundary (tests/gpu/test_cuda_model.c counts them).
#pragma once
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define INIT_RNG_FN __host__ __device__ static inline
#else
#define INIT_RNG_FN static inline
#endif

// splitmix64 (Steele, Lea, Flood 2014): the state step and the output function.
INIT_RNG_FN uint64_t init_rng_splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Box-Muller on two uniforms from the counter pair p; fills out[0..1] ~ N(0,1).
INIT_RNG_FN void init_rng_normal_pair(uint64_t key, uint64_t p, double out[2]) {
    uint64_t a = init_rng_splitmix64(key + 2 * p), b = init_rng_splitmix64(key + 2 * p + 1);
    double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]: log is finite
    double u2 = (double)(b >> 11) * 0x1.0p-53;          // [0, 1)
    double r = sqrt(-2.0 * log(u1));
    out[0] = r * cos(2.0 * M_PI * u2);
    out[1] = r * sin(2.0 * M_PI * u2);
}

// Element j of the tensor: its normal draw times std, as a float.
INIT_RNG_FN float init_rng_value(uint64_t key, uint64_t j, double std) {
    double z[2];
    init_rng_normal_pair(key, j / 2, z);
    return (float)(z[j % 2] * std);
}
