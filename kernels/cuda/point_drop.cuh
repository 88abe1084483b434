// kernels/cuda/point_drop.cuh: dropout inside pointwise kernels (elementwise.cu,
// ffn_act.cu), one definition of "element i of a call with this seed is kept and scaled".
// The mask is kernels/dropout_rng.h's (the CPU reference draws the same); a kept value is
// multiplied by dropout_rng_scale(p) in fp32 and stored in the activation dtype T.
#pragma once
#include "../dropout_rng.h"
#include "common.cuh"

struct PointDrop {
    float p, scale;  // p == 0: no dropout
    uint64_t key;    // dropout_rng_key(seed)
    __device__ __forceinline__ bool keep(size_t i) const { return dropout_rng_uniform_keyed(key, i) >= p; }
    // keep flags of elements i .. i+V-1. A pack of V % 4 == 0 starts at a multiple of V
    // (pointwise_kernel's packs), so it spans whole groups of 4: one hash per 4 elements
    // instead of one per element (the hash's 64-bit multiplies bounded these kernels).
    template <int V> __device__ __forceinline__ void keep_pack(size_t i, bool kp[V]) const {
        if constexpr (V % 4 == 0) {
#pragma unroll
            for (int g = 0; g < V / 4; g++) {
                const uint64_t bits = dropout_rng_bits(key, (i >> 2) + (size_t)g);
#pragma unroll
                for (int l = 0; l < 4; l++) kp[4 * g + l] = dropout_rng_lane(bits, (unsigned)l) >= p;
            }
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) kp[k] = keep(i + k);
        }
    }
    // dropout_forward's stored value of x (already a T value) with keep flag `kept`
    template <typename T> __device__ __forceinline__ float value_kept(float x, bool kept) const {
        return kept ? round_to<T>(__fmul_rn(x, scale)) : 0.0f;
    }
};

// The device form of DropoutArgs; a p outside [0, 1] is refused with the config hint.
static inline PointDrop point_drop(DropoutArgs d) {
    if (!(d.p >= 0.0f && d.p <= 1.0f)) t5_fail("dropout probability %g is outside [0, 1]; set dropout_rate in [0, 1)", d.p);
    return PointDrop{d.p, d.p > 0.0f ? dropout_rng_scale(d.p) : 1.0f, dropout_rng_key(d.seed)};
}
