// tests/gpu/backend_ops_pointwise.h: the pointwise and reduction cases of
// tests/gpu/test_backend_ops.c: embedding, rmsnorm, position_bias, ffn_act, elementwise
// (add, axpy, scale, dropout), crossentropy, sumsq, adamw. Each case_* runs its shapes
// through P->ref (the CPU oracle) and P->sub (the backend under test), for P->dt:
//   - shapes include odd sizes (N = 1, 7, 333; D = 13, 512, 1024, 4096; V = 29, 32128)
//     and misaligned pointers (scalar paths);
//   - gradients are prefilled with random values: every backward must ADD;
//   - ops whose fp32 operations are the CPU's exactly (gathers, add/axpy/scale, dropout,
//     AdamW) must match bitwise: the CPU result rounded to the dtype, tolerance 0;
//   - reductions run twice and must be bitwise reproducible.
#pragma once
#include "backend_ops.h"

// Tolerances on the normalized max error max|sub - ref| / max|ref|:
//  fp32 1e-5   the same fp32 operations in another order (tree sums, contracted
//              multiply-adds, CUDA's erff/tanhf/expf within 2 ulp): a few ulps of the
//              largest value (~1e-7 each);
//  fp32 1e-4   long reductions (hundreds to tens of thousands of terms: cross-entropy
//              over V, dweight over rows, embedding and position-bias sums, row dots),
//              where the CPU sums sequentially in double and the GPU in fp32 trees;
//  bf16 1e-2   outputs are stored in bf16 (8 significant bits): one rounding is up to
//              2^-9 = 2e-3 relative, HF's double rounding (rmsnorm, gated act) up to 4e-3;
//  fp16 2e-3   11 significant bits: one rounding is up to 2.4e-4, two 4.9e-4.
// Inputs are identical on both sides, so scalar results that are formed in fp32 from
// them (the loss, rstd, sumsq) use the fp32 figures for every dtype.
#define TOL_F32 1e-5
#define TOL_F32_LONG 1e-4
#define TOL_BF16 1e-2
#define TOL_F16 2e-3

static double tol_for(Dtype dt, int long_reduction) {
    switch (dt) {
    case DTYPE_BF16: return TOL_BF16;
    case DTYPE_F16: return TOL_F16;
    default: return long_reduction ? TOL_F32_LONG : TOL_F32;
    }
}

// ---- embedding -----------------------------------------------------------------------------

static void case_embedding(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    static const int shapes[][3] = {{1, 13, 50}, {7, 512, 50}, {333, 1024, 50}, {333, 13, 50},
                                    {64, 4096, 50}, {333, 512, 1}};  // N, D, table rows (1: one long run)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s][0], D = shapes[s][1], Vt = shapes[s][2];
        int *ids = malloc(N * sizeof(int));
        for (int i = 0; i < N; i++) ids[i] = rng_u32() % 10 < 3 ? 0 : (int)(rng_u32() % Vt);  // 30% "padding" id 0
        float *table = rand_dt(dt, (size_t)Vt * D, 1.0f), *dout = rand_dt(dt, (size_t)N * D, 1.0f);
        float *dtable = rand_dt(dt, (size_t)Vt * D, 1.0f);
        float *out = alloc_f((size_t)N * D), *dtable_ref = copy_f(dtable, (size_t)Vt * D);
        R->embedding_forward(out, ids, table, N, D);
        R->embedding_backward(dtable_ref, dout, ids, N, D);
        int *d_ids = dev_ints(S, ids, N);
        void *d_table = dev_from(S, dt, table, (size_t)Vt * D), *d_dout = dev_from(S, dt, dout, (size_t)N * D);
        void *d_out = S->alloc((size_t)N * D * dt_size(dt));
        void *d_dtable = dev_from(S, dt, dtable, (size_t)Vt * D), *d_dtable2 = dev_from(S, dt, dtable, (size_t)Vt * D);
        char name[160];
        S->embedding_forward(d_out, d_ids, d_table, N, D);
        snprintf(name, sizeof name, "embedding_forward  %s N=%d D=%d", dt_name(dt), N, D);
        check_dev_exact(S, name, dt, d_out, out, (size_t)N * D);
        S->embedding_backward(d_dtable, d_dout, d_ids, N, D);
        S->embedding_backward(d_dtable2, d_dout, d_ids, N, D);
        snprintf(name, sizeof name, "embedding_backward %s N=%d D=%d V=%d dtable", dt_name(dt), N, D, Vt);
        check_dev(S, name, dt, d_dtable, dtable_ref, (size_t)Vt * D, tol_for(dt, 1));
        snprintf(name, sizeof name, "embedding_backward %s N=%d D=%d reproducible", dt_name(dt), N, D);
        check_same_bytes(S, name, d_dtable, d_dtable2, (size_t)Vt * D * dt_size(dt));
        S->free(d_ids);
        S->free(d_table);
        S->free(d_dout);
        S->free(d_out);
        S->free(d_dtable);
        S->free(d_dtable2);
        free(ids);
        free(table);
        free(dout);
        free(dtable);
        free(out);
        free(dtable_ref);
    }
}

// ---- rmsnorm -------------------------------------------------------------------------------

static void case_rmsnorm(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    static const int shapes[][2] = {{1, 13}, {7, 512}, {333, 1024}, {64, 4096}, {333, 13},
                                    {1, 4096}, {5, 1001}, {20000, 64}};
    const float eps = 1e-6f;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s][0], D = shapes[s][1];
        const size_t ND = (size_t)N * D;
        float *x = rand_dt(dt, ND, 2.0f), *w = rand_dt(dt, D, 1.0f), *dout = rand_dt(dt, ND, 1.0f);
        float *dinp = rand_dt(dt, ND, 1.0f), *dw = rand_dt(dt, D, 1.0f);
        float *out = alloc_f(ND), *rstd = alloc_f(N), *dinp_ref = copy_f(dinp, ND), *dw_ref = copy_f(dw, D);
        R->rmsnorm_forward(out, rstd, x, w, N, D, eps);
        R->rmsnorm_backward(dinp_ref, dw_ref, dout, x, w, rstd, N, D);
        void *d_x = dev_from(S, dt, x, ND), *d_w = dev_from(S, dt, w, D), *d_dout = dev_from(S, dt, dout, ND);
        void *d_out = S->alloc(ND * dt_size(dt));
        float *d_rstd = S->alloc(N * sizeof(float)), *d_rstd_ref = S->alloc(N * sizeof(float));
        S->to_device(d_rstd_ref, rstd, N * sizeof(float));
        void *d_dinp = dev_from(S, dt, dinp, ND), *d_dw = dev_from(S, dt, dw, D);
        void *d_dinp2 = dev_from(S, dt, dinp, ND), *d_dw2 = dev_from(S, dt, dw, D);
        char name[160];
        S->rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, D, eps);
        snprintf(name, sizeof name, "rmsnorm_forward  %s N=%d D=%d out", dt_name(dt), N, D);
        check_dev(S, name, dt, d_out, out, ND, tol_for(dt, 0));
        snprintf(name, sizeof name, "rmsnorm_forward  %s N=%d D=%d rstd", dt_name(dt), N, D);
        check_dev(S, name, DTYPE_F32, d_rstd, rstd, N, TOL_F32);
        // backward from the CPU's rstd, so that only the backward is compared
        S->rmsnorm_backward(d_dinp, d_dw, d_dout, d_x, d_w, d_rstd_ref, N, D);
        S->rmsnorm_backward(d_dinp2, d_dw2, d_dout, d_x, d_w, d_rstd_ref, N, D);
        snprintf(name, sizeof name, "rmsnorm_backward %s N=%d D=%d dinp", dt_name(dt), N, D);
        check_dev(S, name, dt, d_dinp, dinp_ref, ND, tol_for(dt, 1));
        snprintf(name, sizeof name, "rmsnorm_backward %s N=%d D=%d dweight", dt_name(dt), N, D);
        check_dev(S, name, dt, d_dw, dw_ref, D, tol_for(dt, 1));
        snprintf(name, sizeof name, "rmsnorm_backward %s N=%d D=%d dweight reproducible", dt_name(dt), N, D);
        check_same_bytes(S, name, d_dw, d_dw2, D * dt_size(dt));
        snprintf(name, sizeof name, "rmsnorm_backward %s N=%d D=%d dinp reproducible", dt_name(dt), N, D);
        check_same_bytes(S, name, d_dinp, d_dinp2, ND * dt_size(dt));
        // rmsnorm_backward_dropout = rmsnorm_backward then dropout_forward of the new dinp, bitwise
        const DropoutArgs drops[2] = {{0.0f, 0}, {0.1f, 777}};
        for (int k = 0; k < 2; k++) {
            void *f_dinp = dev_from(S, dt, dinp, ND), *f_dw = dev_from(S, dt, dw, D), *f_next = S->alloc(ND * dt_size(dt));
            void *s_dinp = dev_from(S, dt, dinp, ND), *s_dw = dev_from(S, dt, dw, D), *s_next = S->alloc(ND * dt_size(dt));
            S->rmsnorm_backward_dropout(f_dinp, f_dw, d_dout, d_x, d_w, d_rstd_ref, N, D, f_next, drops[k]);
            S->rmsnorm_backward(s_dinp, s_dw, d_dout, d_x, d_w, d_rstd_ref, N, D);
            S->dropout_forward(s_next, s_dinp, ND, drops[k]);
            snprintf(name, sizeof name, "rmsnorm_backward_dropout %s N=%d D=%d p=%g = rmsnorm_backward, dropout_forward",
                     dt_name(dt), N, D, drops[k].p);
            check_same_bytes(S, name, f_dinp, s_dinp, ND * dt_size(dt));
            check_same_bytes(S, name, f_dw, s_dw, D * dt_size(dt));
            check_same_bytes(S, name, f_next, s_next, ND * dt_size(dt));
            FREE_SUB(S, f_dinp, f_dw, f_next, s_dinp, s_dw, s_next);
        }
        S->free(d_x);
        S->free(d_w);
        S->free(d_dout);
        S->free(d_out);
        S->free(d_rstd);
        S->free(d_rstd_ref);
        S->free(d_dinp);
        S->free(d_dw);
        S->free(d_dinp2);
        S->free(d_dw2);
        free(x);
        free(w);
        free(dout);
        free(dinp);
        free(dw);
        free(out);
        free(rstd);
        free(dinp_ref);
        free(dw_ref);
    }
}

// ---- position bias -------------------------------------------------------------------------

static void case_position_bias(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    // Tq, Tk, H, q_offset, bidirectional, num_buckets, max_distance; the order exercises the
    // device bucket cache (growth, reuse within the range, a change of num_buckets)
    static const int cases[][7] = {
        {1, 1, 1, 0, 1, 32, 128},    {7, 13, 3, 0, 1, 32, 128},   {128, 128, 16, 0, 1, 32, 128},
        {128, 128, 16, 0, 0, 32, 128}, {1, 37, 8, 36, 0, 32, 128}, {33, 300, 12, 0, 0, 32, 128},
        {512, 512, 8, 0, 1, 32, 128}, {7, 13, 3, 0, 1, 32, 128},   {64, 64, 4, 0, 1, 8, 16},
        {5, 9, 2, 3, 0, 32, 128},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int Tq = cases[c][0], Tk = cases[c][1], H = cases[c][2], qo = cases[c][3], bidir = cases[c][4];
        const int nb = cases[c][5], md = cases[c][6];
        const size_t nbias = (size_t)H * Tq * Tk, ntab = (size_t)nb * H;
        float *table = rand_dt(dt, ntab, 1.0f), *dbias = rand_dt(dt, nbias, 1.0f), *dtable = rand_dt(dt, ntab, 1.0f);
        float *bias = alloc_f(nbias), *dtable_ref = copy_f(dtable, ntab);
        R->position_bias_forward(bias, table, Tq, Tk, H, qo, nb, md, bidir);
        R->position_bias_backward(dtable_ref, dbias, Tq, Tk, H, qo, nb, md, bidir);
        void *d_table = dev_from(S, dt, table, ntab), *d_dbias = dev_from(S, dt, dbias, nbias);
        void *d_bias = S->alloc(nbias * dt_size(dt));
        void *d_dtable = dev_from(S, dt, dtable, ntab), *d_dtable2 = dev_from(S, dt, dtable, ntab);
        char name[160];
        S->position_bias_forward(d_bias, d_table, Tq, Tk, H, qo, nb, md, bidir);
        snprintf(name, sizeof name, "position_bias_forward  %s Tq=%d Tk=%d H=%d qoff=%d %s nb=%d", dt_name(dt), Tq,
                 Tk, H, qo, bidir ? "bidir" : "causal", nb);
        check_dev_exact(S, name, dt, d_bias, bias, nbias);
        S->position_bias_backward(d_dtable, d_dbias, Tq, Tk, H, qo, nb, md, bidir);
        S->position_bias_backward(d_dtable2, d_dbias, Tq, Tk, H, qo, nb, md, bidir);
        snprintf(name, sizeof name, "position_bias_backward %s Tq=%d Tk=%d H=%d qoff=%d %s nb=%d", dt_name(dt), Tq,
                 Tk, H, qo, bidir ? "bidir" : "causal", nb);
        check_dev(S, name, dt, d_dtable, dtable_ref, ntab, tol_for(dt, 1));
        snprintf(name, sizeof name, "position_bias_backward %s Tq=%d Tk=%d reproducible", dt_name(dt), Tq, Tk);
        check_same_bytes(S, name, d_dtable, d_dtable2, ntab * dt_size(dt));
        S->free(d_table);
        S->free(d_dbias);
        S->free(d_bias);
        S->free(d_dtable);
        S->free(d_dtable2);
        free(table);
        free(dbias);
        free(dtable);
        free(bias);
        free(dtable_ref);
    }
}

// ---- feed-forward activations ----------------------------------------------------------------

static const char *act_name(Activation a) {
    return a == ACT_RELU ? "relu" : a == ACT_GELU ? "gelu" : a == ACT_GELU_NEW ? "gelu_new" : "silu";
}

static const DropoutArgs NODROP = {0.0f, 0};

// The hidden dropout riding along in ffn_act_forward / ffn_act_backward (n = 4099 and the
// misaligned 333) gives the bytes of the separate ops on the same backend: act then
// dropout_forward; dropout_backward into zeros then act backward.
static void ffn_act_fused_case(const Backend *S, Dtype dt, Activation act, void *d_a, void *d_b, void *d_dout,
                               size_t n, const char *kind) {
    const size_t es = dt_size(dt);
    const DropoutArgs drop = {0.1f, 0x5eedULL + (uint64_t)n};
    void *f_out = S->alloc(n * es), *s_out = S->alloc(n * es), *tmp = S->alloc(n * es);
    void *f_da = S->alloc(n * es), *s_da = S->alloc(n * es), *f_db = S->alloc(n * es), *s_db = S->alloc(n * es);
    S->ffn_act_forward(f_out, d_a, d_b, n, act, drop);
    S->ffn_act_forward(s_out, d_a, d_b, n, act, NODROP);
    S->dropout_forward(s_out, s_out, n, drop);
    char name[160];
    snprintf(name, sizeof name, "ffn_act_forward  %s %-8s %s n=%zu +dropout = act, dropout_forward", dt_name(dt),
             act_name(act), kind, n);
    check_same_bytes(S, name, f_out, s_out, n * es);
    void *const zeroed[4] = {f_da, s_da, f_db, s_db};
    for (int k = 0; k < 4; k++) S->zero(zeroed[k], n * es);
    S->ffn_act_backward(f_da, d_b ? f_db : NULL, d_dout, d_a, d_b, n, act, drop, 0);
    S->zero(tmp, n * es);
    S->dropout_backward(tmp, d_dout, n, drop);
    S->ffn_act_backward(s_da, d_b ? s_db : NULL, tmp, d_a, d_b, n, act, NODROP, 0);
    snprintf(name, sizeof name, "ffn_act_backward %s %-8s %s n=%zu +dropout = dropout_backward, act", dt_name(dt),
             act_name(act), kind, n);
    check_same_bytes(S, name, f_da, s_da, n * es);
    if (d_b) check_same_bytes(S, name, f_db, s_db, n * es);
    // set: the old contents ignored (s_da, s_db hold the gradients now) = into zeros
    S->ffn_act_backward(s_da, d_b ? s_db : NULL, d_dout, d_a, d_b, n, act, drop, 1);
    snprintf(name, sizeof name, "ffn_act_backward %s %-8s %s n=%zu +dropout set = into zeros", dt_name(dt),
             act_name(act), kind, n);
    check_same_bytes(S, name, f_da, s_da, n * es);
    if (d_b) check_same_bytes(S, name, f_db, s_db, n * es);
    FREE_SUB(S, f_out, s_out, tmp, f_da, s_da, f_db, s_db);
}

// The plain ReLU with keep bits (relu_drop_forward / relu_drop_backward) on the subject: the
// bytes of ffn_act_forward / ffn_act_backward relu on it (with and without dropout,
// accumulating and set, aligned and misaligned), and the bits equal the oracle's exactly.
static void case_relu_drop(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    static const size_t sizes[] = {8, 336, 4104, 65544};
    const DropoutArgs drops[2] = {{0.0f, 0}, {0.1f, 0xb17ULL}};
    const size_t es = dt_size(dt);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int misalign = 0; misalign <= (sizes[s] == 336); misalign++)
            for (int k = 0; k < 2; k++) {
                const size_t n = sizes[s], off = misalign ? 1 : 0, nb = n / 8;
                const DropoutArgs d = drops[k];
                float *a = rand_dt(dt, n, 3.0f), *dout = rand_dt(dt, n, 1.0f), *da = rand_dt(dt, n, 1.0f);
                uint8_t *bits_ref = malloc(nb), *bits = malloc(nb);
                float *out_ref = alloc_f(n);
                R->relu_drop_forward(out_ref, bits_ref, a, n, d);
                char *ba = S->alloc((n + 1) * es), *bout = S->alloc((n + 1) * es), *bout2 = S->alloc((n + 1) * es);
                char *bdout = S->alloc((n + 1) * es), *bda = S->alloc((n + 1) * es), *bda2 = S->alloc((n + 1) * es);
                uint8_t *d_bits = S->alloc(nb);
                void *d_a = ba + off * es, *d_out = bout + off * es, *d_out2 = bout2 + off * es;
                void *d_dout = bdout + off * es, *d_da = bda + off * es, *d_da2 = bda2 + off * es;
                upload(S, dt, d_a, a, n);
                upload(S, dt, d_dout, dout, n);
                char name[200];
                const char *tag = misalign ? " misaligned" : "";
                S->relu_drop_forward(d_out, d_bits, d_a, n, d);
                S->ffn_act_forward(d_out2, d_a, NULL, n, ACT_RELU, d);
                snprintf(name, sizeof name, "relu_drop_forward  %s n=%zu dropout %g%s = ffn_act_forward relu", dt_name(dt), n,
                         d.p, tag);
                check_same_bytes(S, name, d_out, d_out2, n * es);
                S->to_host(bits, d_bits, nb);
                snprintf(name, sizeof name, "relu_drop_forward  %s n=%zu dropout %g%s: the bits equal the oracle's",
                         dt_name(dt), n, d.p, tag);
                test_check(!memcmp(bits, bits_ref, nb), name);
                for (int set = 0; set <= 1; set++) {
                    upload(S, dt, d_da, da, n);
                    upload(S, dt, d_da2, da, n);
                    S->relu_drop_backward(d_da, d_dout, d_bits, n, d, set);
                    S->ffn_act_backward(d_da2, NULL, d_dout, d_a, NULL, n, ACT_RELU, d, set);
                    snprintf(name, sizeof name, "relu_drop_backward %s n=%zu dropout %g%s%s = ffn_act_backward relu",
                             dt_name(dt), n, d.p, tag, set ? " set" : "");
                    check_same_bytes(S, name, d_da, d_da2, n * es);
                }
                FREE_SUB(S, ba, bout, bout2, bdout, bda, bda2, d_bits);
                free(a), free(dout), free(da), free(bits_ref), free(bits), free(out_ref);
            }
}

// dropout_add on the subject = its dropout_forward then add, bitwise; and the oracle's
// within the dtype's rounding.
static void case_dropout_add(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const size_t es = dt_size(dt), sizes[2] = {333, 65539};
    const DropoutArgs drops[2] = {{0.0f, 0}, {0.1f, 4242}};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            const size_t n = sizes[s];
            float *y = rand_dt(dt, n, 1.0f), *x = rand_dt(dt, n, 1.0f), *want = alloc_f(n);
            R->dropout_add(want, y, x, n, drops[k]);
            void *d_y = dev_from(S, dt, y, n), *d_x = dev_from(S, dt, x, n), *f = S->alloc(n * es), *sep = S->alloc(n * es);
            S->dropout_add(f, d_y, d_x, n, drops[k]);
            S->dropout_forward(sep, d_y, n, drops[k]);
            S->add(sep, sep, d_x, n);
            char name[160];
            snprintf(name, sizeof name, "dropout_add %s n=%zu p=%g = dropout_forward, add", dt_name(dt), n, drops[k].p);
            check_same_bytes(S, name, f, sep, n * es);
            snprintf(name, sizeof name, "dropout_add %s n=%zu p=%g vs oracle", dt_name(dt), n, drops[k].p);
            check_dev(S, name, dt, f, want, n, tol_for(dt, 0));
            FREE_SUB(S, d_y, d_x, f, sep);
            FREE_HOST(y, x, want);
        }
}

// dropout_add_guard on the subject = its dropout_add then clamp_fp16_overflow, bitwise, over
// a run of calls whose sums overflow fp16 (x, y near +-40000), then stay just under its
// largest value (x near 64800: a clamp to 64504 would show), then overflow again: the
// flags the calls take in turn must not carry an inf over to the next call. Other dtypes:
// dropout_add, bitwise.
static void case_dropout_add_guard(const OpsPair *P) {
    const Backend *S = P->sub;
    const Dtype dt = P->dt;
    const size_t es = dt_size(dt), sizes[2] = {333, 65539};
    const DropoutArgs drops[2] = {{0.0f, 0}, {0.1f, 4242}};
    const float big[4] = {40000.0f, 0.0f, 40000.0f, 0.0f};  // call 1: no inf (x near 64800, y small)
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            const size_t n = sizes[s];
            for (int call = 0; call < 4; call++) {
                float *y = rand_dt(dt, n, big[call] > 0 ? big[call] : 1.0f), *x = rand_dt(dt, n, big[call] > 0 ? big[call] : 1.0f);
                if (big[call] == 0.0f)
                    for (size_t i = 0; i < n; i++) x[i] = round_dt(dt, 64800.0f + x[i] * 100.0f);
                void *d_y = dev_from(S, dt, y, n), *d_x = dev_from(S, dt, x, n), *f = S->alloc(n * es), *sep = S->alloc(n * es);
                S->dropout_add_guard(f, d_y, d_x, n, drops[k]);
                S->dropout_add(sep, d_y, d_x, n, drops[k]);
                S->clamp_fp16_overflow(sep, n);
                char name[200];
                snprintf(name, sizeof name, "dropout_add_guard %s n=%zu p=%g call %d (%s) = dropout_add, clamp_fp16_overflow",
                         dt_name(dt), n, drops[k].p, call, big[call] > 0 ? "sums overflow fp16" : "near 64800, finite");
                check_same_bytes(S, name, f, sep, n * es);
                FREE_SUB(S, d_y, d_x, f, sep);
                FREE_HOST(y, x);
            }
        }
}

static void poison_dev(const Backend *S, void *d, size_t bytes) {
    unsigned char *h = xmalloc(bytes);
    memset(h, 0xff, bytes);
    S->to_device(d, h, bytes);
    free(h);
}

// residual_rmsnorm_forward on the subject = its dropout_add_guard then rmsnorm_forward,
// bitwise (x_out, out, rstd), at shapes the warp kernel takes and those it leaves to the two
// calls (odd D, D = 8192 beyond its packs, a misaligned pointer), with and without dropout,
// and with x_out in place of x_in; x_out against the oracle's add, and out / rstd against the
// oracle's norm of the subject's x_out. Outputs start poisoned (NaN bytes).
static void case_residual_rmsnorm(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const size_t es = dt_size(dt);
    static const int shapes[][3] = {{1, 13, 0},   {7, 512, 0},    {333, 1024, 0}, {64, 4096, 0},
                                    {5, 1001, 0}, {20000, 64, 0}, {3, 8192, 0},   {33, 1024, 1}};
    const DropoutArgs drops[2] = {{0.0f, 0}, {0.1f, 4242}};
    const float eps = 1e-6f;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int k = 0; k < 2; k++)
            for (int inplace = 0; inplace <= 1; inplace++) {
                const int N = shapes[c][0], D = shapes[c][1];
                const size_t ND = (size_t)N * D, off = (size_t)shapes[c][2];  // element offset: unaligned
                float *y = rand_dt(dt, ND, 1.0f), *x = rand_dt(dt, ND, 2.0f), *w = rand_dt(dt, D, 1.0f);
                float *xo_ref = alloc_f(ND);
                R->dropout_add(xo_ref, y, x, ND, drops[k]);
                char *by = S->alloc((ND + 1) * es), *bx = S->alloc((ND + 1) * es), *bx2 = S->alloc((ND + 1) * es);
                char *bxo = S->alloc((ND + 1) * es), *bxo2 = S->alloc((ND + 1) * es);
                char *bln = S->alloc((ND + 1) * es), *bln2 = S->alloc((ND + 1) * es);
                float *rstd = S->alloc(N * sizeof(float)), *rstd2 = S->alloc(N * sizeof(float));
                void *d_y = by + off * es, *d_x = bx + off * es, *d_x2 = bx2 + off * es, *d_w = dev_from(S, dt, w, D);
                void *d_xo = inplace ? d_x : bxo + off * es, *d_xo2 = inplace ? d_x2 : bxo2 + off * es;
                void *d_ln = bln + off * es, *d_ln2 = bln2 + off * es;
                upload(S, dt, d_y, y, ND);
                upload(S, dt, d_x, x, ND);
                upload(S, dt, d_x2, x, ND);
                void *poisoned[6] = {bxo, bxo2, bln, bln2, rstd, rstd2};  // NaN bytes
                for (int i = 0; i < 6; i++) poison_dev(S, poisoned[i], i < 4 ? (ND + 1) * es : N * sizeof(float));
                S->residual_rmsnorm_forward(d_xo, d_ln, rstd, d_y, d_x, d_w, N, D, eps, drops[k]);
                S->dropout_add_guard(d_xo2, d_y, d_x2, ND, drops[k]);
                S->rmsnorm_forward(d_ln2, rstd2, d_xo2, d_w, N, D, eps);
                char name[200], tag[120];
                snprintf(tag, sizeof tag, "%s N=%d D=%d p=%g%s%s", dt_name(dt), N, D, drops[k].p,
                         inplace ? " in place" : "", off ? " unaligned" : "");
                snprintf(name, sizeof name, "residual_rmsnorm_forward %s = dropout_add_guard, rmsnorm_forward", tag);
                int same = same_bytes(S, d_xo, d_xo2, ND * es) && same_bytes(S, d_ln, d_ln2, ND * es) &&
                           same_bytes(S, rstd, rstd2, N * sizeof(float));
                test_check(same, name);
                float *xo = host_from(S, dt, d_xo, ND), *ln_ref = alloc_f(ND), *rstd_ref = alloc_f(N);
                R->rmsnorm_forward(ln_ref, rstd_ref, xo, w, N, D, eps);
                snprintf(name, sizeof name, "residual_rmsnorm_forward %s x_out vs oracle", tag);
                check_dev(S, name, dt, d_xo, xo_ref, ND, tol_for(dt, 0));
                snprintf(name, sizeof name, "residual_rmsnorm_forward %s out vs oracle", tag);
                check_dev(S, name, dt, d_ln, ln_ref, ND, tol_for(dt, 0));
                snprintf(name, sizeof name, "residual_rmsnorm_forward %s rstd vs oracle", tag);
                check_dev(S, name, DTYPE_F32, rstd, rstd_ref, N, TOL_F32);
                FREE_SUB(S, by, bx, bx2, bxo, bxo2, bln, bln2, rstd, rstd2, d_w);
                FREE_HOST(y, x, w, xo_ref, xo, ln_ref, rstd_ref);
            }
}

static void case_ffn_act(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    static const size_t sizes[] = {1, 7, 333, 4099, 65539};
    const size_t es = dt_size(dt);
    for (int act = ACT_RELU; act <= ACT_SILU; act++)
        for (int gated = 0; gated <= 1; gated++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int misalign = 0; misalign <= (sizes[s] == 333); misalign++) {
                    const size_t n = sizes[s];
                    const size_t off = misalign ? 1 : 0;  // element offset: forces the scalar path
                    float *a = rand_dt(dt, n, 3.0f), *b = gated ? rand_dt(dt, n, 2.0f) : NULL;
                    float *dout = rand_dt(dt, n, 1.0f), *da = rand_dt(dt, n, 1.0f), *db = rand_dt(dt, n, 1.0f);
                    float *out = alloc_f(n), *da_ref = copy_f(da, n), *db_ref = copy_f(db, n);
                    R->ffn_act_forward(out, a, b, n, (Activation)act, NODROP);
                    R->ffn_act_backward(da_ref, gated ? db_ref : NULL, dout, a, b, n, (Activation)act, NODROP, 0);
                    char *ba = S->alloc((n + 1) * es), *bb = S->alloc((n + 1) * es);
                    char *bout = S->alloc((n + 1) * es), *bdout = S->alloc((n + 1) * es);
                    char *bda = S->alloc((n + 1) * es), *bdb = S->alloc((n + 1) * es);
                    void *d_a = ba + off * es, *d_b = gated ? bb + off * es : NULL, *d_out = bout + off * es;
                    void *d_dout = bdout + off * es, *d_da = bda + off * es, *d_db = bdb + off * es;
                    upload(S, dt, d_a, a, n);
                    if (gated) upload(S, dt, d_b, b, n);
                    upload(S, dt, d_dout, dout, n);
                    upload(S, dt, d_da, da, n);
                    upload(S, dt, d_db, db, n);
                    char name[160];
                    const char *kind = gated ? "gated" : "plain";
                    S->ffn_act_forward(d_out, d_a, d_b, n, (Activation)act, NODROP);
                    snprintf(name, sizeof name, "ffn_act_forward  %s %-8s %s n=%zu%s", dt_name(dt),
                             act_name((Activation)act), kind, n, misalign ? " misaligned" : "");
                    check_dev(S, name, dt, d_out, out, n, tol_for(dt, 0));
                    S->ffn_act_backward(d_da, d_db, d_dout, d_a, d_b, n, (Activation)act, NODROP, 0);
                    snprintf(name, sizeof name, "ffn_act_backward %s %-8s %s n=%zu%s da", dt_name(dt),
                             act_name((Activation)act), kind, n, misalign ? " misaligned" : "");
                    check_dev(S, name, dt, d_da, da_ref, n, tol_for(dt, 0));
                    if (gated) {
                        snprintf(name, sizeof name, "ffn_act_backward %s %-8s %s n=%zu%s db", dt_name(dt),
                                 act_name((Activation)act), kind, n, misalign ? " misaligned" : "");
                        check_dev(S, name, dt, d_db, db_ref, n, tol_for(dt, 0));
                    }
                    if (n == 4099 || misalign) ffn_act_fused_case(S, dt, (Activation)act, d_a, d_b, d_dout, n, kind);
                    if (n == 4099) {  // in place (out = a) gives the out-of-place bytes
                        S->ffn_act_forward(d_a, d_a, d_b, n, (Activation)act, NODROP);
                        snprintf(name, sizeof name, "ffn_act_forward  %s %-8s %s n=%zu in place", dt_name(dt),
                                 act_name((Activation)act), kind, n);
                        check_same_bytes(S, name, d_a, d_out, n * es);
                    }
                    if (gated && n == 4099) {  // db NULL: da only
                        upload(S, dt, d_da, da, n);
                        upload(S, dt, d_a, a, n);
                        S->ffn_act_backward(d_da, NULL, d_dout, d_a, d_b, n, (Activation)act, NODROP, 0);
                        snprintf(name, sizeof name, "ffn_act_backward %s %-8s gated n=%zu db=NULL da", dt_name(dt),
                                 act_name((Activation)act), n);
                        check_dev(S, name, dt, d_da, da_ref, n, tol_for(dt, 0));
                    }
                    S->free(ba);
                    S->free(bb);
                    S->free(bout);
                    S->free(bdout);
                    S->free(bda);
                    S->free(bdb);
                    free(a);
                    free(b);
                    free(dout);
                    free(da);
                    free(db);
                    free(out);
                    free(da_ref);
                    free(db_ref);
                }
}

// ---- elementwise and dropout -----------------------------------------------------------------

static void case_elementwise(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    static const size_t sizes[] = {1, 7, 333, 100003};
    const size_t es = dt_size(dt);
    const float alpha = -0.37f;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int misalign = 0; misalign <= 1; misalign++) {
            const size_t n = sizes[s], off = misalign ? 1 : 0;
            const char *mis = misalign ? " misaligned" : "";
            float *a = rand_dt(dt, n, 2.0f), *b = rand_dt(dt, n, 2.0f), *ref = alloc_f(n);
            char *ba = S->alloc((n + 1) * es), *bb = S->alloc((n + 1) * es), *bo = S->alloc((n + 1) * es);
            void *d_a = ba + off * es, *d_b = bb + off * es, *d_o = bo + off * es;
            char name[160];
            upload(S, dt, d_a, a, n);
            upload(S, dt, d_b, b, n);
            // add, out of place and in place (out = a)
            R->add(ref, a, b, n);
            S->add(d_o, d_a, d_b, n);
            snprintf(name, sizeof name, "add   %s n=%zu%s", dt_name(dt), n, mis);
            check_dev_exact(S, name, dt, d_o, ref, n);
            S->add(d_a, d_a, d_b, n);
            snprintf(name, sizeof name, "add   %s n=%zu%s in place", dt_name(dt), n, mis);
            check_dev_exact(S, name, dt, d_a, ref, n);
            // axpy: y = a; y += alpha * b
            upload(S, dt, d_a, a, n);
            memcpy(ref, a, n * sizeof(float));
            R->axpy(ref, b, alpha, n);
            S->axpy(d_a, d_b, alpha, n);
            snprintf(name, sizeof name, "axpy  %s n=%zu%s", dt_name(dt), n, mis);
            check_dev_exact(S, name, dt, d_a, ref, n);
            // scale, out of place and in place
            upload(S, dt, d_a, a, n);
            R->scale(ref, a, alpha, n);
            S->scale(d_o, d_a, alpha, n);
            snprintf(name, sizeof name, "scale %s n=%zu%s", dt_name(dt), n, mis);
            check_dev_exact(S, name, dt, d_o, ref, n);
            S->scale(d_a, d_a, alpha, n);
            snprintf(name, sizeof name, "scale %s n=%zu%s in place", dt_name(dt), n, mis);
            check_dev_exact(S, name, dt, d_a, ref, n);
            // dropout forward (out of place, in place) and backward (adds), several p
            static const float ps[] = {0.0f, 0.1f, 0.5f, 1.0f};
            for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
                DropoutArgs drop = {ps[k], 0x1234u + n + k};
                upload(S, dt, d_a, a, n);
                R->dropout_forward(ref, a, n, drop);
                S->dropout_forward(d_o, d_a, n, drop);
                snprintf(name, sizeof name, "dropout_forward  %s p=%.1f n=%zu%s", dt_name(dt), ps[k], n, mis);
                check_dev_exact(S, name, dt, d_o, ref, n);
                S->dropout_forward(d_a, d_a, n, drop);
                snprintf(name, sizeof name, "dropout_forward  %s p=%.1f n=%zu%s in place", dt_name(dt), ps[k], n, mis);
                check_dev_exact(S, name, dt, d_a, ref, n);
                upload(S, dt, d_a, a, n);  // dinp prefill = a, dout = b
                memcpy(ref, a, n * sizeof(float));
                R->dropout_backward(ref, b, n, drop);
                S->dropout_backward(d_a, d_b, n, drop);
                snprintf(name, sizeof name, "dropout_backward %s p=%.1f n=%zu%s", dt_name(dt), ps[k], n, mis);
                check_dev_exact(S, name, dt, d_a, ref, n);
            }
            S->free(ba);
            S->free(bb);
            S->free(bo);
            free(a);
            free(b);
            free(ref);
        }
}

// ---- cross-entropy ---------------------------------------------------------------------------

static void case_crossentropy(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    static const struct {
        int N, V;
        float eps;
    } cases[] = {{1, 29, 0.0f},       {7, 29, 0.1f},        {333, 29, 0.1f}, {7, 32128, 0.1f},
                 {64, 32128, 0.0f},   {64, 32128, 0.1f},    {3, 1001, 0.1f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int N = cases[c].N, V = cases[c].V;
        const float eps = cases[c].eps;
        const size_t NV = (size_t)N * V;
        int *labels = malloc(N * sizeof(int)), active = 0;
        for (int i = 0; i < N; i++) {
            labels[i] = (N > 1 && rng_u32() % 5 == 0) ? -100 : (int)(rng_u32() % V);
            active += labels[i] != -100;
        }
        const float dloss = 1.0f / (float)(active ? active : 1);
        float *x = rand_dt(dt, NV, 4.0f), *g = alloc_f(NV);
        const double loss_ref = R->crossentropy_forward_backward(g, x, labels, N, V, eps, dloss);
        int *d_lab = dev_ints(S, labels, N);
        void *d_x = dev_from(S, dt, x, NV), *d_g = S->alloc(NV * dt_size(dt)), *d_x2 = dev_from(S, dt, x, NV);
        char name[160];
        const double loss = S->crossentropy_forward_backward(d_g, d_x, d_lab, N, V, eps, dloss);
        float lf = (float)loss, lr = (float)loss_ref;
        snprintf(name, sizeof name, "crossentropy %s N=%d V=%d eps=%.1f loss (%.6f vs %.6f)", dt_name(dt), N, V, eps,
                 loss, loss_ref);
        test_close(name, &lf, &lr, 1, TOL_F32);
        snprintf(name, sizeof name, "crossentropy %s N=%d V=%d eps=%.1f dlogits", dt_name(dt), N, V, eps);
        check_dev(S, name, dt, d_g, g, NV, tol_for(dt, 1));
        // loss only; in place (dlogits = logits); reproducible
        const double loss2 = S->crossentropy_forward_backward(NULL, d_x, d_lab, N, V, eps, dloss);
        const double loss3 = S->crossentropy_forward_backward(d_x2, d_x2, d_lab, N, V, eps, dloss);
        snprintf(name, sizeof name, "crossentropy %s N=%d V=%d loss bitwise equal: no dlogits, in place", dt_name(dt),
                 N, V);
        test_check(loss2 == loss && loss3 == loss, name);
        snprintf(name, sizeof name, "crossentropy %s N=%d V=%d in place dlogits", dt_name(dt), N, V);
        check_same_bytes(S, name, d_x2, d_g, NV * dt_size(dt));
        S->free(d_lab);
        S->free(d_x);
        S->free(d_g);
        S->free(d_x2);
        free(labels);
        free(x);
        free(g);
    }
}

// ---- optimizer -------------------------------------------------------------------------------

static void case_sumsq(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    static const size_t sizes[] = {1, 7, 333, 100003, ((size_t)1 << 22) + 5};
    const size_t es = dt_size(dt);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int misalign = 0; misalign <= 1; misalign++) {
            const size_t n = sizes[s], off = misalign ? 1 : 0;
            float *g = rand_dt(dt, n, 1.0f);
            char *buf = S->alloc((n + 1) * es);
            void *d_g = buf + off * es;
            upload(S, dt, d_g, g, n);
            const double want = R->sumsq(g, n);
            const double got = S->sumsq(d_g, n), again = S->sumsq(d_g, n);
            const double rel = fabs(got - want) / want;
            char name[200];
            snprintf(name, sizeof name, "sumsq %s n=%zu%s: %.9g vs %.9g rel %.2e (tol %.0e), reproducible",
                     dt_name(dt), n, misalign ? " misaligned" : "", got, want, rel, TOL_F32);
            test_check(rel <= TOL_F32 && got == again, name);
            S->free(buf);
            free(g);
        }
}

// tensor_norms on the subject = its own tensor_norm per range, bitwise (aligned and odd
// offsets, an empty range, one range of 4M + 5 elements), and within fp32 rounding of the exact norm (the
// oracle's double sumsq: the CPU's tensor_norm follows torch's 8-lane fp32 sums, which drift
// by 1e-4 on long tensors).
static void case_tensor_norms(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    enum { NR = 7 };
    const size_t offsets[NR] = {0, 1, 8, 333, 333, 100336, 4300000}, counts[NR] = {1, 7, 325, 0, 100003, 4194309, 1024};
    const size_t total = 4301024, es = dt_size(dt);
    float *g = rand_dt(dt, total, 1.0f), got[NR];
    double want[NR];
    void *d_g = dev_from(S, dt, g, total);
    S->tensor_norms(got, d_g, offsets, counts, NR);
    for (int i = 0; i < NR; i++) want[i] = sqrt(R->sumsq(g + offsets[i], counts[i]));
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < NR; i++) {
        bad += got[i] != S->tensor_norm((const char *)d_g + offsets[i] * es, counts[i]);
        if (counts[i] == 0) {
            bad += got[i] != 0.0f;
            continue;
        }
        double rel = fabs((double)got[i] - want[i]) / want[i];
        worst = rel > worst ? rel : worst;
    }
    char name[200];
    snprintf(name, sizeof name, "tensor_norms %s, %d ranges: %d differ from tensor_norm per range, max rel %.2e vs oracle",
             dt_name(dt), NR, bad, worst);
    test_check(bad == 0 && worst <= TOL_F32, name);
    S->free(d_g);
    free(g);
}

static void case_adamw(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    static const size_t sizes[] = {1, 7, 333, 100003};
    static const struct {
        float lr, beta1, beta2, eps, wd, gscale;
        int step, with_param_out;
    } cfgs[] = {{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1, 0},
                {3e-4f, 0.9f, 0.999f, 1e-6f, 0.01f, 0.5f, 10, 1},
                {1e-2f, 0.3f, 0.98f, 1e-6f, 0.1f, 2.0f, 3, 1}};  // beta1 0.3: the w1 >= 0.5 branch
    const size_t es = dt_size(dt);
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int misalign = 0; misalign <= (sizes[s] == 333); misalign++) {
                const size_t n = sizes[s], off = misalign ? 1 : 0;
                float *master = rand_dt(DTYPE_F32, n, 1.0f), *grad = rand_dt(dt, n, 1.0f);
                float *m = rand_dt(DTYPE_F32, n, 0.1f), *v = rand_dt(DTYPE_F32, n, 0.01f);
                for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
                float *mr = copy_f(master, n), *m_r = copy_f(m, n), *v_r = copy_f(v, n);
                R->adamw_update(mr, NULL, grad, m_r, v_r, n, cfgs[c].lr, cfgs[c].beta1, cfgs[c].beta2,
                                           cfgs[c].eps, cfgs[c].wd, cfgs[c].gscale, cfgs[c].step);
                char *bmaster = S->alloc((n + 1) * 4), *bm = S->alloc((n + 1) * 4), *bv = S->alloc((n + 1) * 4);
                char *bgrad = S->alloc((n + 1) * es), *bpo = S->alloc((n + 1) * es);
                float *d_master = (float *)(bmaster + off * 4), *d_m = (float *)(bm + off * 4),
                      *d_v = (float *)(bv + off * 4);
                void *d_grad = bgrad + off * es, *d_po = cfgs[c].with_param_out ? bpo + off * es : NULL;
                S->to_device(d_master, master, n * 4);
                S->to_device(d_m, m, n * 4);
                S->to_device(d_v, v, n * 4);
                upload(S, dt, d_grad, grad, n);
                S->adamw_update(d_master, d_po, d_grad, d_m, d_v, n, cfgs[c].lr, cfgs[c].beta1, cfgs[c].beta2,
                                  cfgs[c].eps, cfgs[c].wd, cfgs[c].gscale, cfgs[c].step);
                char name[200], what[120];
                snprintf(what, sizeof what, "adamw %s cfg%zu step=%d wd=%g n=%zu%s", dt_name(dt), c, cfgs[c].step,
                         cfgs[c].wd, n, misalign ? " misaligned" : "");
                snprintf(name, sizeof name, "%s master (bitwise)", what);
                check_dev(S, name, DTYPE_F32, d_master, mr, n, 0.0);
                snprintf(name, sizeof name, "%s m (bitwise)", what);
                check_dev(S, name, DTYPE_F32, d_m, m_r, n, 0.0);
                snprintf(name, sizeof name, "%s v (bitwise)", what);
                check_dev(S, name, DTYPE_F32, d_v, v_r, n, 0.0);
                if (d_po) {
                    snprintf(name, sizeof name, "%s param_out = dtype(master)", what);
                    check_dev_exact(S, name, dt, d_po, mr, n);
                }
                S->free(bmaster);
                S->free(bm);
                S->free(bv);
                S->free(bgrad);
                S->free(bpo);
                free(master);
                free(grad);
                free(m);
                free(v);
                free(mr);
                free(m_r);
                free(v_r);
            }
}
