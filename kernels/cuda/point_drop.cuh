// kernels/cuda/point_drop.cuh: dropout inside pointwise kernels (elementwise.cu,
// ffn_act.cu), one definition of "element i of a call with this seed is kept and scaled".
// The mask is kernels/dropout_rng.h's (the CPU reference draws the same); a kept value is
// multiplied by dropout_rng_scale(p) in fp32 and stored in the activation dtype T.
#pragma once
#include "../dropout_rng.h"
#include "common.cuh"

struct PointDrop {
    float p, scale;  // p == 0: no dropout
    uint64_t seed;
    __device__ __forceinline__ bool keep(size_t i) const { return dropout_rng_uniform(seed, i) >= p; }
    // dropout_forward's stored value of x at element i (x already a T value)
    template <typename T> __device__ __forceinline__ float value(float x, size_t i) const {
        return keep(i) ? round_to<T>(__fmul_rn(x, scale)) : 0.0f;
    }
};

// The device form of DropoutArgs; a p outside [0, 1] is refused with the config hint.
static inline PointDrop point_drop(DropoutArgs d) {
    if (!(d.p >= 0.0f && d.p <= 1.0f)) t5_fail("dropout probability %g is outside [0, 1]; set dropout_rate in [0, 1)", d.p);
    return PointDrop{d.p, d.p > 0.0f ? dropout_rng_scale(d.p) : 1.0f, d.seed};
}
