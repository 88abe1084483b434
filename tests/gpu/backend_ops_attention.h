// tests/gpu/backend_ops_attention.h: the attention cases (ATT_CASES, attention_case) of
// tests/gpu/test_backend_ops.c (through backend_ops_matmul_attention.h's case_attention, on
// the CUDA backend) and of tests/test_flash_emu.c (the tile kernels emulated on the CPU), and
// the tolerances both groups share (Tol, tol_of; the figures in backend_ops_matmul_attention.h).
// Nothing here names CUDA: the subject is any Backend.
#pragma once
#include "backend_ops.h"

typedef struct {
    Dtype dt;
    double mm, mm_long_k, mm_acc, att_fwd, att_bwd;  // mm_acc: factor for backward into prefilled buffers
} Tol;
static const Tol TOLS[] = {
    {DTYPE_F32, 1e-5, 2e-5, 1.0, 1e-5, 2e-5},
    {DTYPE_BF16, 5e-3, 5e-3, 2.0, 3e-2, 3e-2},
    {DTYPE_F16, 1e-3, 1e-3, 2.0, 5e-3, 5e-3},
};

static const Tol *tol_of(Dtype dt) {
    for (size_t i = 0; i < sizeof TOLS / sizeof TOLS[0]; i++)
        if (TOLS[i].dt == dt) return &TOLS[i];
    return &TOLS[0];
}

// ---- attention -----------------------------------------------------------------------------------

typedef struct {
    const char *label;
    int B, H, Tq, Tk, kv_rows, dk;
    int use_mask, all_masked_batch, use_bias, causal, q_offset;
    float p;
} AttCase;

static int key_masked(const int *mask, int kv_rows, int b, int j, int causal, int qpos) {
    return (mask && mask[(size_t)b * kv_rows + j] == 0) || (causal && j > qpos);
}

// One case's host data: inputs rounded to the dtype, keys/values with kv_rows rows per
// batch entry (the subject's) and their dense first Tk rows (the oracle's), and the masks.
typedef struct {
    int B, H, Tq, Tk, KR, DK;
    size_t HD, nq, nkv, nk, nbias, natt;
    float *q, *kf, *vf, *bias, *kc, *vc;
    int *mask, *maskc;  // (B, kv_rows) for the subject, (B, Tk) for the oracle; NULL: none
    DropoutArgs drop;
    char tag[200];
} AttData;

static void att_data_make(AttData *d, Dtype dt, const AttCase *c) {
    memset(d, 0, sizeof *d);
    const int B = d->B = c->B, H = d->H = c->H, Tq = d->Tq = c->Tq, Tk = d->Tk = c->Tk, KR = d->KR = c->kv_rows;
    const int DK = d->DK = c->dk;
    const size_t HD = d->HD = (size_t)H * DK;
    d->nq = (size_t)B * Tq * HD, d->nkv = (size_t)B * KR * HD, d->nk = (size_t)B * Tk * HD;
    d->nbias = (size_t)H * Tq * Tk, d->natt = (size_t)B * H * Tq * Tk;
    snprintf(d->tag, sizeof d->tag, "%s %s B=%d H=%d Tq=%d Tk=%d kv_rows=%d dk=%d", dt_name(dt), c->label, B, H, Tq,
             Tk, KR, DK);
    float *q = d->q = rand_dt(dt, d->nq, 0.6f), *kf = d->kf = rand_dt(dt, d->nkv, 0.6f);
    float *vf = d->vf = rand_dt(dt, d->nkv, 1.0f);
    (void)q;
    for (int b = 0; b < B; b++)  // cache rows past Tk: values that would show if read
        for (int j = Tk; j < KR; j++)
            for (size_t e = 0; e < HD; e++) kf[((size_t)b * KR + j) * HD + e] = vf[((size_t)b * KR + j) * HD + e] = 100.0f;
    d->bias = c->use_bias ? rand_dt(dt, d->nbias, 1.0f) : NULL;
    if (c->use_mask) {
        int *mask = d->mask = xmalloc((size_t)B * KR * sizeof(int));
        for (int b = 0; b < B; b++)
            for (int j = 0; j < KR; j++)
                mask[(size_t)b * KR + j] = j < Tk ? j < Tk - 2 - 2 * b : (j & 1);  // end padding; past Tk: ignored
        mask[1] = 0;                                                                // a hole
        if (c->all_masked_batch)
            for (int j = 0; j < Tk; j++) mask[(size_t)(B - 1) * KR + j] = 0;
        d->maskc = xmalloc((size_t)B * Tk * sizeof(int));
        for (int b = 0; b < B; b++)
            for (int j = 0; j < Tk; j++) d->maskc[(size_t)b * Tk + j] = mask[(size_t)b * KR + j];
    }
    // dense (B,Tk,HD) keys and values for the CPU
    d->kc = xmalloc(d->nk * sizeof(float)), d->vc = xmalloc(d->nk * sizeof(float));
    for (int b = 0; b < B; b++) {
        memcpy(d->kc + (size_t)b * Tk * HD, kf + (size_t)b * KR * HD, (size_t)Tk * HD * sizeof(float));
        memcpy(d->vc + (size_t)b * Tk * HD, vf + (size_t)b * KR * HD, (size_t)Tk * HD * sizeof(float));
    }
    d->drop = (DropoutArgs){c->p, 0x5eed0000ULL + (uint64_t)Tq * 131 + (uint64_t)Tk};
}

static void att_data_free(AttData *d) {
    FREE_HOST(d->q, d->kf, d->vf, d->bias, d->kc, d->vc);
    free(d->mask);
    free(d->maskc);
}

// The subject's copies of the inputs, and its outputs (out, att) of two forward calls.
typedef struct {
    void *q, *k, *v, *bias, *out, *att, *out2, *att2;
    int *mask;
} AttDev;

// Masked probabilities exactly 0, and rows with every key masked give out = 0.
static void att_check_zeros(const AttData *d, const AttCase *c, const float *att, const float *out) {
    int zeros_ok = 1, full_rows = 0;
    for (int b = 0; b < d->B; b++)
        for (int h = 0; h < d->H; h++)
            for (int i = 0; i < d->Tq; i++) {
                const float *prow = att + (((size_t)b * d->H + h) * d->Tq + i) * d->Tk;
                int any = 0;
                for (int j = 0; j < d->Tk; j++) {
                    int masked = key_masked(d->mask, d->KR, b, j, c->causal, c->q_offset + i);
                    if (masked) zeros_ok &= prow[j] == 0.0f;
                    any |= !masked;
                }
                if (!any) {
                    full_rows++;
                    for (size_t e = 0; e < (size_t)d->DK; e++)
                        zeros_ok &= out[((size_t)b * d->Tq + i) * d->HD + h * d->DK + e] == 0.0f;
                }
            }
    char name[320];
    snprintf(name, sizeof name, "attention_forward [%s] masked keys exactly 0, %d fully masked rows output 0", d->tag,
             full_rows);
    test_check(zeros_ok, name);
}

// Forward on both backends and its checks; returns the subject's probabilities (host,
// for the backward) and sets *mem_before / *mem_mid around the repeated call.
static float *att_forward(const OpsPair *P, const Tol *t, const AttCase *c, const AttData *d, AttDev *g,
                          size_t *mem_before, size_t *mem_mid) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = t->dt;
    const size_t es = dt_size(dt);
    float *out_c = xmalloc(d->nq * sizeof(float)), *att_c = xmalloc(d->natt * sizeof(float));
    R->attention_forward(out_c, att_c, d->q, d->kc, d->vc, d->bias, d->maskc, d->B, d->Tq, d->Tk, d->Tk, d->H, d->DK,
                         c->causal, c->q_offset, d->drop);
    g->q = dev_from(S, dt, d->q, d->nq), g->k = dev_from(S, dt, d->kf, d->nkv), g->v = dev_from(S, dt, d->vf, d->nkv);
    g->bias = d->bias ? dev_from(S, dt, d->bias, d->nbias) : NULL;
    g->mask = d->mask ? dev_ints(S, d->mask, (size_t)d->B * d->KR) : NULL;
    g->out = S->alloc(d->nq * es), g->att = S->alloc(d->natt * es);
    g->out2 = S->alloc(d->nq * es), g->att2 = S->alloc(d->natt * es);
    S->attention_forward(g->out, g->att, g->q, g->k, g->v, g->bias, g->mask, d->B, d->Tq, d->Tk, d->KR, d->H, d->DK,
                         c->causal, c->q_offset, d->drop);
    *mem_before = S->mem_in_use();
    S->attention_forward(g->out2, g->att2, g->q, g->k, g->v, g->bias, g->mask, d->B, d->Tq, d->Tk, d->KR, d->H, d->DK,
                         c->causal, c->q_offset, d->drop);
    *mem_mid = S->mem_in_use();
    float *out = host_from(S, dt, g->out, d->nq), *att = host_from(S, dt, g->att, d->natt);
    char name[320];
    snprintf(name, sizeof name, "attention_forward [%s] att", d->tag);
    test_close(name, att, att_c, d->natt, t->att_fwd);
    snprintf(name, sizeof name, "attention_forward [%s] out", d->tag);
    test_close(name, out, out_c, d->nq, t->att_fwd);
    att_check_zeros(d, c, att, out);
    snprintf(name, sizeof name, "attention_forward [%s] repeated call bitwise equal (att, out)", d->tag);
    test_check(same_bytes(S, g->att, g->att2, d->natt * es) && same_bytes(S, g->out, g->out2, d->nq * es), name);
    FREE_HOST(out_c, att_c, out);
    return att;
}

// The subject's gradient buffers of three backward calls (the third without dbias).
typedef struct {
    void *dout, *dq[3], *dk[3], *dv[3], *db[3];
} AttGrads;

static void att_backward_checks(const OpsPair *P, const Tol *t, const AttData *d, const AttGrads *gr,
                                const float *const ref[4], int with_bias) {
    const Backend *S = P->sub;
    const Dtype dt = t->dt;
    const size_t es = dt_size(dt);
    static const char *what[4] = {"dq", "dk", "dv", "dbias"};
    const size_t n[4] = {d->nq, d->nk, d->nk, d->nbias};
    void *const first[4] = {gr->dq[0], gr->dk[0], gr->dv[0], gr->db[0]};
    char name[320];
    for (int i = 0; i < (with_bias ? 4 : 3); i++) {
        float *got = host_from(S, dt, first[i], n[i]);
        snprintf(name, sizeof name, "attention_backward [%s] %s (+= prefill)", d->tag, what[i]);
        test_close(name, got, ref[i], n[i], t->att_bwd);
        free(got);
    }
    int same = same_bytes(S, gr->dq[0], gr->dq[1], d->nq * es) && same_bytes(S, gr->dk[0], gr->dk[1], d->nk * es) &&
               same_bytes(S, gr->dv[0], gr->dv[1], d->nk * es) &&
               (!with_bias || same_bytes(S, gr->db[0], gr->db[1], d->nbias * es));
    snprintf(name, sizeof name, "attention_backward [%s] repeated call bitwise equal", d->tag);
    test_check(same, name);
    same = same_bytes(S, gr->dq[0], gr->dq[2], d->nq * es) && same_bytes(S, gr->dk[0], gr->dk[2], d->nk * es) &&
           same_bytes(S, gr->dv[0], gr->dv[2], d->nk * es);
    snprintf(name, sizeof name, "attention_backward [%s] dbias NULL: same dq, dk, dv bitwise", d->tag);
    test_check(same, name);
}

// Backward (dense: kv_rows == Tk) on both backends from the subject's saved
// probabilities `att`, into prefilled gradients; *mem_b0 / *mem_b1 around repeated calls.
static void att_backward(const OpsPair *P, const Tol *t, const AttData *d, const AttDev *g, const float *att,
                         size_t *mem_b0, size_t *mem_b1) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = t->dt;
    const int with_bias = d->bias != NULL;
    float *dout = rand_dt(dt, d->nq, 1.0f), *pq = rand_dt(dt, d->nq, 0.1f), *pk = rand_dt(dt, d->nk, 0.1f),
          *pv = rand_dt(dt, d->nk, 0.1f), *pb = with_bias ? rand_dt(dt, d->nbias, 0.1f) : NULL;
    float *dq_c = copy_f(pq, d->nq), *dk_c = copy_f(pk, d->nk), *dv_c = copy_f(pv, d->nk),
          *db_c = pb ? copy_f(pb, d->nbias) : NULL;
    // both sides differentiate the subject's saved probabilities
    R->attention_backward(dq_c, dk_c, dv_c, db_c, dout, att, d->q, d->kc, d->vc, d->B, d->Tq, d->Tk, d->H, d->DK,
                          d->drop, 0, 0, 0);
    AttGrads gr = {.dout = dev_from(S, dt, dout, d->nq)};
    for (int r = 0; r < 3; r++) {
        gr.dq[r] = dev_from(S, dt, pq, d->nq);
        gr.dk[r] = dev_from(S, dt, pk, d->nk);
        gr.dv[r] = dev_from(S, dt, pv, d->nk);
        gr.db[r] = pb && r < 2 ? dev_from(S, dt, pb, d->nbias) : NULL;
    }
    for (int r = 0; r < 3; r++) {
        if (r == 1) *mem_b0 = S->mem_in_use();
        S->attention_backward(gr.dq[r], gr.dk[r], gr.dv[r], gr.db[r], gr.dout, g->att, g->q, g->k, g->v, d->B, d->Tq,
                              d->Tk, d->H, d->DK, d->drop, 0, 0, 0);
    }
    {  // dqkv_set: the prefills are overwritten, the result is the oracle's into zeros
        float *zq = alloc_f(d->nq), *zk = alloc_f(d->nk), *zv = alloc_f(d->nk);
        R->attention_backward(zq, zk, zv, NULL, dout, att, d->q, d->kc, d->vc, d->B, d->Tq, d->Tk, d->H, d->DK,
                              d->drop, 0, 0, 0);
        void *sq = dev_from(S, dt, pq, d->nq), *sk = dev_from(S, dt, pk, d->nk), *sv = dev_from(S, dt, pv, d->nk);
        S->attention_backward(sq, sk, sv, NULL, gr.dout, g->att, g->q, g->k, g->v, d->B, d->Tq, d->Tk, d->H, d->DK,
                              d->drop, 1, 0, 0);
        char name[200];
        snprintf(name, sizeof name, "attention_backward [%s B=%d Tq=%d Tk=%d] dqkv_set dq", dt_name(dt), d->B, d->Tq,
                 d->Tk);
        check_dev(S, name, dt, sq, zq, d->nq, t->att_bwd);
        snprintf(name, sizeof name, "attention_backward [%s B=%d Tq=%d Tk=%d] dqkv_set dk, dv", dt_name(dt), d->B,
                 d->Tq, d->Tk);
        check_dev(S, name, dt, sk, zk, d->nk, t->att_bwd);
        check_dev(S, name, dt, sv, zv, d->nk, t->att_bwd);
        {  // row strides (backend.h ld_dq, ld_dkv): dq rows 2 HD apart, dk and dv interleaved as model/block.c has them
            const size_t HD = (size_t)d->H * d->DK, rq = d->nq / HD, rk = d->nk / HD, es = dt_size(dt);
            float *fill = rand_dt(dt, 2 * (rq > rk ? rq : rk) * HD, 0.1f);
            void *iq = dev_from(S, dt, fill, rq * 2 * HD), *ikv = dev_from(S, dt, fill, rk * 2 * HD);
            S->attention_backward(iq, ikv, (char *)ikv + HD * es, NULL, gr.dout, g->att, g->q, g->k, g->v, d->B, d->Tq,
                                  d->Tk, d->H, d->DK, d->drop, 1, (int)(2 * HD), (int)(2 * HD));
            float *hq = host_from(S, dt, iq, rq * 2 * HD), *hkv = host_from(S, dt, ikv, rk * 2 * HD);
            float *gq = alloc_f(d->nq), *gk = alloc_f(d->nk), *gv = alloc_f(d->nk);
            int gaps = 1;  // dq's second half of each row untouched
            for (size_t r = 0; r < rq; r++) {
                memcpy(gq + r * HD, hq + r * 2 * HD, HD * sizeof(float));
                gaps &= !memcmp(hq + r * 2 * HD + HD, fill + r * 2 * HD + HD, HD * sizeof(float));
            }
            for (size_t r = 0; r < rk; r++) {
                memcpy(gk + r * HD, hkv + r * 2 * HD, HD * sizeof(float));
                memcpy(gv + r * HD, hkv + r * 2 * HD + HD, HD * sizeof(float));
            }
            snprintf(name, sizeof name, "attention_backward [%s B=%d Tq=%d Tk=%d] row strides: dq", dt_name(dt), d->B,
                     d->Tq, d->Tk);
            test_close(name, gq, zq, d->nq, t->att_bwd);
            snprintf(name, sizeof name, "attention_backward [%s B=%d Tq=%d Tk=%d] row strides: dk, dv interleaved",
                     dt_name(dt), d->B, d->Tq, d->Tk);
            test_close(name, gk, zk, d->nk, t->att_bwd);
            test_close(name, gv, zv, d->nk, t->att_bwd);
            snprintf(name, sizeof name, "attention_backward [%s B=%d Tq=%d Tk=%d] row strides: the gaps untouched",
                     dt_name(dt), d->B, d->Tq, d->Tk);
            test_check(gaps, name);
            FREE_SUB(S, iq, ikv);
            FREE_HOST(fill, hq, hkv, gq, gk, gv);
        }
        FREE_SUB(S, sq, sk, sv);
        FREE_HOST(zq, zk, zv);
    }
    *mem_b1 = S->mem_in_use();
    const float *const ref[4] = {dq_c, dk_c, dv_c, db_c};
    att_backward_checks(P, t, d, &gr, ref, with_bias);
    S->free(gr.dout);
    for (int r = 0; r < 3; r++) FREE_SUB(S, gr.dq[r], gr.dk[r], gr.dv[r], gr.db[r]);
    FREE_HOST(dout, pq, pk, pv, pb, dq_c, dk_c, dv_c, db_c);
}

static void attention_case(const OpsPair *P, const Tol *t, const AttCase *c) {
    const Backend *S = P->sub;
    AttData d;
    att_data_make(&d, t->dt, c);
    AttDev g;
    size_t mem_before, mem_mid, mem_b0 = 0, mem_b1 = 0;
    float *att = att_forward(P, t, c, &d, &g, &mem_before, &mem_mid);
    char name[320];
    if (d.KR == d.Tk) {  // backward is dense (backend.h)
        att_backward(P, t, &d, &g, att, &mem_b0, &mem_b1);
        snprintf(name, sizeof name, "attention [%s] repeated calls allocate nothing (%zu -> %zu -> %zu bytes)", d.tag,
                 mem_before, mem_b0, mem_b1);
        test_check(mem_before == mem_mid && mem_b0 == mem_b1, name);
    } else {
        snprintf(name, sizeof name, "attention [%s] repeated forward allocates nothing (%zu -> %zu bytes)", d.tag,
                 mem_before, mem_mid);
        test_check(mem_before == mem_mid, name);
    }
    FREE_SUB(S, g.q, g.k, g.v, g.bias, g.mask, g.out, g.att, g.out2, g.att2);
    free(att);
    att_data_free(&d);
}

static const AttCase ATT_CASES[] = {
    // label                                   B   H  Tq  Tk  kvr  dk mask full bias causal qoff  p
    {"plain", 3, 3, 7, 11, 11, 5, 0, 0, 0, 0, 0, 0.0f},
    {"mask+bias", 3, 3, 7, 11, 11, 5, 1, 0, 1, 0, 0, 0.0f},
    {"causal+mask+bias", 3, 3, 7, 7, 7, 5, 1, 0, 1, 1, 0, 0.0f},
    {"causal q_offset=4 +bias", 3, 3, 7, 11, 11, 5, 0, 0, 1, 1, 4, 0.0f},
    {"cross Tq!=Tk mask, no bias", 3, 3, 7, 11, 11, 5, 1, 0, 0, 0, 0, 0.0f},
    {"mask+bias+dropout 0.1", 3, 3, 7, 11, 11, 5, 1, 0, 1, 0, 0, 0.1f},
    {"causal+bias+dropout 0.1", 3, 3, 7, 7, 7, 5, 0, 0, 1, 1, 0, 0.1f},
    {"one batch row fully masked +bias", 3, 3, 7, 11, 11, 5, 1, 1, 1, 0, 0, 0.0f},
    {"kv cache (fwd only) mask+bias causal q_offset=4", 3, 3, 7, 11, 14, 5, 1, 0, 1, 1, 4, 0.0f},
    {"decode step (fwd only) Tq=1 causal q_offset=8", 3, 3, 1, 9, 16, 5, 1, 0, 1, 1, 8, 0.0f},
    {"kv cache, vector softmax (fwd only) mask+bias+dropout", 3, 3, 4, 12, 16, 8, 1, 0, 1, 1, 8, 0.1f},
    {"Tk=300 (vector softmax) causal q_offset=295 mask+dropout", 2, 2, 5, 300, 300, 16, 1, 0, 0, 1, 295, 0.1f},
    {"Tk=301 (scalar softmax) mask+bias+dropout", 2, 2, 5, 301, 301, 16, 1, 0, 1, 0, 0, 0.1f},
    {"Tk=1100 (looping softmax) mask+bias+dropout", 1, 2, 3, 1100, 1100, 8, 1, 0, 1, 0, 0, 0.1f},
    {"t5-large encoder self mask+bias+dropout", 4, 16, 128, 128, 128, 64, 1, 0, 1, 0, 0, 0.1f},
    {"t5-large decoder self causal+bias+dropout", 4, 16, 128, 128, 128, 64, 0, 0, 1, 1, 0, 0.1f},
    {"t5-large cross Tq=96 Tk=128 mask+dropout", 4, 16, 96, 128, 128, 64, 1, 0, 0, 0, 0, 0.1f},
    // the fused kernels' edges (attention_fused.cu: d_kv 64/128, Tq, Tk <= 128; fp32 takes the GEMMs)
    {"fused dk=64 Tq=7 Tk=11 (odd, padded) mask+bias+dropout", 3, 3, 7, 11, 11, 64, 1, 0, 1, 0, 0, 0.1f},
    {"fused dk=64 causal q_offset=4 +bias+dropout", 2, 3, 7, 11, 11, 64, 0, 0, 1, 1, 4, 0.1f},
    {"fused dk=64 Tq=20 Tk=36 one batch row fully masked +bias", 3, 2, 20, 36, 36, 64, 1, 1, 1, 0, 0, 0.0f},
    {"fused dk=64 kv cache (fwd only) Tk=33 kv_rows=40 causal q_offset=16", 2, 2, 17, 33, 40, 64, 1, 0, 1, 1, 16, 0.1f},
    {"fused dk=64 Tq=Tk=128 p=0 mask", 2, 4, 128, 128, 128, 64, 1, 0, 0, 0, 0, 0.0f},
    {"fused dk=128 (t5-3b) Tq=Tk=128 mask+bias+dropout", 2, 4, 128, 128, 128, 128, 1, 0, 1, 0, 0, 0.1f},
    {"Tk=129 past the fused limit dk=64 mask+bias+dropout", 1, 2, 5, 129, 129, 64, 1, 0, 1, 0, 0, 0.1f},
    // attention_flash.cu's forward (bf16/fp16, d_kv 64, even Tk <= 128; 128 query rows a block)
    {"flash Tq=7 Tk=38 (padded keys) mask+bias+dropout", 3, 3, 7, 38, 38, 64, 1, 0, 1, 0, 0, 0.1f},
    {"flash Tq=130 (2 row tiles, the second of 2 rows) Tk=128 causal+bias+dropout", 2, 2, 130, 128, 128, 64, 0, 0, 1, 1, 0, 0.1f},
    {"flash Tk=64 (8 key tiles) Tq=96 cross mask+dropout", 3, 4, 96, 64, 64, 64, 1, 0, 0, 0, 0, 0.1f},
    {"flash Tk=2 Tq=5 one batch row fully masked", 3, 2, 5, 2, 2, 64, 1, 1, 0, 0, 0, 0.1f},
    {"flash kv cache (fwd only) Tk=40 kv_rows=48 causal q_offset=30 +bias", 2, 2, 10, 40, 48, 64, 1, 0, 1, 1, 30, 0.1f},
    // attention_flash_backward.cu (also Tq <= 128): 16 key tiles with keys past Tk, a hash per pair (Tk % 4 == 2)
    {"flash Tq=33 Tk=98 mask+bias+dropout", 2, 3, 33, 98, 98, 64, 1, 0, 1, 0, 0, 0.1f},
};
