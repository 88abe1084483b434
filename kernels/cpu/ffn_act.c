// kernels/cpu/ffn_act.c: feed-forward activations, plain out = act(a) or gated
// out = act(a) * b (T5 1.1 / FLAN "gated-gelu": act(wi_0 x) * wi_1 x).
//   a, b, out (n)
// The forward formulas follow torch's CPU kernels / HF's activation modules operation
// by operation in fp32:
//   relu      max(x, 0)                   (gradient 0 at x = 0, as torch's threshold_backward)
//   gelu      0.5 * x * (1 + erf(x / sqrt2))           nn.functional.gelu
//   gelu_new  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   NewGELUActivation
//   silu      x / (1 + exp(-x))                        nn.functional.silu
#include <math.h>

#include "../../common/check.h"
#include <stdlib.h>

#include "../../common/check.h"
#include "cpu_ops.h"

#define SQRT_2_OVER_PI 0.7978845608028654   // sqrt(2/pi)
#define INV_SQRT_2PI 0.3989422804014327     // 1/sqrt(2 pi)
#define SQRT_HALF 0.7071067811865476        // 1/sqrt(2), M_SQRT1_2 in torch
#define GELU_NEW_C 0.044715f

static inline float act_value(float x, Activation act) {
    switch (act) {
    case ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ACT_GELU: return 0.5f * x * (1.0f + erff(x * (float)SQRT_HALF));
    case ACT_GELU_NEW: {
        float inner = (float)SQRT_2_OVER_PI * (x + GELU_NEW_C * (x * x * x));
        return 0.5f * x * (1.0f + tanhf(inner));
    }
    case ACT_SILU: return x / (1.0f + expf(-x));
    }
    return 0.0f;  // unreachable: checked by act_check
}

static inline float act_derivative(float x, Activation act) {
    switch (act) {
    case ACT_RELU: return x > 0.0f ? 1.0f : 0.0f;
    case ACT_GELU: {
        float cdf = 0.5f * (1.0f + erff(x * (float)SQRT_HALF));
        float pdf = (float)INV_SQRT_2PI * expf(-0.5f * x * x);
        return cdf + x * pdf;
    }
    case ACT_GELU_NEW: {
        float x2 = x * x;
        float t = tanhf((float)SQRT_2_OVER_PI * (x + GELU_NEW_C * x2 * x));
        float dinner = (float)SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_NEW_C * x2);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner;
    }
    case ACT_SILU: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    }
    return 0.0f;
}

static void act_check(Activation act) {
    if (act != ACT_RELU && act != ACT_GELU && act != ACT_GELU_NEW && act != ACT_SILU)
        t5_fail("unknown feed-forward activation code %d (supported: relu, gelu, gelu_new, silu)", (int)act);
}

void cpu_ffn_act_forward(void *out_, const void *a_, const void *b_, size_t n, Activation act, DropoutArgs drop) {
    float *out = out_;
    const float *a = a_, *b = b_;
    act_check(act);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float y = act_value(a[i], act);
        out[i] = b ? y * b[i] : y;
    }
    cpu_dropout_forward(out, out, n, drop);  // the reference: the two ops one after the other
}

// da += dout * act'(a) [* b];  db += dout * act(a)  (gated only)
void cpu_ffn_act_backward(void *da_, void *db_, const void *dout_, const void *a_, const void *b_, size_t n,
                          Activation act, DropoutArgs drop, int set) {
    float *da = da_, *db = db_, *dropped = NULL;
    const float *dout = dout_, *a = a_, *b = b_;
    act_check(act);
    if (drop.p != 0.0f) {  // the reference: dropout_backward into zeros first
        dropped = callocCheck(n ? n : 1, sizeof(float));
        cpu_dropout_backward(dropped, dout, n, drop);
        dout = dropped;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = dout[i];
        if (b) {
            if (db) db[i] = (set ? 0.0f : db[i]) + g * act_value(a[i], act);
            g *= b[i];
        }
        da[i] = (set ? 0.0f : da[i]) + g * act_derivative(a[i], act);
    }
    free(dropped);
}

// The ReLU FFN's keep bits (backend.h relu_drop_forward / relu_drop_backward): the two ops
// above, with the mask of ReLU and dropout kept as bits in between.
static void relu_bits_check(size_t n, const char *op) {
    if (n % 8) t5_fail("%s: %zu elements; the keep bits need a multiple of 8 (model/block.c asks only then)", op, n);
}

void cpu_relu_drop_forward(void *out_, uint8_t *bits, const void *a_, size_t n, DropoutArgs drop) {
    relu_bits_check(n, "relu_drop_forward");
    const float *a = a_;
    float *out = out_;
    if (bits) {  // before out: out may alias a
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n / 8; j++) {
            unsigned byte = 0;
            for (unsigned k = 0; k < 8; k++) {
                const size_t i = 8 * j + k;
                const int kept = drop.p == 0.0f || cpu_dropout_uniform(drop.seed, i) >= drop.p;
                byte |= (unsigned)(a[i] > 0.0f && kept) << k;
            }
            bits[j] = (uint8_t)byte;
        }
    }
    cpu_ffn_act_forward(out, a, NULL, n, ACT_RELU, drop);
}

void cpu_relu_drop_backward(void *da_, const void *dout_, const uint8_t *bits, size_t n, DropoutArgs drop, int set) {
    relu_bits_check(n, "relu_drop_backward");
    float *da = da_;
    const float *dout = dout_;
    const float scale = drop.p == 0.0f ? 1.0f : cpu_dropout_scale(drop.p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        // dropout_backward into zeros (dout * scale; dout itself at p = 0), then relu's 1 or 0
        const float g = (bits[i / 8] >> (i % 8)) & 1u ? (drop.p == 0.0f ? dout[i] : dout[i] * scale) : 0.0f;
        da[i] = (set ? 0.0f : da[i]) + g;
    }
}
