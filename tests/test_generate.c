// tests/test_generate.c: generation (model/generate.c) against Hugging Face transformers.
// For every fixture made by tools/make_generate_fixture.py (tests/fixtures/generate_*/):
//   - t5_generate for each case (greedy, beam search with several num_beams, length
//     penalties, early stopping, max_length cuts) equals HF model.generate token for token,
//     including the width HF returns and its filler;
//   - the beam-search path with num_beams 1 equals greedy;
//   - the KV-cache decoder step reproduces the full (non-cached) t5_forward logits for
//     teacher-forced sequences, with the per-beam encoder copies and a beam reorder in
//     the middle (relative 1e-5): the cache checked independently of the search;
// and generate_topk reproduces torch.topk's CPU order of equal values
// (tests/fixtures/generate_topk). Run from the repository root.
// Every case again with T5_GEN_GRAPHS=0 (the decoder step op by op, not a replayed CUDA
// graph): the same tokens bitwise.
// tests/gpu/test_cuda_generate.c runs this file on the CUDA backend in fp32 (it defines
// TEST_GENERATE_CUDA before including it): the same fixtures, token for token, the CUDA graph
// path (the default there) against op by op, and the same in bf16 (graphs on = off bitwise).
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "../common/check.h"
#include "../model/generate.h"
#include "../model/load.h"
#include "../formats/safetensors.h"
#include "test_files.h"
#include "test.h"
#include "../trainer/progress.h"

static const char *MODELS[] = {"relu", "gated"};

#ifdef TEST_GENERATE_CUDA
#include "../trainer/device.h"
static const Backend *test_backend(void) { return device_backend("cuda", 0, 0, 0, 0, 0); }
static const float STEP_TOPK_TOL = 2e-5f;  // the device's log_softmax sums exp in fp32, the CPU's in double
#else
static const Backend *test_backend(void) { return backend_cpu(); }
static const float STEP_TOPK_TOL = 0.0f;
#endif

static const cJSON *json_get(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) t5_fail("reference.json: missing \"%s\"", key);
    return v;
}

static int *read_ids(const StFile *st, const char *name, int *rows, int *cols) {
    const StTensor *t = st_find(st, name);
    if (!t || t->ndim != 2) t5_fail("%s: missing 2-d tensor \"%s\"", st->path, name);
    *rows = (int)t->shape[0];
    *cols = (int)t->shape[1];
    int *v = mallocCheck(t->numel * sizeof(int));
    st_read_i32(st, t, v);
    return v;
}

// HF's rows (a list of lists, all of one width) against ours (B, max_length) with `width`.
static void compare_case(const char *model, const char *name, const cJSON *want, const int *got, int width, int B,
                         int Lmax, double secs) {
    char what[300];
    int want_w = cJSON_GetArraySize(cJSON_GetArrayItem(want, 0));
    int bad_row = -1, bad_pos = -1, bad_got = 0, bad_want = 0;
    if (cJSON_GetArraySize(want) != B) t5_fail("%s %s: reference has %d rows, batch %d", model, name, cJSON_GetArraySize(want), B);
    for (int b = 0; b < B && bad_row < 0; b++) {
        const cJSON *row = cJSON_GetArrayItem(want, b);
        for (int j = 0; j < want_w && j < Lmax; j++) {
            int w = cJSON_GetArrayItem(row, j)->valueint, g = got[(size_t)b * Lmax + j];
            if (w != g) {
                bad_row = b, bad_pos = j, bad_got = g, bad_want = w;
                break;
            }
        }
    }
    if (bad_row >= 0)
        snprintf(what, sizeof what, "%s %-18s first difference row %d position %d: ours %d, HF %d (%.3f s)", model,
                 name, bad_row, bad_pos, bad_got, bad_want, secs);
    else if (width != want_w)
        snprintf(what, sizeof what, "%s %-18s same tokens but width %d, HF %d (%.3f s)", model, name, width, want_w,
                 secs);
    else
        snprintf(what, sizeof what, "%s %-18s %d rows x %d tokens equal HF generate (%.3f s)", model, name, B,
                 want_w, secs);
    test_check(bad_row < 0 && width == want_w, what);
}

// KV-cache steps vs the full forward. Forward batch: 2B rows, row 2b+j = source b with the
// decoder sequence of HF's greedy row (b+j) % B. Decoder: B items x 2 beams on the same rows;
// halfway, the two beams of each item swap caches (a reorder), and each row continues with
// the sequence its cache came from.
static void check_cache_vs_forward(T5Model *m, const char *model, const int *ids, const int *mask, int B, int S,
                                   const cJSON *greedy) {
    int W = cJSON_GetArraySize(cJSON_GetArrayItem(greedy, 0)), V = m->cfg.vocab_size, R = 2 * B;
    int *src = mallocCheck((size_t)R * S * sizeof(int)), *msk = mallocCheck((size_t)R * S * sizeof(int));
    int *dec = mallocCheck((size_t)R * W * sizeof(int)), *labels = mallocCheck((size_t)R * W * sizeof(int));
    for (int r = 0; r < R; r++) {
        memcpy(src + (size_t)r * S, ids + (size_t)(r / 2) * S, (size_t)S * sizeof(int));
        memcpy(msk + (size_t)r * S, mask + (size_t)(r / 2) * S, (size_t)S * sizeof(int));
        const cJSON *row = cJSON_GetArrayItem(greedy, (r / 2 + r % 2) % B);
        for (int t = 0; t < W; t++) {
            dec[(size_t)r * W + t] = cJSON_GetArrayItem(row, t)->valueint;
            labels[(size_t)r * W + t] = -100;
        }
    }
    T5Batch batch = {R, S, W, src, msk, dec, labels};
    float saved_p = m->dropout_p;
    m->dropout_p = 0.0f;
    t5_forward(m, &batch, 0.0f, NULL);
    m->dropout_p = saved_p;
    size_t nlog = (size_t)R * W * V;
    float *full = mallocCheck(nlog * sizeof(float));
    m->be->to_host(full, m->acts.logits, nlog * sizeof(float));

    T5Decoder d;
    t5_decoder_init(&d, m, B, 2, S, W + 1);
    t5_decoder_encode(&d, ids, mask);
    int follows[64], tokens[64], swap[64];
    if (R > 64) t5_fail("test: batch too large");
    for (int r = 0; r < R; r++) follows[r] = r;
    double maxdiff = 0, maxref = 0;
    int reordered_at = W / 2;
    for (int t = 0; t < W; t++) {
        if (t == reordered_at) {
            int nf[64];
            for (int r = 0; r < R; r++) swap[r] = r ^ 1;
            t5_decoder_reorder(&d, swap);
            for (int r = 0; r < R; r++) nf[r] = follows[swap[r]];
            memcpy(follows, nf, sizeof nf);
        }
        for (int r = 0; r < R; r++) tokens[r] = dec[(size_t)follows[r] * W + t];
        const float *lg = t5_decoder_step(&d, tokens);
        for (int r = 0; r < R; r++)
            for (int v = 0; v < V; v++) {
                double want = full[((size_t)follows[r] * W + t) * V + v], got = lg[(size_t)r * V + v];
                if (fabs(got - want) > maxdiff) maxdiff = fabs(got - want);
                if (fabs(want) > maxref) maxref = fabs(want);
            }
    }
    char what[300];
    snprintf(what, sizeof what,
             "%s KV-cache steps = full forward logits, %d rows x %d positions, reorder at %d: max abs %.2e rel %.2e "
             "(tol 1e-5)",
             model, R, W, reordered_at, maxdiff, maxdiff / maxref);
    test_check(maxdiff / maxref <= 1e-5, what);
    t5_decoder_free(&d);
    free(src), free(msk), free(dec), free(labels), free(full);
}

// Generation from the encoder output of a loss pass on the same batch (encoder_ready, as the
// trainer's evaluation does) = generation that runs the encoder itself; 3 beams, 12 tokens.
static void check_encoder_ready(T5Model *m, const char *model, const int *ids, const int *mask, int B, int S) {
    enum { L = 12 };
    int *dec = mallocCheck((size_t)B * 2 * sizeof(int)), *labels = mallocCheck((size_t)B * 2 * sizeof(int));
    int *a = mallocCheck((size_t)B * L * sizeof(int)), *b = mallocCheck((size_t)B * L * sizeof(int));
    int la[64], lb[64];
    if (B > 64) t5_fail("test: batch too large");
    for (int r = 0; r < B; r++) dec[2 * r] = 0, dec[2 * r + 1] = 5, labels[2 * r] = 5, labels[2 * r + 1] = 1;
    GenerateConfig gc = {.num_beams = 3, .max_length = L, .length_penalty = 1.0f, .early_stopping = 0};
    int wa = t5_generate(m, ids, mask, B, S, &gc, a, la);
    T5Batch batch = {B, S, 2, (int *)ids, (int *)mask, dec, labels};
    float saved_p = m->dropout_p;
    m->dropout_p = 0.0f;
    t5_forward(m, &batch, 0.0f, NULL);
    m->dropout_p = saved_p;
    gc.encoder_ready = 1;
    int wb = t5_generate(m, ids, mask, B, S, &gc, b, lb);
    char what[200];
    snprintf(what, sizeof what, "%s generation from a loss pass's encoder output (encoder_ready) = its own encoder pass", model);
    test_check(wa == wb && memcmp(a, b, (size_t)B * L * sizeof(int)) == 0 && memcmp(la, lb, (size_t)B * sizeof(int)) == 0,
               what);
    free(dec), free(labels), free(a), free(b);
}

// t5_decoder_step_topk = beam_topk of t5_decoder_step's logits (the plumbing: buffers,
// position count, greedy), over 3 steps of 2 beams and of greedy.
static void check_step_topk(T5Model *m, const char *model, const int *ids, const int *mask, int B, int S) {
    const int V = m->cfg.vocab_size;
    int bad = 0, tokens[64] = {0};
    float bs[64], want_v[128], got_v[128];
    int want_i[128], got_i[128];
    if (B > 16) t5_fail("test: batch %d too large for check_step_topk's arrays", B);
    for (int nb = 1; nb <= 2; nb++) {
        T5Decoder a, b;
        t5_decoder_init(&a, m, B, nb, S, 4);
        t5_decoder_init(&b, m, B, nb, S, 4);
        t5_decoder_encode(&a, ids, mask);
        t5_decoder_encode(&b, ids, mask);
        const int N = B * nb, K = nb == 1 ? 1 : 2 * nb;
        for (int r = 0; r < N; r++) bs[r] = -0.25f * (float)(r % nb);
        for (int t = 0; t < 3; t++) {
            const float *lg = t5_decoder_step(&a, tokens);
            backend_cpu()->beam_topk(want_v, want_i, lg, nb == 1 ? NULL : bs, B, nb, V, K);  // host logits
            t5_decoder_step_topk(&b, tokens, nb == 1 ? NULL : bs, got_v, got_i);
            bad += memcmp(want_i, got_i, (size_t)B * K * sizeof(int)) != 0 || a.t != b.t;
            for (int e = 0; e < B * K; e++) bad += fabsf(want_v[e] - got_v[e]) > STEP_TOPK_TOL;
            for (int r = 0; r < N; r++) tokens[r] = want_i[(r / nb) * K + r % nb] % V;
        }
        t5_decoder_free(&a);
        t5_decoder_free(&b);
    }
    char what[200];
    snprintf(what, sizeof what, "%s t5_decoder_step_topk = beam_topk of t5_decoder_step's logits (greedy, 2 beams; 3 steps): %d differ",
             model, bad);
    test_check(bad == 0, what);
}

// The same generation with the decoder step run op by op (T5_GEN_GRAPHS=0) instead of a
// replayed CUDA graph: the same rows, lengths and width bitwise (on the CPU both are op by op).
// The search settings of one fixture case (reference.json "cases").
static GenerateConfig case_config(const cJSON *c) {
    GenerateConfig gc = {.num_beams = json_get(c, "num_beams")->valueint,
                         .max_length = json_get(c, "max_length")->valueint,
                         .length_penalty = (float)json_get(c, "length_penalty")->valuedouble,
                         .early_stopping = cJSON_IsTrue(json_get(c, "early_stopping"))};
    return gc;
}

static void check_graphs_off(T5Model *m, const char *model, const char *name, const int *ids, const int *mask, int B,
                             int S, const GenerateConfig *gc, const int *out, const int *out_len, int width,
                             double secs_on) {
    int *out2 = mallocCheck((size_t)B * gc->max_length * sizeof(int)), *len2 = mallocCheck((size_t)B * sizeof(int));
    for (size_t i = 0; i < (size_t)B * gc->max_length; i++) out2[i] = -7;  // poison
    setenv("T5_GEN_GRAPHS", "0", 1);
    double t0 = now_seconds();
    int width2 = t5_generate(m, ids, mask, B, S, gc, out2, len2);
    double secs_off = now_seconds() - t0;
    unsetenv("T5_GEN_GRAPHS");
    int same = width2 == width && !memcmp(len2, out_len, (size_t)B * sizeof(int)) &&
               !memcmp(out2, out, (size_t)B * gc->max_length * sizeof(int));
    char what[240];
    snprintf(what, sizeof what, "%s %s: graphs on = off bitwise (rows, lengths, width %d); %.3f s on, %.3f s off", model,
             name, width, secs_on, secs_off);
    test_check(same, what);
    free(out2), free(len2);
}

#ifdef TEST_GENERATE_CUDA
// bf16 on the GPU (what evaluation runs): every case with graphs on and off, the same tokens
// bitwise, and the time of each (no fixture: bf16 differs from HF's fp32 tokens).
static void check_graphs_bf16(const char *model, const char *dir, const cJSON *cases, const int *ids, const int *mask,
                              int B, int S, int maxL) {
    T5Model m;
    ModelLoadOptions lo = {0};
    model_load(&m, dir, device_backend("cuda", 0, 1, 0, 0, 0), lo);
    t5_plan_activations(&m, 2 * B, S, maxL);
    int *out = mallocCheck((size_t)B * maxL * sizeof(int)), *out_len = mallocCheck((size_t)B * sizeof(int));
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        char name[96];
        snprintf(name, sizeof name, "bf16 %s", json_get(c, "name")->valuestring);
        GenerateConfig gc = case_config(c);
        double t0 = now_seconds();
        int width = t5_generate(&m, ids, mask, B, S, &gc, out, out_len);
        check_graphs_off(&m, model, name, ids, mask, B, S, &gc, out, out_len, width, now_seconds() - t0);
    }
    free(out), free(out_len);
    t5_free(&m);
}
#endif

static void run_model(const char *model) {
    char dir[256], path[320];
    snprintf(dir, sizeof dir, "tests/fixtures/generate_%s", model);
    printf("--- fixture %s\n", dir);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    cJSON *ref = test_load_json(path, " (run tools/make_generate_fixture.py)");
    T5Model m;
    ModelLoadOptions lo = {0};
    model_load(&m, dir, test_backend(), lo);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    StFile st;
    st_open(&st, path);
    int B, S, B2, S2;
    int *ids = read_ids(&st, "input_ids", &B, &S), *mask = read_ids(&st, "attention_mask", &B2, &S2);
    if (B != B2 || S != S2) t5_fail("%s: input_ids and attention_mask shapes differ", path);
    const cJSON *cases = json_get(ref, "cases");
    int maxL = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) if (json_get(c, "max_length")->valueint > maxL) maxL = json_get(c, "max_length")->valueint;
    t5_plan_activations(&m, 2 * B, S, maxL);

    int *out = mallocCheck((size_t)B * maxL * sizeof(int)), *out_len = mallocCheck((size_t)B * sizeof(int));
    int *greedy = mallocCheck((size_t)B * maxL * sizeof(int)), greedy_len[64], greedy_w = 0, greedy_L = 0;
    const cJSON *greedy_ref = NULL;
    double total = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *name = json_get(c, "name")->valuestring;
        GenerateConfig gc = case_config(c);
        double t0 = now_seconds();
        int width = t5_generate(&m, ids, mask, B, S, &gc, out, out_len);
        double secs = now_seconds() - t0;
        total += secs;
        compare_case(model, name, json_get(c, "sequences"), out, width, B, gc.max_length, secs);
        check_graphs_off(&m, model, name, ids, mask, B, S, &gc, out, out_len, width, secs);
        if (!strcmp(name, "greedy")) {
            greedy_ref = json_get(c, "sequences");
            greedy_w = width, greedy_L = gc.max_length;
            memcpy(greedy, out, (size_t)B * gc.max_length * sizeof(int));
            memcpy(greedy_len, out_len, (size_t)B * sizeof(int));
        }
    }
    printf("  C generation of all %d cases: %.3f s\n", cJSON_GetArraySize(cases), total);
    if (!greedy_ref) t5_fail("%s: no \"greedy\" case", dir);

    // the beam-search path with one beam is greedy search
    GenerateConfig one = {.num_beams = 1, .max_length = greedy_L, .length_penalty = 1.0f, .early_stopping = 0};
    int width = t5_generate_beam(&m, ids, mask, B, S, &one, out, out_len);
    int same = width == greedy_w;
    for (int b = 0; b < B; b++) {
        same &= out_len[b] == greedy_len[b];
        for (int j = 0; j < greedy_len[b] && same; j++) same &= out[(size_t)b * greedy_L + j] == greedy[(size_t)b * greedy_L + j];
    }
    char what[200];
    snprintf(what, sizeof what, "%s beam search with num_beams 1 = greedy (rows up to eos, lengths, width %d)", model,
             width);
    test_check(same, what);

    check_encoder_ready(&m, model, ids, mask, B, S);
    check_cache_vs_forward(&m, model, ids, mask, B, S, greedy_ref);
    check_step_topk(&m, model, ids, mask, B, S);
#ifdef TEST_GENERATE_CUDA
    check_graphs_bf16(model, dir, cases, ids, mask, B, S, maxL);
#endif

    free(out), free(out_len), free(greedy), free(ids), free(mask);
    st_close(&st);
    t5_free(&m);
    cJSON_Delete(ref);
}

// generate_topk against torch.topk on tie-heavy vectors (both of torch's CPU paths).
static void run_topk(void) {
    printf("--- fixture tests/fixtures/generate_topk\n");
    cJSON *ref = test_load_json("tests/fixtures/generate_topk/reference.json", " (run tools/make_generate_fixture.py)");
    const cJSON *c;
    int n_cases = 0, n_partial = 0, n_unstable = 0, bad = -1;
    cJSON_ArrayForEach(c, json_get(ref, "cases")) {
        const cJSON *xs = json_get(c, "x"), *want = json_get(c, "indices");
        int n = cJSON_GetArraySize(xs), k = json_get(c, "k")->valueint;
        float *x = mallocCheck((size_t)n * sizeof(float));
        int *idx = mallocCheck((size_t)k * sizeof(int));
        for (int i = 0; i < n; i++) x[i] = (float)cJSON_GetArrayItem(xs, i)->valuedouble;
        generate_topk(x, n, k, idx, NULL);
        int unstable = 0;
        for (int j = 0; j < k; j++) {
            int w = cJSON_GetArrayItem(want, j)->valueint;
            if (idx[j] != w && bad < 0) bad = n_cases;
            // a stable order would list equal values by increasing index
            if (j > 0) {
                int p = cJSON_GetArrayItem(want, j - 1)->valueint;
                if (x[p] == x[w] && p > w) unstable = 1;
            }
        }
        n_unstable += unstable;
        n_partial += (long)k * 64 <= n;
        n_cases++;
        free(x), free(idx);
    }
    char what[300];
    snprintf(what, sizeof what,
             "generate_topk = torch.topk indices on %d tie-heavy cases (%d via partial_sort, %d via nth_element)%s",
             n_cases, n_partial, n_cases - n_partial, bad >= 0 ? " FIRST MISMATCH below" : "");
    test_check(bad < 0, what);
    if (bad >= 0) printf("  first mismatching case: %d\n", bad);
    snprintf(what, sizeof what, "torch.topk on the CPU is not stable: %d of %d cases order equal values otherwise",
             n_unstable, n_cases);
    test_check(n_unstable > 0, what);
    cJSON_Delete(ref);
}

int main(void) {
    run_topk();
    for (int i = 0; i < (int)(sizeof MODELS / sizeof MODELS[0]); i++) run_model(MODELS[i]);
    return test_summary();
}
