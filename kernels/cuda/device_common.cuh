// kernels/cuda/device_common.cuh: what kernel bodies share, and nothing of the host side:
// dtype load/store with fp32 math, 16-byte vector access, warp/block reductions. No CUDA
// runtime calls and no launches, so a kernel body that includes only this (and mma_tile.cuh,
// the dropout headers) also compiles as host C++ under tests/emu/warp_emu.h, which runs it
// on the CPU (tests/test_flash_emu.c).
//
// Element types T: float, __nv_bfloat16, __half. Math is fp32; conversions to 16 bits
// round to nearest even (__float2bfloat16_rn / __float2half_rn).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// ---- dtypes ------------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// x rounded to T and back (identity for float): HF's intermediate .to(dtype) steps.
template <typename T> __device__ __forceinline__ float round_to(float x) { return to_float(from_float<T>(x)); }

// Elements of T per 16-byte access.
template <typename T> constexpr int pack_of() { return (int)(16 / sizeof(T)); }

template <int BYTES> struct RawOf;
template <> struct RawOf<2> { typedef unsigned short type; };
template <> struct RawOf<4> { typedef unsigned int type; };
template <> struct RawOf<8> { typedef uint2 type; };
template <> struct RawOf<16> { typedef uint4 type; };

// Load V consecutive elements at p (aligned to V*sizeof(T) when that is <= 16 bytes, else
// to 16 bytes) as floats. V*sizeof(T) is 2, 4, 8 or a multiple of 16.
template <typename T, int V> __device__ __forceinline__ void load_vec(float (&f)[V], const T *p) {
    constexpr int BYTES = V * (int)sizeof(T);
    if constexpr (V == 1) {
        f[0] = to_float(*p);
    } else if constexpr (BYTES <= 16) {
        typedef typename RawOf<BYTES>::type R;
        alignas(16) T t[V];
        *reinterpret_cast<R *>(t) = *reinterpret_cast<const R *>(p);
#pragma unroll
        for (int k = 0; k < V; k++) f[k] = to_float(t[k]);
    } else {
        static_assert(BYTES % 16 == 0, "vector width must be a multiple of 16 bytes");
        constexpr int P = 16 / (int)sizeof(T);
#pragma unroll
        for (int c = 0; c < BYTES / 16; c++) {
            alignas(16) T t[P];
            *reinterpret_cast<uint4 *>(t) = reinterpret_cast<const uint4 *>(p)[c];
#pragma unroll
            for (int k = 0; k < P; k++) f[c * P + k] = to_float(t[k]);
        }
    }
}

// Store V floats at p as T (rounded to nearest even); alignment as load_vec.
template <typename T, int V> __device__ __forceinline__ void store_vec(T *p, const float (&f)[V]) {
    constexpr int BYTES = V * (int)sizeof(T);
    if constexpr (V == 1) {
        *p = from_float<T>(f[0]);
    } else if constexpr (BYTES <= 16) {
        typedef typename RawOf<BYTES>::type R;
        alignas(16) T t[V];
#pragma unroll
        for (int k = 0; k < V; k++) t[k] = from_float<T>(f[k]);
        *reinterpret_cast<R *>(p) = *reinterpret_cast<const R *>(t);
    } else {
        static_assert(BYTES % 16 == 0, "vector width must be a multiple of 16 bytes");
        constexpr int P = 16 / (int)sizeof(T);
#pragma unroll
        for (int c = 0; c < BYTES / 16; c++) {
            alignas(16) T t[P];
#pragma unroll
            for (int k = 0; k < P; k++) t[k] = from_float<T>(f[c * P + k]);
            reinterpret_cast<uint4 *>(p)[c] = *reinterpret_cast<const uint4 *>(t);
        }
    }
}

// ---- reductions (fixed shuffle trees: deterministic) --------------------------------------

template <typename R> __device__ __forceinline__ R warp_sum(R v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block; every thread gets the result. blockDim.x a multiple of 32 (<= 1024);
// every thread of the block must call it (it contains __syncthreads). Safe to call
// repeatedly: the leading barrier keeps a previous call's readers ahead of new writes.
template <typename R> __device__ __forceinline__ R block_sum(R v) {
    __shared__ R partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? partial[lane] : (R)0);
}
