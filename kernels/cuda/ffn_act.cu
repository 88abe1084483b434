// kernels/cuda/ffn_act.cu: feed-forward activations, plain out = act(a) or gated
// out = act(a) * b, and their backward; the formulas of kernels/cpu/ffn_act.c in fp32:
//   relu      max(x, 0)                   (gradient 0 at x = 0)
//   gelu      0.5 * x * (1 + erf(x / sqrt2))
//   gelu_new  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
//   silu      x / (1 + exp(-x))
// Gated forward with a 16-bit T rounds act(a) to T before the product, as HF does
// (hidden_gelu = act(wi_0 x) is a bf16/fp16 tensor, then hidden_gelu * hidden_linear).
// Backward (da += dout * act'(a) [* b], db += dout * act(a)) follows the CPU order of
// operations in fp32. Pointwise: 16-byte packs, in-place allowed.
// Dropout rides along (p > 0): forward drops the rounded result with dropout_forward's mask
// and scale, backward takes dout through dropout_backward's arithmetic first (as if into a
// zeroed buffer, rounded to T): bitwise the separate ops, one pass over memory fewer each.
// The plain ReLU also has a form with keep bits (relu_drop_forward / relu_drop_backward, below).
#include "common.cuh"
#include "point_drop.cuh"
#include "relu_drop.cuh"

#define SQRT_2_OVER_PI 0.7978845608028654
#define INV_SQRT_2PI 0.3989422804014327
#define SQRT_HALF 0.7071067811865476
#define GELU_NEW_C 0.044715f

template <int ACT> __device__ __forceinline__ float act_value(float x) {
    if constexpr (ACT == ACT_RELU) {
        return x > 0.0f ? x : 0.0f;
    } else if constexpr (ACT == ACT_GELU) {
        return 0.5f * x * (1.0f + erff(x * (float)SQRT_HALF));
    } else if constexpr (ACT == ACT_GELU_NEW) {
        const float inner = (float)SQRT_2_OVER_PI * (x + GELU_NEW_C * (x * x * x));
        return 0.5f * x * (1.0f + tanhf(inner));
    } else {
        return x / (1.0f + expf(-x));
    }
}

template <int ACT> __device__ __forceinline__ float act_derivative(float x) {
    if constexpr (ACT == ACT_RELU) {
        return x > 0.0f ? 1.0f : 0.0f;
    } else if constexpr (ACT == ACT_GELU) {
        const float cdf = 0.5f * (1.0f + erff(x * (float)SQRT_HALF));
        const float pdf = (float)INV_SQRT_2PI * expf(-0.5f * x * x);
        return cdf + x * pdf;
    } else if constexpr (ACT == ACT_GELU_NEW) {
        const float x2 = x * x;
        const float t = tanhf((float)SQRT_2_OVER_PI * (x + GELU_NEW_C * x2 * x));
        const float dinner = (float)SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_NEW_C * x2);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner;
    } else {
        const float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
}

template <typename T, int ACT> struct ActForward {
    T *out;
    const T *a, *b;  // b NULL: plain
    PointDrop drop;
    template <int V> __device__ void apply(size_t i) const {
        float x[V], y[V];
        load_vec<T, V>(x, a + i);
        if (b) {
            float g[V];
            load_vec<T, V>(g, b + i);
#pragma unroll
            for (int k = 0; k < V; k++) y[k] = round_to<T>(act_value<ACT>(x[k])) * g[k];
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) y[k] = act_value<ACT>(x[k]);
        }
        if (drop.p > 0.0f) {  // dropout_forward of the stored (rounded) value
            bool kp[V];
            drop.keep_pack<V>(i, kp);
#pragma unroll
            for (int k = 0; k < V; k++) y[k] = drop.value_kept<T>(round_to<T>(y[k]), kp[k]);
        }
        store_vec<T, V>(out + i, y);
    }
};

template <typename T, int ACT> struct ActBackward {
    T *da, *db;  // db may be NULL (gated: skip it)
    const T *dout, *a, *b;
    PointDrop drop;
    int set;  // 1: da (db) = ..., their old contents not read
    template <int V> __device__ void apply(size_t i) const {
        float g[V], x[V], dx[V];
        load_vec<T, V>(g, dout + i);
        if (drop.p > 0.0f) {  // dropout_backward into a zeroed T buffer
            bool kp[V];
            drop.keep_pack<V>(i, kp);
#pragma unroll
            for (int k = 0; k < V; k++) g[k] = kp[k] ? round_to<T>(__fadd_rn(0.0f, __fmul_rn(g[k], drop.scale))) : 0.0f;
        }
        load_vec<T, V>(x, a + i);
        if (set) {
#pragma unroll
            for (int k = 0; k < V; k++) dx[k] = 0.0f;
        } else {
            load_vec<T, V>(dx, da + i);
        }
        if (b) {
            float bv[V];
            load_vec<T, V>(bv, b + i);
            if (db) {
                float dbv[V];
                if (set) {
#pragma unroll
                    for (int k = 0; k < V; k++) dbv[k] = 0.0f;
                } else {
                    load_vec<T, V>(dbv, db + i);
                }
#pragma unroll
                for (int k = 0; k < V; k++) dbv[k] += g[k] * act_value<ACT>(x[k]);
                store_vec<T, V>(db + i, dbv);
            }
#pragma unroll
            for (int k = 0; k < V; k++) g[k] *= bv[k];
        }
#pragma unroll
        for (int k = 0; k < V; k++) dx[k] += g[k] * act_derivative<ACT>(x[k]);
        store_vec<T, V>(da + i, dx);
    }
};

static void act_check(Activation act) {
    if (act != ACT_RELU && act != ACT_GELU && act != ACT_GELU_NEW && act != ACT_SILU)
        t5_fail("unknown feed-forward activation code %d (supported: relu, gelu, gelu_new, silu)", (int)act);
}

template <typename T, int ACT>
static void ffn_act_forward_t(void *out, const void *a, const void *b, size_t n, DropoutArgs drop) {
    ActForward<T, ACT> f{(T *)out, (const T *)a, (const T *)b, point_drop(drop)};
    launch_pointwise<T>(f, n, aligned16(out) && aligned16(a) && aligned16(b));
}

template <typename T, int ACT>
static void ffn_act_backward_t(void *da, void *db, const void *dout, const void *a, const void *b, size_t n,
                               DropoutArgs drop, int set) {
    ActBackward<T, ACT> f{(T *)da, (T *)db, (const T *)dout, (const T *)a, (const T *)b, point_drop(drop), set};
    launch_pointwise<T>(f, n, aligned16(da) && aligned16(db) && aligned16(dout) && aligned16(a) && aligned16(b));
}

template <typename T>
static void ffn_act_forward(void *out, const void *a, const void *b, size_t n, Activation act, DropoutArgs drop) {
    act_check(act);
    switch (act) {
    case ACT_RELU: ffn_act_forward_t<T, ACT_RELU>(out, a, b, n, drop); break;
    case ACT_GELU: ffn_act_forward_t<T, ACT_GELU>(out, a, b, n, drop); break;
    case ACT_GELU_NEW: ffn_act_forward_t<T, ACT_GELU_NEW>(out, a, b, n, drop); break;
    case ACT_SILU: ffn_act_forward_t<T, ACT_SILU>(out, a, b, n, drop); break;
    }
}

template <typename T>
static void ffn_act_backward(void *da, void *db, const void *dout, const void *a, const void *b, size_t n,
                             Activation act, DropoutArgs drop, int set) {
    act_check(act);
    switch (act) {
    case ACT_RELU: ffn_act_backward_t<T, ACT_RELU>(da, db, dout, a, b, n, drop, set); break;
    case ACT_GELU: ffn_act_backward_t<T, ACT_GELU>(da, db, dout, a, b, n, drop, set); break;
    case ACT_GELU_NEW: ffn_act_backward_t<T, ACT_GELU_NEW>(da, db, dout, a, b, n, drop, set); break;
    case ACT_SILU: ffn_act_backward_t<T, ACT_SILU>(da, db, dout, a, b, n, drop, set); break;
    }
}

// ---- the ReLU FFN's keep bits (backend.h relu_drop_forward / relu_drop_backward) ----------
// One thread item is one byte of bits: elements 8j .. 8j+7 (one 16-byte pack in bf16/fp16,
// two in fp32; VEC: every pointer 16-byte aligned, else element by element). The stored
// values are ActForward's (relu, then dropout_forward of the rounded result) and the
// gradient ActBackward's (dropout_backward into a zeroed T buffer, times relu's 1), so both
// are bitwise the ops without bits, up to the sign of a zero gradient.
template <typename T, bool VEC> __device__ __forceinline__ void load8(float (&f)[8], const T *p) {
    if constexpr (VEC) {
        load_vec<T, 8>(f, p);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = to_float(p[k]);
    }
}

template <typename T, bool VEC> __device__ __forceinline__ void store8(T *p, const float (&f)[8]) {
    if constexpr (VEC) {
        store_vec<T, 8>(p, f);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) p[k] = from_float<T>(f[k]);
    }
}

template <typename T, bool VEC> struct ReluDropForward {
    T *out;
    uint8_t *bits;  // NULL: not written
    const T *a;
    PointDrop drop;
    template <int V> __device__ void apply(size_t j) const {  // V == 1: byte j
        const size_t i = 8 * j;
        float x[8], y[8];
        load8<T, VEC>(x, a + i);
        const unsigned byte = relu_drop_values8<T>(x, i, drop, y);
        store8<T, VEC>(out + i, y);
        if (bits) bits[j] = (uint8_t)byte;
    }
};

template <typename T, bool VEC> struct ReluDropBackward {
    T *da;
    const T *dout;
    const uint8_t *bits;
    PointDrop drop;
    int set;  // 1: da = ..., its old contents not read
    template <int V> __device__ void apply(size_t j) const {  // V == 1: byte j
        const size_t i = 8 * j;
        float g[8], dx[8], v[8];
        load8<T, VEC>(g, dout + i);
        if (set) {
#pragma unroll
            for (int k = 0; k < 8; k++) dx[k] = 0.0f;
        } else {
            load8<T, VEC>(dx, da + i);
        }
        relu_drop_grads8<T>(g, bits[j], drop, v);
#pragma unroll
        for (int k = 0; k < 8; k++) dx[k] += v[k];
        store8<T, VEC>(da + i, dx);
    }
};

static void relu_bits_check(size_t n, const char *op) {
    if (n % 8) t5_fail("%s: %zu elements; the keep bits need a multiple of 8 (model/block.c asks only then)", op, n);
}

template <typename T> static void relu_drop_forward(void *out, uint8_t *bits, const void *a, size_t n, DropoutArgs drop) {
    relu_bits_check(n, "relu_drop_forward");
    const PointDrop pd = point_drop(drop);
    if (aligned16(out) && aligned16(a))
        launch_pointwise<T, 1>(ReluDropForward<T, true>{(T *)out, bits, (const T *)a, pd}, n / 8, false);
    else
        launch_pointwise<T, 1>(ReluDropForward<T, false>{(T *)out, bits, (const T *)a, pd}, n / 8, false);
}

template <typename T>
static void relu_drop_backward(void *da, const void *dout, const uint8_t *bits, size_t n, DropoutArgs drop, int set) {
    relu_bits_check(n, "relu_drop_backward");
    const PointDrop pd = point_drop(drop);
    if (aligned16(da) && aligned16(dout))
        launch_pointwise<T, 1>(ReluDropBackward<T, true>{(T *)da, (const T *)dout, bits, pd, set}, n / 8, false);
    else
        launch_pointwise<T, 1>(ReluDropBackward<T, false>{(T *)da, (const T *)dout, bits, pd, set}, n / 8, false);
}

extern "C" void cuda_relu_drop_forward(Dtype dt, void *out, uint8_t *bits, const void *a, size_t n, DropoutArgs drop) {
    DISPATCH_DTYPE(dt, relu_drop_forward, out, bits, a, n, drop);
}

extern "C" void cuda_relu_drop_backward(Dtype dt, void *da, const void *dout, const uint8_t *bits, size_t n,
                                        DropoutArgs drop, int set) {
    DISPATCH_DTYPE(dt, relu_drop_backward, da, dout, bits, n, drop, set);
}

extern "C" void cuda_ffn_act_forward(Dtype dt, void *out, const void *a, const void *b, size_t n, Activation act,
                                     DropoutArgs drop) {
    DISPATCH_DTYPE(dt, ffn_act_forward, out, a, b, n, act, drop);
}

extern "C" void cuda_ffn_act_backward(Dtype dt, void *da, void *db, const void *dout, const void *a, const void *b,
                                      size_t n, Activation act, DropoutArgs drop, int set) {
    DISPATCH_DTYPE(dt, ffn_act_backward, da, db, dout, a, b, n, act, drop, set);
}
