// kernels/cuda/relu_drop.cuh: the plain ReLU FFN's activation with its keep bits, 8 elements
// at a time (backend.h relu_drop_forward / relu_drop_backward), one definition for the two
// kernels that compute it: ffn_act.cu (the values stored in the activation dtype) and fp8.cu
// (the same values rounded straight to fp8: fp8_relu_drop_matmul_forward / _backward).
// Elements i .. i+7 of the flat tensor, i a multiple of 8; their keep byte is bits[i / 8],
// bit k (least significant first) set where element i+k holds a kept positive value.
#pragma once
#include "point_drop.cuh"

// x (8, values of a) -> y: relu, then dropout_forward of the rounded result, each y[k] the
// value the activation dtype T stores (round_to<T>); returns the keep byte.
template <typename T>
__device__ __forceinline__ unsigned relu_drop_values8(const float (&x)[8], size_t i, const PointDrop &drop,
                                                      float (&y)[8]) {
    bool kp[8];
    if (drop.p > 0.0f) {
        drop.keep_pack<8>(i, kp);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) kp[k] = true;
    }
    unsigned byte = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        y[k] = x[k] > 0.0f ? x[k] : 0.0f;
        if (drop.p > 0.0f) y[k] = drop.value_kept<T>(round_to<T>(y[k]), kp[k]);
        byte |= (unsigned)(x[k] > 0.0f && kp[k]) << k;
    }
    return byte;
}

// g (8, dout) and the keep byte -> v: the gradient of each element (before any accumulation):
// dropout_backward(g) into zeros where the bit is set, 0 elsewhere (not yet rounded at p = 0:
// g is a T value then).
template <typename T>
__device__ __forceinline__ void relu_drop_grads8(const float (&g)[8], unsigned byte, const PointDrop &drop,
                                                 float (&v)[8]) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        v[k] = 0.0f;
        if ((byte >> k) & 1u) v[k] = drop.p > 0.0f ? round_to<T>(__fadd_rn(0.0f, __fmul_rn(g[k], drop.scale))) : g[k];
    }
}
