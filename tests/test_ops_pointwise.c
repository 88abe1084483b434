// tests/test_ops_pointwise.c: the CPU reference backend's pointwise ops (FFN activations,
// add/scale/axpy, dropout), cross-entropy and the optimizer ops (sum of squares, tensor
// norms, AdamW); the other ops are in tests/test_ops.c, with the method:
//   - every backward against central finite differences of its forward, on random
//     inputs (never zeros) of odd sizes: L = sum(out * R) for a random R, analytic
//     gradients from the backward into zeroed buffers, numeric ones by perturbing one
//     fp32 input element at a time (all elements) and evaluating L in double;
//   - every backward ADDS into its gradients (checked against prefilled buffers);
//   - forwards against naive double-precision computations, the relative position
//     buckets against values computed with numpy float32 from HF's formula, dropout
//     statistics and determinism, AdamW against a double-precision formula, and
//     results that must not depend on the number of OpenMP threads.
// Prints one OK / NOT OK line per tensor with its max difference; exits non-zero on any failure.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../kernels/dropout_rng.h"
#include "../kernels/backend.h"
#include "../kernels/cpu/cpu_ops.h"
#include "test.h"
#include "test_ops_util.h"

// ---- ffn activation ----------------------------------------------------------------------

typedef struct {
    float *a, *b, *out;
    const float *R;
    size_t n;
    Activation act;
    DropoutArgs drop;
} ActCtx;
static double act_loss(void *c_) {
    ActCtx *c = c_;
    be->ffn_act_forward(c->out, c->a, c->b, c->n, c->act, c->drop);
    return dot_double(c->out, c->R, c->n);
}

static double naive_act(double x, Activation act) {
    switch (act) {
    case ACT_RELU: return x > 0 ? x : 0;
    case ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case ACT_GELU_NEW: return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case ACT_SILU: return x / (1 + exp(-x));
    }
    return NAN;
}

static void test_ffn_act(void) {
    static const char *names[] = {"relu", "gelu", "gelu_new", "silu"};
    const size_t n = 7 * 13;
    const DropoutArgs nodrop = {0.0f, 0};
    for (int act = ACT_RELU; act <= ACT_SILU; act++)
        for (int gated = 0; gated <= 1; gated++) {
            float *a = rand_array(n, 3.0f), *b = gated ? rand_array(n, 1.0f) : NULL;
            float *out = zeros_array(n), *R = rand_array(n, 1.0f);
            be->ffn_act_forward(out, a, b, n, (Activation)act, nodrop);
            double *ref = malloc(n * sizeof(double));
            for (size_t i = 0; i < n; i++) ref[i] = naive_act(a[i], (Activation)act) * (gated ? b[i] : 1.0);
            float *fr = to_float(ref, n);
            char name[160];
            snprintf(name, sizeof name, "ffn_act_forward %s %s vs double reference", names[act], gated ? "gated" : "plain");
            test_close(name, out, fr, n, FWD_TOL);

            float *da = zeros_array(n), *db = gated ? zeros_array(n) : NULL;
            be->ffn_act_backward(da, db, R, a, b, n, (Activation)act, nodrop, 0);
            ActCtx c = {a, b, out, R, n, (Activation)act, nodrop};
            snprintf(name, sizeof name, "ffn_act da (%s, %s)", names[act], gated ? "gated" : "plain");
            check_grad(name, a, n, da, act_loss, &c);
            if (gated) {
                snprintf(name, sizeof name, "ffn_act db (%s, gated)", names[act]);
                check_grad(name, b, n, db, act_loss, &c);
            }
            float *pa = rand_array(n, 1.0f), *pb = rand_array(n, 1.0f);
            float *aa = copy_array(pa, n), *ab = copy_array(pb, n);
            be->ffn_act_backward(aa, gated ? ab : NULL, R, a, b, n, (Activation)act, nodrop, 0);
            snprintf(name, sizeof name, "ffn_act da (%s, %s)", names[act], gated ? "gated" : "plain");
            check_accumulates(name, aa, pa, da, n);
            if (gated) {
                snprintf(name, sizeof name, "ffn_act db (%s, gated)", names[act]);
                check_accumulates(name, ab, pb, db, n);
            }
            // with the hidden dropout riding along: backward is the derivative of forward
            const DropoutArgs drop = {0.3f, 1234};
            float *dda = zeros_array(n), *ddb = gated ? zeros_array(n) : NULL;
            be->ffn_act_backward(dda, ddb, R, a, b, n, (Activation)act, drop, 0);
            ActCtx cd = {a, b, out, R, n, (Activation)act, drop};
            snprintf(name, sizeof name, "ffn_act da with dropout 0.3 (%s, %s)", names[act], gated ? "gated" : "plain");
            check_grad(name, a, n, dda, act_loss, &cd);
            if (gated) {
                snprintf(name, sizeof name, "ffn_act db with dropout 0.3 (%s, gated)", names[act]);
                check_grad(name, b, n, ddb, act_loss, &cd);
            }
            // set: the old contents of da (db) are ignored: = the gradients computed into zeros
            float *sa = rand_array(n, 1.0f), *sb = gated ? rand_array(n, 1.0f) : NULL;
            be->ffn_act_backward(sa, sb, R, a, b, n, (Activation)act, drop, 1);
            snprintf(name, sizeof name, "ffn_act_backward set (%s, %s) = into zeros, bitwise", names[act],
                     gated ? "gated" : "plain");
            test_check(!memcmp(sa, dda, n * sizeof(float)) && (!gated || !memcmp(sb, ddb, n * sizeof(float))), name);
            free(sa), free(sb);
            free(a), free(b), free(out), free(R), free(ref), free(fr), free(da), free(db), free(pa), free(pb);
            free(aa), free(ab), free(dda), free(ddb);
        }
}

// The plain ReLU with keep bits (relu_drop_forward / relu_drop_backward): bitwise
// ffn_act_forward / ffn_act_backward (zeros compared by value), with and without dropout and
// accumulating or set, the bits = (a > 0 and kept), and out in place over a.
static void test_relu_drop(void) {
    const size_t n = 8 * 127;
    const DropoutArgs drops[2] = {{0.0f, 0}, {0.3f, 4321}};
    for (int k = 0; k < 2; k++) {
        const DropoutArgs d = drops[k];
        float *a = rand_array(n, 3.0f), *want = zeros_array(n), *got = zeros_array(n), *R = rand_array(n, 1.0f);
        uint8_t *bits = calloc(n / 8, 1);
        be->ffn_act_forward(want, a, NULL, n, ACT_RELU, d);
        be->relu_drop_forward(got, bits, a, n, d);
        char name[160];
        snprintf(name, sizeof name, "relu_drop_forward (dropout %g) = ffn_act_forward relu, bitwise", d.p);
        test_check(!memcmp(got, want, n * sizeof(float)), name);
        int bits_ok = 1, set = 0;
        for (size_t i = 0; i < n; i++) {
            const int kept = d.p == 0.0f || cpu_dropout_uniform(d.seed, i) >= d.p;
            const int bit = (bits[i / 8] >> (i % 8)) & 1;
            bits_ok &= bit == (a[i] > 0.0f && kept);
            set += bit;
        }
        snprintf(name, sizeof name, "relu_drop_forward (dropout %g): bit i = a[i] > 0 and kept (%d of %zu set)", d.p,
                 set, n);
        test_check(bits_ok && set > 0 && (size_t)set < n, name);
        for (int acc = 0; acc <= 1; acc++) {
            float *p = rand_array(n, 1.0f), *da_want = copy_array(p, n), *da_got = copy_array(p, n);
            be->ffn_act_backward(da_want, NULL, R, a, NULL, n, ACT_RELU, d, !acc);
            be->relu_drop_backward(da_got, R, bits, n, d, !acc);
            int same = 1;
            for (size_t i = 0; i < n; i++) same &= da_got[i] == da_want[i];
            snprintf(name, sizeof name, "relu_drop_backward (dropout %g, %s) = ffn_act_backward relu from the bits", d.p,
                     acc ? "accumulating" : "set");
            test_check(same, name);
            free(p), free(da_want), free(da_got);
        }
        be->relu_drop_forward(a, NULL, a, n, d);  // in place, no bits
        snprintf(name, sizeof name, "relu_drop_forward (dropout %g) in place, no bits, bitwise", d.p);
        test_check(!memcmp(a, want, n * sizeof(float)), name);
        free(a), free(want), free(got), free(R), free(bits);
    }
}

// ---- elementwise and dropout -------------------------------------------------------------

// dropout_add = dropout_forward then add (y + x), bitwise, with and without dropout, and in place.
static void test_dropout_add(void) {
    const size_t n = 1003;
    const DropoutArgs drops[2] = {{0.0f, 0}, {0.25f, 99}};
    for (int k = 0; k < 2; k++) {
        float *y = rand_array(n, 1.0f), *x = rand_array(n, 1.0f), *want = zeros_array(n), *got = zeros_array(n);
        float *dy = copy_array(y, n);
        be->dropout_forward(dy, dy, n, drops[k]);
        be->add(want, dy, x, n);
        be->dropout_add(got, y, x, n, drops[k]);
        float *guarded = zeros_array(n);
        be->dropout_add_guard(guarded, y, x, n, drops[k]);  // fp32: the guard is fp16's, nothing more
        be->dropout_add(y, y, x, n, drops[k]);  // in place (out = y)
        char name[160];
        snprintf(name, sizeof name, "dropout_add p=%g = dropout_forward then add, bitwise (and in place); "
                 "dropout_add_guard the same in fp32", drops[k].p);
        test_check(!memcmp(got, want, n * sizeof(float)) && !memcmp(y, want, n * sizeof(float)) &&
                   !memcmp(guarded, want, n * sizeof(float)), name);
        free(y), free(x), free(want), free(got), free(dy), free(guarded);
    }
}

// residual_rmsnorm_forward = dropout_add_guard then rmsnorm_forward, bitwise, with and without
// dropout, and with x_out in place of x_in (the generation decoder's one buffer).
static void test_residual_rmsnorm(void) {
    const int N = 7, D = 37;
    const size_t n = (size_t)N * D;
    const DropoutArgs drops[2] = {{0.0f, 0}, {0.25f, 99}};
    for (int k = 0; k < 2; k++) {
        float *y = rand_array(n, 1.0f), *x = rand_array(n, 1.0f), *w = rand_array(D, 1.0f);
        float *xo = zeros_array(n), *ln = zeros_array(n), *rstd = zeros_array(N);
        float *xo_want = zeros_array(n), *ln_want = zeros_array(n), *rstd_want = zeros_array(N);
        be->dropout_add_guard(xo_want, y, x, n, drops[k]);
        be->rmsnorm_forward(ln_want, rstd_want, xo_want, w, N, D, 1e-6f);
        be->residual_rmsnorm_forward(xo, ln, rstd, y, x, w, N, D, 1e-6f, drops[k]);
        float *ln2 = zeros_array(n), *rstd2 = zeros_array(N);
        be->residual_rmsnorm_forward(x, ln2, rstd2, y, x, w, N, D, 1e-6f, drops[k]);  // x_out = x_in
        char name[160];
        snprintf(name, sizeof name, "residual_rmsnorm_forward p=%g = dropout_add_guard then rmsnorm_forward, bitwise "
                 "(and in place)", drops[k].p);
        test_check(!memcmp(xo, xo_want, n * sizeof(float)) && !memcmp(ln, ln_want, n * sizeof(float)) &&
                       !memcmp(rstd, rstd_want, N * sizeof(float)) && !memcmp(x, xo_want, n * sizeof(float)) &&
                       !memcmp(ln2, ln_want, n * sizeof(float)) && !memcmp(rstd2, rstd_want, N * sizeof(float)),
                   name);
        free(y), free(x), free(w), free(xo), free(ln), free(rstd), free(xo_want), free(ln_want), free(rstd_want);
        free(ln2), free(rstd2);
    }
}

static void test_elementwise(void) {
    const size_t n = 1003;
    float *a = rand_array(n, 1.0f), *b = rand_array(n, 1.0f), *out = zeros_array(n), *y = copy_array(b, n);
    be->add(out, a, b, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= out[i] == a[i] + b[i];
    test_check(ok, "add: out = a + b exactly");
    be->axpy(y, a, 0.37f, n);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= y[i] == b[i] + 0.37f * a[i];
    test_check(ok, "axpy: y += alpha * x exactly");
    be->scale(out, a, -1.7f, n);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= out[i] == -1.7f * a[i];
    test_check(ok, "scale: out = alpha * inp exactly");
    free(a), free(b), free(out), free(y);
}

// The attention tile kernels' keep test, k >= dropout_rng_threshold(p) on a draw's 16 bits,
// decides as the float test u >= p that the CPU reference and the other kernels make, for
// every k at p on and off the 2^-16 grid (a floor instead of the ceil fails here)
static void test_dropout_threshold(void) {
    const float ps[] = {0.0f, 1e-9f, 0x1.0p-16f, 0x1.8p-16f, 0.05f, 0.1f, 0.25f, 1.0f / 3.0f, 0.5f, 0.9f,
                        65535.0f / 65536.0f, 0.99999f, 1.0f};
    for (size_t c = 0; c < sizeof ps / sizeof ps[0]; c++) {
        const float p = ps[c];
        const uint32_t thr = dropout_rng_threshold(p);
        size_t differ = 0, kept = 0;
        for (uint32_t k = 0; k < 65536; k++) {
            const uint64_t bits = (uint64_t)k << 16;  // k in lane 1
            const int by_float = dropout_rng_lane(bits, 1) >= p, by_int = k >= thr;
            differ += by_float != by_int;
            kept += by_int;
        }
        char what[160];
        snprintf(what, sizeof what, "dropout threshold p=%.9g: k >= %u is u >= p for all 65536 draws (%zu kept, %zu differ)",
                 (double)p, thr, kept, differ);
        test_check(differ == 0, what);
    }
}

static void test_dropout(void) {
    const size_t n = 100003;
    float *x = rand_array(n, 1.0f), *out = zeros_array(n), *out2 = zeros_array(n), *R = rand_array(n, 1.0f);
    DropoutArgs d = {0.3f, 42};

    // the uniform draw
    double mean = 0, lo = 1, hi = 0;
    size_t off_grid = 0, same_in_group = 0;
    for (size_t i = 0; i < n; i++) {
        double u = cpu_dropout_uniform(7, i);
        off_grid += u * 65536.0 != floor(u * 65536.0);  // 16-bit draws
        if (i % 4) same_in_group += u == cpu_dropout_uniform(7, i - 1);  // four lanes of one hash
        mean += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    mean /= n;
    char what[200];
    snprintf(what, sizeof what, "dropout uniform: in [0,1) (min %.2e max %.7f), mean %.4f near 0.5", lo, hi, mean);
    test_check(lo >= 0 && hi < 1 && fabs(mean - 0.5) < 0.005, what);
    snprintf(what, sizeof what, "dropout uniform: multiples of 2^-16 (%zu off), neighbours in a group differ (%zu equal)",
             off_grid, same_in_group);
    test_check(off_grid == 0 && same_in_group < 10, what);

    be->dropout_forward(out, x, n, d);
    size_t kept = 0;
    int values_ok = 1;
    float scale = 1.0f / (float)(1.0 - 0.3);
    for (size_t i = 0; i < n; i++) {
        if (out[i] != 0.0f) {
            kept++;
            values_ok &= out[i] == x[i] * scale;
        }
    }
    double frac = (double)kept / n;
    snprintf(what, sizeof what, "dropout p=0.3: kept fraction %.4f near 0.7, kept values = x / (1-p)", frac);
    test_check(fabs(frac - 0.7) < 0.01 && values_ok, what);
    be->dropout_forward(out2, x, n, d);
    check_bitwise("dropout: the same seed gives the same mask", out, out2, n * sizeof(float));
    DropoutArgs d2 = {0.3f, 43};
    be->dropout_forward(out2, x, n, d2);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += (out[i] != 0) != (out2[i] != 0);
    snprintf(what, sizeof what, "dropout: a different seed gives a different mask (%zu of %zu differ, ~42%% expected)",
             differ, n);
    test_check(differ > n / 3 && differ < n / 2, what);

    // backward: the same mask (adjoint identity <D x, R> = <x, D^T R>), and it adds
    float *dx = zeros_array(n);
    be->dropout_backward(dx, R, n, d);
    // (both sides differ only by the fp32 rounding of x*scale and R*scale)
    double lhs = dot_double(out, R, n), rhs = dot_double(x, dx, n), mag = 0;
    for (size_t i = 0; i < n; i++) mag += fabs((double)out[i] * R[i]);
    snprintf(what, sizeof what,
             "dropout_backward uses the forward mask: <drop(x),R> - <x,drop^T(R)> = %.2e (sum of |terms| %.1e)",
             lhs - rhs, mag);
    test_check(fabs(lhs - rhs) <= 1e-7 * mag, what);
    int mask_same = 1;
    for (size_t i = 0; i < n; i++) mask_same &= (out[i] != 0) == (dx[i] != 0);
    test_check(mask_same, "dropout_backward: zero exactly where forward dropped");
    float *pre = rand_array(n, 1.0f), *acc = copy_array(pre, n);
    be->dropout_backward(acc, R, n, d);
    check_accumulates("dropout dinp", acc, pre, dx, n);

    // p == 0 is an exact identity, forward and backward; in place works
    DropoutArgs zero = {0.0f, 42};
    be->dropout_forward(out2, x, n, zero);
    check_bitwise("dropout p=0: forward is an exact copy", out2, x, n * sizeof(float));
    float *acc0 = copy_array(pre, n);
    be->dropout_backward(acc0, R, n, zero);
    int id = 1;
    for (size_t i = 0; i < n; i++) id &= acc0[i] == pre[i] + R[i];
    test_check(id, "dropout p=0: backward adds dout exactly");
    float *inplace = copy_array(x, n);
    be->dropout_forward(inplace, inplace, n, d);
    check_bitwise("dropout in place (out == inp) gives the same result", inplace, out, n * sizeof(float));

    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    be->dropout_forward(out2, x, n, d);
    omp_set_num_threads(threads);
    check_bitwise("dropout: 1 thread and the default thread count give identical bits", out2, out, n * sizeof(float));
    free(x), free(out), free(out2), free(R), free(dx), free(pre), free(acc), free(acc0), free(inplace);
}

// ---- cross-entropy -----------------------------------------------------------------------

typedef struct {
    float *logits;
    const int *labels;
    int N, V;
    float eps;
} CeCtx;
static double ce_loss(void *c_) {
    CeCtx *c = c_;
    return be->crossentropy_forward_backward(NULL, c->logits, c->labels, c->N, c->V, c->eps, 1.0f);
}

static double naive_ce(const float *logits, const int *labels, int N, int V, double eps) {
    double total = 0;
    for (int n = 0; n < N; n++) {
        if (labels[n] == -100) continue;
        const float *x = logits + (size_t)n * V;
        double z = 0;
        for (int j = 0; j < V; j++) z += exp((double)x[j]);
        double nll = -(x[labels[n]] - log(z)), smooth = 0;
        for (int j = 0; j < V; j++) smooth += -(x[j] - log(z));
        total += (1 - eps) * nll + eps * smooth / V;
    }
    return total;
}

static void test_crossentropy_case(float eps) {
    enum { N = 7, V = 29 };
    const int labels[N] = {3, -100, 28, 0, 17, -100, 5};
    const float dloss = 0.37f;
    size_t nl = (size_t)N * V;
    float *logits = rand_array(nl, 3.0f), *dl = rand_array(nl, 1.0f);  // garbage: must be overwritten
    double loss = be->crossentropy_forward_backward(dl, logits, labels, N, V, eps, dloss);
    double ref = naive_ce(logits, labels, N, V, eps);
    char what[200];
    snprintf(what, sizeof what, "crossentropy eps=%.1f: loss %.10f vs double reference %.10f", eps, loss, ref);
    test_check(fabs(loss - ref) <= 1e-9 * fabs(ref), what);
    int ignored_zero = 1;
    for (int j = 0; j < V; j++) ignored_zero &= dl[1 * V + j] == 0.0f && dl[5 * V + j] == 0.0f;
    snprintf(what, sizeof what, "crossentropy eps=%.1f: rows with label -100 get zero gradient", eps);
    test_check(ignored_zero, what);

    float *scaled = malloc(nl * sizeof(float));  // analytic / dloss vs d(sum)/dlogits
    for (size_t i = 0; i < nl; i++) scaled[i] = dl[i] / dloss;
    CeCtx c = {logits, labels, N, V, eps};
    snprintf(what, sizeof what, "crossentropy dlogits (N=7 V=29, two -100 labels, eps=%.1f, dloss=0.37)", eps);
    check_grad_tol(what, logits, nl, scaled, ce_loss, &c, CE_GRAD_TOL);

    float *alias = copy_array(logits, nl);
    double loss2 = be->crossentropy_forward_backward(alias, alias, labels, N, V, eps, dloss);
    snprintf(what, sizeof what, "crossentropy eps=%.1f: dlogits aliasing logits gives the same loss and gradient", eps);
    test_check(loss2 == loss && !memcmp(alias, dl, nl * sizeof(float)), what);

    // large logits: max subtraction keeps it finite and shift-invariant
    float *big = malloc(nl * sizeof(float));
    for (size_t i = 0; i < nl; i++) big[i] = logits[i] + 1000.0f;
    double loss_big = be->crossentropy_forward_backward(NULL, big, labels, N, V, eps, 1.0f);
    snprintf(what, sizeof what, "crossentropy eps=%.1f: logits + 1000 give the same loss (%.6f vs %.6f)", eps, loss_big,
             loss);
    test_check(isfinite(loss_big) && fabs(loss_big - loss) < 1e-3, what);
    free(logits), free(dl), free(scaled), free(alias), free(big);
}

// A label outside [0, V) that is not -100 must stop the program with a message.
static void test_crossentropy_bad_label(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        float logits[2 * 5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
        int labels[2] = {1, 5};
        be->crossentropy_forward_backward(NULL, logits, labels, 2, 5, 0.0f, 1.0f);
        _exit(0);  // not reached if the label is rejected
    }
    int status = 0;
    waitpid(pid, &status, 0);
    test_check(WIFEXITED(status) && WEXITSTATUS(status) == 1,
               "crossentropy: label 5 with V=5 fails with a message (exit 1)");
}

static void test_crossentropy(void) {
    test_crossentropy_case(0.0f);
    test_crossentropy_case(0.1f);
    test_crossentropy_bad_label();
}

// ---- optimizer ---------------------------------------------------------------------------

static void test_sumsq(void) {
    const size_t n = 200003;  // several chunks and a ragged end
    float *g = rand_array(n, 2.0f);
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    double got = be->sumsq(g, n);
    char what[160];
    snprintf(what, sizeof what, "sumsq n=%zu: %.12g vs %.12g", n, got, ref);
    test_check(fabs(got - ref) <= 1e-12 * ref, what);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    double one = be->sumsq(g, n);
    omp_set_num_threads(3);
    double three = be->sumsq(g, n);
    omp_set_num_threads(threads);
    test_check(one == three && one == got, "sumsq: identical bits with 1, 3 and the default thread count");
    test_check(be->sumsq(g, 0) == 0.0, "sumsq n=0 is 0");
    free(g);
}

// tensor_norm follows torch's CPU vector_norm bit for bit: 8 fp32 lanes whose long sums
// lose precision (the constant tensor's norm comes out 3e-4 high), and the tail. Wanted
// values: torch 2.11 (AVX2), torch.linalg.vector_norm on the same float32 tensors.
static void test_tensor_norm(void) {
    struct {
        size_t n;
        float v;           // constant value, or 0: the ramp (i + 1) * 1e-3
        uint32_t want;     // bits of torch's float32 result
    } cases[] = {{800003, 0.01f, 1091512157u}, {1000, 0.3f, 1092078102u}, {13, 0.7f, 1075939160u},
                 {100003, 0.0f, 1183753411u}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *g = malloc(cases[c].n * sizeof(float));
        double exact = 0;
        for (size_t i = 0; i < cases[c].n; i++) {
            g[i] = cases[c].v != 0.0f ? cases[c].v : (float)(i + 1) * 1e-3f;
            exact += (double)g[i] * g[i];
        }
        float got = be->tensor_norm(g, cases[c].n), want;
        uint32_t bits = cases[c].want;
        memcpy(&want, &bits, sizeof want);
        char what[200];
        snprintf(what, sizeof what, "tensor_norm n=%zu: %.9g, torch.linalg.vector_norm %.9g (exact %.9g)", cases[c].n,
                 got, want, sqrt(exact));
        test_check(got == want, what);
        free(g);
    }
}

// tensor_norms = tensor_norm of each range, bitwise (ranges of odd sizes and offsets).
static void test_tensor_norms(void) {
    const size_t offsets[5] = {0, 3, 1000, 1013, 5000}, counts[5] = {3, 997, 13, 3987, 100003};
    float *g = rand_array(105003, 1.0f), got[5];
    be->tensor_norms(got, g, offsets, counts, 5);
    int bad = 0;
    for (int i = 0; i < 5; i++) bad += got[i] != be->tensor_norm(g + offsets[i], counts[i]);
    char what[160];
    snprintf(what, sizeof what, "tensor_norms over 5 ranges = tensor_norm of each, bitwise: %d differ", bad);
    test_check(bad == 0, what);
    free(g);
}

static void test_adamw_case(float wd, float grad_scale) {
    enum { N = 13, STEPS = 3 };
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float *p = rand_array(N, 1.0f), *m = zeros_array(N), *v = zeros_array(N);
    double rp[N], rm[N] = {0}, rv[N] = {0};
    for (int i = 0; i < N; i++) rp[i] = p[i];
    for (int step = 1; step <= STEPS; step++) {
        float *g = rand_array(N, 1.0f);
        be->adamw_update(p, NULL, g, m, v, N, lr, b1, b2, eps, wd, grad_scale, step);
        double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
        for (int i = 0; i < N; i++) {
            double gi = (double)g[i] * grad_scale;
            rp[i] *= 1 - (double)lr * wd;
            rm[i] = b1 * rm[i] + (1 - (double)b1) * gi;
            rv[i] = b2 * rv[i] + (1 - (double)b2) * gi * gi;
            rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        }
        free(g);
    }
    float *fp = to_float(rp, N), *fm = to_float(rm, N), *fv = to_float(rv, N);
    char what[160];
    snprintf(what, sizeof what, "adamw 3 steps (wd=%g grad_scale=%g) param vs double formula", wd, grad_scale);
    test_close(what, p, fp, N, 1e-6);
    snprintf(what, sizeof what, "adamw 3 steps (wd=%g grad_scale=%g) exp_avg vs double formula", wd, grad_scale);
    test_close(what, m, fm, N, 1e-6);
    snprintf(what, sizeof what, "adamw 3 steps (wd=%g grad_scale=%g) exp_avg_sq vs double formula", wd, grad_scale);
    test_close(what, v, fv, N, 1e-6);
    free(p), free(m), free(v), free(fp), free(fm), free(fv);
}

static void test_adamw(void) {
    test_adamw_case(0.0f, 1.0f);
    test_adamw_case(0.01f, 0.5f);
}

int main(void) {
    be = backend_cpu();
    test_ffn_act();
    test_relu_drop();
    test_elementwise();
    test_dropout();
    test_dropout_threshold();
    test_crossentropy();
    test_sumsq();
    test_tensor_norm();
    test_tensor_norms();
    test_dropout_add();
    test_residual_rmsnorm();
    test_adamw();
    return test_summary();
}
