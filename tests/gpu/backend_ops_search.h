// tests/gpu/backend_ops_search.h: the generation-search cases of tests/gpu/test_backend_ops.c
// (beam_topk, beam_table_reorder, attention_decode), through P->ref (the CPU oracle) and P->sub (the backend under test):
//   - beam_topk: the subject's (B, K) candidates must be distinct, sorted by the rule (score
//     descending, flat index ascending), each score equal within 2e-5 of the oracle's fp32
//     candidate recomputed at the subject's index, and of the oracle's score at the same
//     rank (the CUDA log-softmax sums exp in fp32, the CPU in double: near-equal candidates
//     of different rows may trade places, which the count of index differences shows);
//     exactly the oracle's indices where the order cannot differ: greedy (the raw logits,
//     scores exact too) and identical rows of integer logits with equal beam scores (ties
//     only, broken by the index);
//     shapes: odd V (scalar loads), t5's V = 32128 (16-byte loads), K = 128 (64 beams);
//     every call twice: the same bytes;
//   - beam_table_reorder: int tables (N, cap) with cap odd and a multiple of 4 (narrow and
//     16-byte units), t = 0, 3, cap: exactly the oracle's ints, positions >= t untouched;
//   - attention_decode: per-item keys (slot_div = beams) under a padding mask, and a
//     position-major cache read through a beam table (each position's slots a permutation
//     of the rows) with a position bias; d_kv 64, 40 (not a multiple of 32), 128; within
//     attention_forward's tolerance of the oracle; every call twice: the same bytes; with the
//     position from device memory (KvView.pos, the (H, cap) bias by distance): within tolerance of
//     the oracle and bitwise the subject's call over t + 1 keys without it;
//   - kv_append: exact bytes at position t, every other position untouched.
#pragma once
#include "backend_ops.h"
#include "backend_ops_matmul_attention.h"

// The oracle's candidate value at flat index fi of item b (as kernels/cpu/search.c).
static float search_cand(const float *x, const float *bs, int b, int nb, int V, int fi) {
    const int j = fi / V, v = fi % V;
    const float *row = x + ((size_t)b * nb + j) * V;
    if (!bs) return row[v];
    float mx = row[0];
    for (int u = 1; u < V; u++) mx = row[u] > mx ? row[u] : mx;
    double sum = 0.0;
    for (int u = 0; u < V; u++) sum += exp((double)(row[u] - mx));
    return ((row[v] - mx) - (float)log(sum)) + bs[b * nb + j];
}

// Checks the subject's (B,K) output against the oracle's; returns the count of rank
// positions whose index differs.
static int search_check(const char *name, const float *x, const float *bs, int B, int nb, int V, int K,
                        const float *rv, const int *ri, const float *sv, const int *si, int exact_idx,
                        int exact_scores) {
    int bad = 0, moved = 0;
    double worst = 0.0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) {
            const int o = b * K + k, fi = si[o];
            moved += fi != ri[o];
            if (fi < 0 || fi >= nb * V) {
                bad++;
                continue;
            }
            for (int q = 0; q < k; q++) bad += si[b * K + q] == fi;  // distinct
            if (k > 0) bad += sv[o] > sv[o - 1] || (sv[o] == sv[o - 1] && fi < si[o - 1]);  // sorted by the rule
            const double d1 = fabs((double)sv[o] - search_cand(x, bs, b, nb, V, fi)), d2 = fabs((double)sv[o] - rv[o]);
            const double d = d1 > d2 ? d1 : d2;
            worst = d > worst ? d : worst;
        }
    const double tol = exact_scores ? 0.0 : 2e-5;
    char buf[300];
    snprintf(buf, sizeof buf, "%-52s %d rule violations, max |score diff| %.2e (tol %.0e), %d of %d indices moved%s",
             name, bad, worst, tol, moved, B * K, exact_idx ? " (want 0)" : "");
    test_check(bad == 0 && worst <= tol && (!exact_idx || moved == 0), buf);
    return moved;
}

// kind 0: random in the dtype (scale 8); 1: integers, every row of an item the same.
static void search_case(const OpsPair *P, int B, int nb, int V, int K, int greedy, int kind) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const size_t N = (size_t)B * nb, n = N * V;
    float *x = rand_dt(dt, n, 8.0f), *bs = rand_dt(DTYPE_F32, N, 4.0f);
    for (size_t r = 0; r < N; r++) bs[r] = kind == 1 ? -1.5f : -fabsf(bs[r]);
    if (kind == 1)
        for (size_t r = 0; r < N; r++)
            for (int v = 0; v < V; v++) x[r * V + v] = (float)((v * 7 + (int)(r / nb) * 3) % 5 - 2);
    const float *scores = greedy ? NULL : bs;
    float *rv = alloc_f((size_t)B * K), *sv = alloc_f((size_t)B * K);
    int *ri = xmalloc((size_t)B * K * sizeof(int)), *si = xmalloc((size_t)B * K * sizeof(int));
    R->beam_topk(rv, ri, x, scores, B, nb, V, K);
    void *xg = dev_from(S, dt, x, n), *bg = dev_from(S, DTYPE_F32, bs, N);
    float *vg = S->alloc((size_t)B * K * sizeof(float)), *vg2 = S->alloc((size_t)B * K * sizeof(float));
    int *ig = S->alloc((size_t)B * K * sizeof(int)), *ig2 = S->alloc((size_t)B * K * sizeof(int));
    S->beam_topk(vg, ig, xg, greedy ? NULL : bg, B, nb, V, K);
    S->beam_topk(vg2, ig2, xg, greedy ? NULL : bg, B, nb, V, K);
    S->to_host(sv, vg, (size_t)B * K * sizeof(float));
    S->to_host(si, ig, (size_t)B * K * sizeof(int));
    char name[160];
    snprintf(name, sizeof name, "beam_topk [%s B=%d beams=%d V=%d K=%d%s%s]", dt_name(dt), B, nb, V, K,
             greedy ? " greedy" : "", kind == 1 ? " ties" : "");
    search_check(name, x, scores, B, nb, V, K, rv, ri, sv, si, greedy || kind == 1, greedy);
    snprintf(name, sizeof name, "beam_topk [%s B=%d beams=%d V=%d K=%d] twice", dt_name(dt), B, nb, V, K);
    test_check(same_bytes(S, vg, vg2, (size_t)B * K * 4) && same_bytes(S, ig, ig2, (size_t)B * K * 4), name);
    FREE_SUB(S, xg, bg, vg, vg2, ig, ig2);
    FREE_HOST(x, bs, rv, sv);
    free(ri);
    free(si);
}

static void case_beam_topk(const OpsPair *P) {
    search_case(P, 2, 4, 331, 8, 0, 0);     // odd V: scalar loads
    search_case(P, 3, 5, 32128, 10, 0, 0);  // t5's vocabulary: 16-byte loads
    search_case(P, 1, 64, 1000, 128, 0, 0); // the largest K (64 beams)
    search_case(P, 2, 1, 4000, 2, 0, 0);    // one beam: no merge
    search_case(P, 2, 4, 256, 8, 0, 1);     // ties only: exactly the oracle's order
    search_case(P, 5, 1, 32128, 1, 1, 0);   // greedy: argmax of the logits
    search_case(P, 3, 1, 333, 1, 1, 1);     // greedy with ties: the first maximum
}

static void case_beam_table_reorder(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    enum { N = 6 };
    const int src_rows[N] = {2, 2, 0, 5, 1, 3}, caps[2] = {7, 16};
    int *rows_g = dev_ints(S, src_rows, N);
    for (int c = 0; c < 2; c++) {
        const int cap = caps[c], ts[3] = {0, 3, cap};
        for (int k = 0; k < 3; k++) {
            const int t = ts[k];
            int *src = xmalloc((size_t)N * cap * sizeof(int)), *want = xmalloc((size_t)N * cap * sizeof(int));
            int *got = xmalloc((size_t)N * cap * sizeof(int));
            for (int i = 0; i < N * cap; i++) src[i] = (int)rng_u32(), want[i] = -(i + 1);
            int *src_g = dev_ints(S, src, (size_t)N * cap), *dst_g = dev_ints(S, want, (size_t)N * cap);
            R->beam_table_reorder(want, src, src_rows, N, cap, t);
            S->beam_table_reorder(dst_g, src_g, rows_g, N, cap, t);
            S->to_host(got, dst_g, (size_t)N * cap * sizeof(int));
            char name[160];
            snprintf(name, sizeof name, "beam_table_reorder [N=%d cap=%d t=%d] exact, positions >= t untouched", N, cap,
                     t);
            test_check(memcmp(got, want, (size_t)N * cap * sizeof(int)) == 0, name);
            FREE_SUB(S, src_g, dst_g);
            free(src), free(want), free(got);
        }
    }
    S->free(rows_g);
}

// One attention_decode case. table: a position-major (cap, N, HK) cache through a beam
// table, with a bias (H, Tk); else per-item keys (B = N / nb, Tk, HK), slot_div nb, mask.
static void decode_case(const OpsPair *P, int N, int nb, int cap, int Tk, int H, int dk, int table) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const Tol *tl = tol_of(dt);
    const int HK = H * dk, B = N / nb;
    const size_t nkv = table ? (size_t)cap * N * HK : (size_t)B * Tk * HK, nq = (size_t)N * HK;
    float *q = rand_dt(dt, nq, 1.0f), *k = rand_dt(dt, nkv, 1.0f), *v = rand_dt(dt, nkv, 1.0f);
    float *bias = table ? rand_dt(dt, (size_t)H * Tk, 2.0f) : NULL, *want = alloc_f(nq);
    int *tab = NULL, *mask = NULL;
    if (table) {
        tab = xmalloc((size_t)N * cap * sizeof(int));
        for (int j = 0; j < cap; j++) {
            for (int i = 0; i < N; i++) tab[i * cap + j] = i;
            for (int i = N - 1; i > 0; i--) {
                int r = (int)(rng_u32() % (uint32_t)(i + 1)), x = tab[i * cap + j];
                tab[i * cap + j] = tab[r * cap + j], tab[r * cap + j] = x;
            }
        }
    } else {
        mask = xmalloc((size_t)B * Tk * sizeof(int));
        for (int b = 0; b < B; b++)
            for (int j = 0; j < Tk; j++) mask[b * Tk + j] = j < Tk - 2 * b;  // item b: 2b padding keys
    }
    KvView rv = {k, v, table ? 1 : Tk, table ? N : 1, tab, cap, table ? 1 : nb, mask, Tk, NULL};
    R->attention_decode(want, q, &rv, bias, N, Tk, H, dk);
    void *qg = dev_from(S, dt, q, nq), *kg = dev_from(S, dt, k, nkv), *vg = dev_from(S, dt, v, nkv);
    void *bg = bias ? dev_from(S, dt, bias, (size_t)H * Tk) : NULL;
    int *tg = tab ? dev_ints(S, tab, (size_t)N * cap) : NULL, *mg = mask ? dev_ints(S, mask, (size_t)B * Tk) : NULL;
    void *og = S->alloc(nq * dt_size(dt)), *og2 = S->alloc(nq * dt_size(dt));
    KvView sv = rv;
    sv.k = kg, sv.v = vg, sv.table = tg, sv.key_mask = mg;
    S->attention_decode(og, qg, &sv, bg, N, Tk, H, dk);
    S->attention_decode(og2, qg, &sv, bg, N, Tk, H, dk);
    char name[200];
    snprintf(name, sizeof name, "attention_decode [%s N=%d %s Tk=%d H=%d dk=%d]", dt_name(dt), N,
             table ? "beam table, bias" : "per item, mask", Tk, H, dk);
    check_dev(S, name, dt, og, want, nq, tl->att_fwd);
    snprintf(name, sizeof name, "attention_decode [%s N=%d Tk=%d] twice", dt_name(dt), N, Tk);
    check_same_bytes(S, name, og, og2, nq * dt_size(dt));
    if (!table) {
        // the same keys through a beam table naming each row's item (key row (i / nb) * Tk + j:
        // slot_stride 1, pos_stride 0): rows no longer share a slot, so the CUDA op takes the
        // one-row kernel; the items kernel (rows of a slot at once) must give its bits
        int *it = xmalloc((size_t)N * Tk * sizeof(int));
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Tk; j++) it[i * Tk + j] = (i / nb) * Tk + j;
        int *itg = dev_ints(S, it, (size_t)N * Tk);
        KvView tv = sv;
        tv.table = itg, tv.table_ld = Tk, tv.slot_stride = 1, tv.pos_stride = 0;
        S->attention_decode(og2, qg, &tv, bg, N, Tk, H, dk);
        snprintf(name, sizeof name, "attention_decode [%s N=%d nb=%d Tk=%d dk=%d] per item = through a table, bitwise",
                 dt_name(dt), N, nb, Tk, dk);
        check_same_bytes(S, name, og, og2, nq * dt_size(dt));
        FREE_SUB(S, itg);
        free(it);
    }
    FREE_SUB(S, qg, kg, vg, bg, tg, mg, og, og2);
    FREE_HOST(q, k, v, bias, want);
    free(tab), free(mask);
}

// attention_decode with the position from device memory (KvView.pos: a graph-replayed
// step): a position-major cache of capacity cap through a beam table, the (H, cap) bias by
// distance, position t. Against the oracle's pos path within tolerance, and bitwise against the
// subject's own call without pos over t + 1 keys with those bias entries (the same loops, the same bits).
static void decode_pos_case(const OpsPair *P, int N, int cap, int t, int H, int dk) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const Tol *tl = tol_of(dt);
    const int HK = H * dk, len = t + 1;
    const size_t nkv = (size_t)cap * N * HK, nq = (size_t)N * HK, nb = (size_t)H * cap;
    float *q = rand_dt(dt, nq, 1.0f), *k = rand_dt(dt, nkv, 1.0f), *v = rand_dt(dt, nkv, 1.0f);
    float *bias = rand_dt(dt, nb, 2.0f), *row = alloc_f((size_t)H * len), *want = alloc_f(nq);
    for (int h = 0; h < H; h++)  // the distances of keys 0..t, as an (H, t + 1) bias
        for (int j = 0; j < len; j++) row[(size_t)h * len + j] = bias[(size_t)h * cap + (size_t)(cap - 1 - t + j)];
    int *tab = xmalloc((size_t)N * cap * sizeof(int));
    for (int j = 0; j < cap; j++) {
        for (int i = 0; i < N; i++) tab[i * cap + j] = i;
        for (int i = N - 1; i > 0; i--) {
            int r = (int)(rng_u32() % (uint32_t)(i + 1)), x = tab[i * cap + j];
            tab[i * cap + j] = tab[r * cap + j], tab[r * cap + j] = x;
        }
    }
    int tpos = t;
    KvView rv = {k, v, 1, N, tab, cap, 1, NULL, 0, &tpos};
    R->attention_decode(want, q, &rv, bias, N, cap, H, dk);
    void *qg = dev_from(S, dt, q, nq), *kg = dev_from(S, dt, k, nkv), *vg = dev_from(S, dt, v, nkv);
    void *bg = dev_from(S, dt, bias, nb), *rg = dev_from(S, dt, row, (size_t)H * len);
    int *tg = dev_ints(S, tab, (size_t)N * cap), *pg = dev_ints(S, &tpos, 1);
    void *og = S->alloc(nq * dt_size(dt)), *og2 = S->alloc(nq * dt_size(dt));
    KvView sv = rv;
    sv.k = kg, sv.v = vg, sv.table = tg, sv.pos = pg;
    S->attention_decode(og, qg, &sv, bg, N, cap, H, dk);
    KvView sv2 = sv;
    sv2.pos = NULL;
    S->attention_decode(og2, qg, &sv2, rg, N, len, H, dk);
    char name[200];
    snprintf(name, sizeof name, "attention_decode pos [%s N=%d cap=%d t=%d H=%d dk=%d]", dt_name(dt), N, cap, t, H, dk);
    check_dev(S, name, dt, og, want, nq, tl->att_fwd);
    snprintf(name, sizeof name, "attention_decode pos t=%d = without pos over %d keys [%s] bitwise", t, len, dt_name(dt));
    check_same_bytes(S, name, og, og2, nq * dt_size(dt));
    FREE_SUB(S, qg, kg, vg, bg, rg, tg, pg, og, og2);
    FREE_HOST(q, k, v, bias, row, want);
    free(tab);
}

// kv_append: a step's (rows, HK) keys and values into position t (from device memory) of
// poisoned caches of cap positions; exactly the oracle's bytes, every other position
// untouched. Slots of 16-byte units and of odd byte counts (the byte path).
static void kv_append_case(const OpsPair *P, int rows, int HK, int cap, int t) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const size_t slot = (size_t)rows * HK, bytes = slot * dt_size(dt), nc = (size_t)cap * slot;
    float *kc = rand_dt(dt, nc, 1.0f), *vc = rand_dt(dt, nc, 1.0f), *kn = rand_dt(dt, slot, 1.0f),
          *vn = rand_dt(dt, slot, 1.0f);
    void *kcg = dev_from(S, dt, kc, nc), *vcg = dev_from(S, dt, vc, nc), *kng = dev_from(S, dt, kn, slot),
         *vng = dev_from(S, dt, vn, slot);
    int tpos = t, *pg = dev_ints(S, &tpos, 1);
    S->kv_append(kcg, vcg, kng, vng, pg, bytes);
    // the oracle on the fp32 copies (a byte copy: the same in every dtype, compared in it)
    R->kv_append(kc, vc, kn, vn, &tpos, slot * sizeof(float));
    char name[200];
    snprintf(name, sizeof name, "kv_append K [%s rows=%d HK=%d cap=%d t=%d, %zu bytes] exact, other positions untouched",
             dt_name(dt), rows, HK, cap, t, bytes);
    check_dev(S, name, dt, kcg, kc, nc, 0.0);
    snprintf(name, sizeof name, "kv_append V [%s rows=%d HK=%d cap=%d t=%d] exact", dt_name(dt), rows, HK, cap, t);
    check_dev(S, name, dt, vcg, vc, nc, 0.0);
    FREE_SUB(S, kcg, vcg, kng, vng, pg);
    FREE_HOST(kc, vc, kn, vn);
}

// qkv_append: one fused GEMM's (rows, q | k | v) output split into q and position t of
// poisoned caches of cap positions: exactly the oracle's bytes, q whole, every other cache
// position untouched. Parts of 16-byte units and of odd byte counts (the byte path).
static void qkv_append_case(const OpsPair *P, int rows, int HK, int cap, int t) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const size_t slot = (size_t)rows * HK, part = (size_t)HK * dt_size(dt), nc = (size_t)cap * slot;
    float *kc = rand_dt(dt, nc, 1.0f), *vc = rand_dt(dt, nc, 1.0f), *qkv = rand_dt(dt, 3 * slot, 1.0f),
          *q = rand_dt(dt, slot, 1.0f);
    void *kcg = dev_from(S, dt, kc, nc), *vcg = dev_from(S, dt, vc, nc), *qkvg = dev_from(S, dt, qkv, 3 * slot),
         *qg = dev_from(S, dt, q, slot);
    int tpos = t, *pg = dev_ints(S, &tpos, 1);
    S->qkv_append(qg, kcg, vcg, qkvg, pg, (size_t)rows, part);
    // the oracle on the fp32 copies (a byte copy: the same in every dtype, compared in it)
    R->qkv_append(q, kc, vc, qkv, &tpos, (size_t)rows, (size_t)HK * sizeof(float));
    char name[200];
    snprintf(name, sizeof name, "qkv_append q [%s rows=%d HK=%d cap=%d t=%d, parts of %zu bytes] exact", dt_name(dt),
             rows, HK, cap, t, part);
    check_dev(S, name, dt, qg, q, slot, 0.0);
    snprintf(name, sizeof name, "qkv_append K [%s rows=%d HK=%d cap=%d t=%d] exact, other positions untouched",
             dt_name(dt), rows, HK, cap, t);
    check_dev(S, name, dt, kcg, kc, nc, 0.0);
    snprintf(name, sizeof name, "qkv_append V [%s rows=%d HK=%d cap=%d t=%d] exact", dt_name(dt), rows, HK, cap, t);
    check_dev(S, name, dt, vcg, vc, nc, 0.0);
    FREE_SUB(S, kcg, vcg, qkvg, qg, pg);
    FREE_HOST(kc, vc, qkv, q);
}

static void case_qkv_append(const OpsPair *P) {
    qkv_append_case(P, 256, 1024, 20, 0);   // t5-large, 64 x 4 beams: the first position
    qkv_append_case(P, 256, 1024, 20, 19);  // the last
    qkv_append_case(P, 3, 5, 7, 4);         // odd: 5-element parts, the byte path
}

static void case_kv_append(const OpsPair *P) {
    kv_append_case(P, 256, 1024, 20, 0);   // t5-large's slot, 64 x 4 beams: the first position
    kv_append_case(P, 256, 1024, 20, 19);  // the last
    kv_append_case(P, 3, 5, 7, 4);         // odd: 15 elements a slot, the byte path
}

static void case_attention_decode(const OpsPair *P) {
    decode_pos_case(P, 64, 127, 99, 16, 64);  // t5-large heads, a position inside the capacity
    decode_pos_case(P, 8, 9, 0, 3, 40);       // the first step
    decode_pos_case(P, 6, 33, 32, 2, 128);    // the last position of the capacity
    decode_case(P, 12, 4, 0, 37, 16, 64, 0);   // cross-attention: 3 items x 4 beams
    decode_case(P, 64, 1, 127, 100, 16, 64, 1); // self-attention through a beam table (t5-large heads)
    decode_case(P, 8, 1, 9, 1, 3, 40, 1);      // the first step; d_kv 40
    decode_case(P, 6, 2, 0, 300, 2, 128, 0);    // d_kv 128 (t5-11b), long source
    decode_case(P, 10, 5, 0, 70, 4, 32, 0);     // d_kv 32: 4 (bf16) or 8 (fp32) lanes a key, 2 items x 5 beams
    decode_case(P, 256, 4, 0, 98, 16, 64, 0);   // the eval's cross-attention: 64 items x 4 beams, t5-large heads
    decode_case(P, 21, 7, 0, 45, 2, 64, 0);     // 7 beams: a slot in two blocks (4 + 3 rows)
}
