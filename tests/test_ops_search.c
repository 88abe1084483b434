// tests/test_ops_search.c: the CPU twins of the generation-search ops (kernels/cpu/search.c)
// against plain references:
//   - beam_topk against "every candidate computed as model/generate.c computes it (fp32
//     log_softmax, sum in double, + the beam score), all beams*V sorted by (score desc,
//     flat index asc), the first K kept": random logits, logits with many exact ties,
//     -inf logits, beams 1..5, K from 1 to 2*beams, and greedy (no beam scores): the raw
//     logits' first maximum, as torch.argmax;
//   - beam_table_reorder against a loop over (row, position), positions >= t untouched;
//   - attention_decode = attention_forward with one query (bitwise: the same operations),
//     keys read per item through slot_div with a padding mask (cross-attention), and
//     through a beam table over a position-major cache (self-attention);
//   - the one-line errors of bad arguments.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../kernels/backend.h"
#include "../kernels/cpu/cpu_ops.h"
#include "test.h"
#include "test_fork.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint32_t rnd(void) {  // xorshift64*
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1DULL) >> 32);
}
static float rnd_unit(void) { return (float)(rnd() >> 8) * 0x1.0p-24f; }

typedef struct {
    float s;
    int i;
} Cand;

static int cand_order(const void *a_, const void *b_) {
    const Cand *a = a_, *b = b_;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

// The plain reference: every candidate of item b, sorted, the first K.
static void ref_beam_topk(float *val, int *idx, const float *x, const float *bs, int B, int nb, int V, int K) {
    Cand *c = malloc((size_t)nb * V * sizeof *c);
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < nb; j++) {
            const float *row = x + ((size_t)b * nb + j) * V;
            float mx = row[0];
            for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
            double sum = 0.0;
            for (int v = 0; v < V; v++) sum += exp((double)(row[v] - mx));
            const float lse = (float)log(sum);
            for (int v = 0; v < V; v++) {
                float lsm = (row[v] - mx) - lse;
                c[j * V + v] = (Cand){bs ? lsm + bs[b * nb + j] : row[v], j * V + v};
            }
        }
        qsort(c, (size_t)nb * V, sizeof *c, cand_order);
        for (int k = 0; k < K; k++) {
            val[b * K + k] = c[k].s;
            idx[b * K + k] = c[k].i;
        }
    }
    free(c);
}

// kind 0: uniform in [-8, 8); 1: integers in [-3, 3] (many exact ties); 2: as 0 with a
// third of the entries -inf (HF's masked tokens)
static void fill_logits(float *x, size_t n, int kind) {
    for (size_t i = 0; i < n; i++) {
        if (kind == 1) x[i] = (float)((int)(rnd() % 7) - 3);
        else x[i] = 16.0f * rnd_unit() - 8.0f;
        if (kind == 2 && rnd() % 3 == 0) x[i] = -INFINITY;
    }
}

static void check_topk_case(int B, int nb, int V, int K, int kind, int greedy) {
    size_t N = (size_t)B * nb;
    float *x = malloc(N * V * sizeof(float)), *bs = malloc(N * sizeof(float));
    float *got_v = malloc((size_t)B * K * sizeof(float)), *want_v = malloc((size_t)B * K * sizeof(float));
    int *got_i = malloc((size_t)B * K * sizeof(int)), *want_i = malloc((size_t)B * K * sizeof(int));
    fill_logits(x, N * V, kind);
    // running scores as a search has them: negative, some beams equal (ties across beams)
    for (size_t r = 0; r < N; r++) bs[r] = r % 3 == 2 ? bs[r - 1] : -4.0f * rnd_unit();
    const float *scores = greedy ? NULL : bs;
    cpu_search_beam_topk(got_v, got_i, x, scores, B, nb, V, K);
    ref_beam_topk(want_v, want_i, x, scores, B, nb, V, K);
    int same = memcmp(got_i, want_i, (size_t)B * K * sizeof(int)) == 0, bad = 0;
    for (size_t i = 0; i < (size_t)B * K; i++) bad += !(got_v[i] == want_v[i]);
    char buf[256];
    snprintf(buf, sizeof buf, "beam_topk B=%d beams=%d V=%d K=%d %s%s: indices %s, %d scores differ", B, nb, V, K,
             kind == 0 ? "uniform" : kind == 1 ? "integer ties" : "with -inf", greedy ? " greedy" : "",
             same ? "equal" : "DIFFER", bad);
    test_check(same && bad == 0, buf);
    free(x), free(bs), free(got_v), free(want_v), free(got_i), free(want_i);
}

// Greedy with K = 1 is torch.argmax of the raw logits: the first maximum.
static void check_greedy_argmax(void) {
    enum { B = 6, V = 257 };
    float x[B * V], val[B];
    int idx[B], ok = 1;
    fill_logits(x, B * V, 1);
    x[3 * V + 100] = 9.0f, x[3 * V + 7] = 9.0f;  // a tie at the top: 7 wins
    cpu_search_beam_topk(val, idx, x, NULL, B, 1, V, 1);
    for (int b = 0; b < B; b++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (x[b * V + v] > x[b * V + best]) best = v;
        ok &= idx[b] == best && val[b] == x[b * V + best];
    }
    test_check(ok && idx[3] == 7, "beam_topk greedy (beams 1, K 1, no scores) = the first maximum of each row (torch.argmax)");
}

static void test_beam_topk(void) {
    check_greedy_argmax();
    const int shapes[][4] = {{1, 1, 50, 1}, {3, 1, 97, 2}, {2, 4, 331, 8}, {3, 5, 64, 10}, {1, 4, 8, 8}, {2, 2, 1000, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int kind = 0; kind < 3; kind++)
            check_topk_case(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], kind, 0);
    check_topk_case(4, 1, 333, 1, 1, 1);
    check_topk_case(2, 3, 129, 6, 2, 1);
}

// ---- beam_table_reorder ----------------------------------------------------------------------

static void test_table_reorder(void) {
    enum { N = 6, CAP = 7 };
    const int src_rows[N] = {2, 2, 0, 5, 1, 3};
    const int ts[3] = {0, 3, CAP};
    for (int k = 0; k < 3; k++) {
        const int t = ts[k];
        int src[N * CAP], dst[N * CAP];
        for (int i = 0; i < N * CAP; i++) src[i] = i, dst[i] = -1;
        cpu_search_beam_table_reorder(dst, src, src_rows, N, CAP, t);
        int bad = 0;
        for (int i = 0; i < N; i++)
            for (int p = 0; p < CAP; p++) bad += dst[i * CAP + p] != (p < t ? src[src_rows[i] * CAP + p] : -1);
        char buf[160];
        snprintf(buf, sizeof buf, "beam_table_reorder N=%d cap=%d t=%d: %d entries differ (positions >= t untouched)", N,
                 CAP, t, bad);
        test_check(bad == 0, buf);
    }
}

// ---- attention_decode ------------------------------------------------------------------------

static void fill_rand(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = (rnd_unit() * 2.0f - 1.0f) * scale;
}

// Cross-attention: nb beams of B items read the item's (S, HK) keys (slot_div = nb) under
// its padding mask; the reference is attention_forward over each row's own copy.
static void check_decode_cross(int B, int nb, int S, int H, int dk) {
    const int N = B * nb, HK = H * dk;
    float *q = malloc((size_t)N * HK * 4), *k = malloc((size_t)B * S * HK * 4), *v = malloc((size_t)B * S * HK * 4);
    float *kr = malloc((size_t)N * S * HK * 4), *vr = malloc((size_t)N * S * HK * 4), *att = malloc((size_t)N * H * S * 4);
    float *want = malloc((size_t)N * HK * 4), *got = malloc((size_t)N * HK * 4);
    int *mask = malloc((size_t)B * S * sizeof(int)), *mask_r = malloc((size_t)N * S * sizeof(int));
    fill_rand(q, (size_t)N * HK, 1.0f), fill_rand(k, (size_t)B * S * HK, 1.0f), fill_rand(v, (size_t)B * S * HK, 1.0f);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < S; j++) mask[b * S + j] = j < S - b;  // item b: b padding positions
    for (int i = 0; i < N; i++) {
        memcpy(kr + (size_t)i * S * HK, k + (size_t)(i / nb) * S * HK, (size_t)S * HK * 4);
        memcpy(vr + (size_t)i * S * HK, v + (size_t)(i / nb) * S * HK, (size_t)S * HK * 4);
        memcpy(mask_r + (size_t)i * S, mask + (size_t)(i / nb) * S, (size_t)S * sizeof(int));
    }
    DropoutArgs nodrop = {0.0f, 0};
    cpu_attention_forward(want, att, q, kr, vr, NULL, mask_r, N, 1, S, S, H, dk, 0, 0, nodrop);
    KvView kv = {k, v, S, 1, NULL, 0, nb, mask, S, NULL};
    cpu_attention_decode(got, q, &kv, NULL, N, S, H, dk);
    char buf[200];
    snprintf(buf, sizeof buf, "attention_decode per item (B %d x %d beams, S %d, H %d, dk %d, masked) = attention_forward, bitwise",
             B, nb, S, H, dk);
    test_check(memcmp(want, got, (size_t)N * HK * 4) == 0, buf);
    free(q), free(k), free(v), free(kr), free(vr), free(att), free(want), free(got), free(mask), free(mask_r);
}

// Self-attention: row i's position j is in slot table[i][j] of a position-major cache
// (cap, N, HK); each position's slots are a permutation of the rows (as beam reordering
// leaves them). Reference: attention_forward over the rows' sequences laid out densely,
// with a position bias (H, Tk).
static void check_decode_table(int N, int cap, int Tk, int H, int dk) {
    const int HK = H * dk;
    float *q = malloc((size_t)N * HK * 4), *kd = malloc((size_t)N * Tk * HK * 4), *vd = malloc((size_t)N * Tk * HK * 4);
    float *kc = malloc((size_t)cap * N * HK * 4), *vc = malloc((size_t)cap * N * HK * 4), *bias = malloc((size_t)H * Tk * 4);
    float *att = malloc((size_t)N * H * Tk * 4), *want = malloc((size_t)N * HK * 4), *got = malloc((size_t)N * HK * 4);
    int *table = malloc((size_t)N * cap * sizeof(int));
    fill_rand(q, (size_t)N * HK, 1.0f), fill_rand(kd, (size_t)N * Tk * HK, 1.0f), fill_rand(vd, (size_t)N * Tk * HK, 1.0f);
    fill_rand(bias, (size_t)H * Tk, 2.0f);
    for (int j = 0; j < cap; j++) {
        for (int i = 0; i < N; i++) table[i * cap + j] = i;
        for (int i = N - 1; i > 0; i--) {  // Fisher-Yates over the rows of position j
            int r = (int)(rnd() % (uint32_t)(i + 1)), tmp = table[i * cap + j];
            table[i * cap + j] = table[r * cap + j], table[r * cap + j] = tmp;
        }
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Tk; j++) {
            size_t slot = ((size_t)j * N + table[i * cap + j]) * HK;
            memcpy(kc + slot, kd + ((size_t)i * Tk + j) * HK, (size_t)HK * 4);
            memcpy(vc + slot, vd + ((size_t)i * Tk + j) * HK, (size_t)HK * 4);
        }
    DropoutArgs nodrop = {0.0f, 0};
    cpu_attention_forward(want, att, q, kd, vd, bias, NULL, N, 1, Tk, Tk, H, dk, 1, Tk - 1, nodrop);
    KvView kv = {kc, vc, 1, N, table, cap, 1, NULL, 0, NULL};
    cpu_attention_decode(got, q, &kv, bias, N, Tk, H, dk);
    char buf[200];
    snprintf(buf, sizeof buf, "attention_decode through a beam table (N %d, cap %d, %d keys, H %d, dk %d, bias) = attention_forward, bitwise",
             N, cap, Tk, H, dk);
    test_check(memcmp(want, got, (size_t)N * HK * 4) == 0, buf);
    // the position from memory (KvView.pos, a graph-replayed step): capacity cap, t = Tk - 1,
    // the (H, cap) bias by distance (key j at cap - 1 - t + j), the distances past t poison
    float *full = mallocCheck((size_t)H * cap * sizeof(float));
    for (size_t e = 0; e < (size_t)H * cap; e++) full[e] = 1e30f;
    const int t = Tk - 1;
    for (int h = 0; h < H; h++)
        for (int j = 0; j < Tk; j++) full[(size_t)h * cap + (size_t)(cap - 1 - t + j)] = bias[(size_t)h * Tk + j];
    for (size_t e = 0; e < (size_t)N * HK; e++) got[e] = NAN;
    kv.pos = &t;
    cpu_attention_decode(got, q, &kv, full, N, cap, H, dk);
    snprintf(buf, sizeof buf, "attention_decode with the position from memory (t %d, capacity %d) = attention_forward, bitwise",
             t, cap);
    test_check(memcmp(want, got, (size_t)N * HK * 4) == 0, buf);
    free(full);
    free(q), free(kd), free(vd), free(kc), free(vc), free(bias), free(att), free(want), free(got), free(table);
}

static void test_attention_decode(void) {
    check_decode_cross(3, 4, 9, 2, 8);
    check_decode_cross(2, 1, 33, 3, 64);
    check_decode_table(6, 7, 1, 2, 8);
    check_decode_table(8, 12, 9, 4, 16);
    check_decode_table(4, 40, 40, 2, 64);
}

// ---- errors ----------------------------------------------------------------------------------

static void fail_topk_k(const void *arg) {
    float x[8] = {0}, v[16];
    int i[16];
    cpu_search_beam_topk(v, i, x, NULL, 1, 1, 8, *(const int *)arg);
}
static void fail_reorder_row(const void *arg) {
    int a[2 * 3] = {0}, b[2 * 3];
    int rows[2] = {0, *(const int *)arg};
    cpu_search_beam_table_reorder(b, a, rows, 2, 3, 2);
}
static void fail_decode_table(const void *arg) {
    float q[4] = {0}, k[4] = {0}, o[4];
    int table[2] = {0, 0};
    KvView kv = {k, k, 1, 1, table, *(const int *)arg, 1, NULL, 0, NULL};
    cpu_attention_decode(o, q, &kv, NULL, 1, 2, 1, 4);
}

// qkv_append (the fused q, k, v GEMM's split): row r's three parts to q row r and to row r of
// position t's slot in each cache; every other cache position keeps its bytes. Against kv_append
// of the separated k and v parts (the unfused path's copy).
static void test_qkv_append(void) {
    enum { ROWS = 3, HK = 5, CAP = 4, T = 2 };
    float qkv[ROWS * 3 * HK], q[ROWS * HK], kc[CAP * ROWS * HK], vc[CAP * ROWS * HK];
    float k_new[ROWS * HK], v_new[ROWS * HK], kw[CAP * ROWS * HK], vw[CAP * ROWS * HK];
    for (int i = 0; i < ROWS * 3 * HK; i++) qkv[i] = (float)(i + 1);
    for (int i = 0; i < CAP * ROWS * HK; i++) kc[i] = kw[i] = -1.0f - (float)i, vc[i] = vw[i] = -1000.0f - (float)i;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < HK; c++) k_new[r * HK + c] = qkv[(r * 3 + 1) * HK + c], v_new[r * HK + c] = qkv[(r * 3 + 2) * HK + c];
    int t = T, q_ok = 1;
    cpu_attention_kv_append(kw, vw, k_new, v_new, &t, sizeof k_new);
    cpu_attention_qkv_append(q, kc, vc, qkv, &t, ROWS, HK * sizeof(float));
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < HK; c++) q_ok &= q[r * HK + c] == qkv[r * 3 * HK + c];
    test_check(q_ok, "qkv_append: q rows are the first part of each qkv row");
    test_check(!memcmp(kc, kw, sizeof kc) && !memcmp(vc, vw, sizeof vc),
               "qkv_append: k, v parts at position 2 of the caches = kv_append of them; other positions untouched");
}

static void test_errors(void) {
    static const int k9 = 9, k0 = 0, row2 = 2;
    test_expect_error("beam_topk K > V", fail_topk_k, &k9, "beam_topk", "K 9");
    test_expect_error("beam_topk K = 0", fail_topk_k, &k0, "beam_topk", "K 0");
    test_expect_error("beam_table_reorder source row outside [0, N)", fail_reorder_row, &row2, "beam_table_reorder",
                      "source row 2");
    static const int ld1 = 1;
    test_expect_error("attention_decode table shorter than the keys", fail_decode_table, &ld1, "attention_decode",
                      "beam table rows of 1 positions, 2 keys");
}

int main(void) {
    test_beam_topk();
    test_table_reorder();
    test_attention_decode();
    test_qkv_append();
    test_errors();
    return test_summary();
}
