// tests/test_fixtures.c: the whole model against Hugging Face transformers. For every
// fixture variant made by tools/make_fixtures.py (tests/fixtures/*/): loss and logits
// (1e-5 relative), every gradient tensor (1e-4, max abs diff / max abs), 3 AdamW steps
// with clipping and a warmup schedule (per-step loss, grad_norm, lr; final parameters
// within 1e-5), and the weight-decay parameter set. Run from the repository root.
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "../common/check.h"
#include "../data/batch_file.h"
#include "../model/load.h"
#include "../formats/safetensors.h"
#include "../zero/step.h"
#include "test.h"

static const char *VARIANTS[] = {"relu_tied", "gated_noscale", "untied"};

static double json_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) t5_fail("reference.json: missing number \"%s\"", key);
    return v->valuedouble;
}

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) t5_fail("reference.json: missing string \"%s\"", key);
    return v->valuestring;
}

static float *read_ref(const StFile *st, const char *name, size_t want_numel) {
    const StTensor *t = st_find(st, name);
    if (!t) t5_fail("%s: missing reference tensor \"%s\"", st->path, name);
    if (t->numel != want_numel)
        t5_fail("%s: reference tensor \"%s\" has %llu elements, expected %zu", st->path, name,
                (unsigned long long)t->numel, want_numel);
    float *v = mallocCheck(want_numel * sizeof(float) + 1);
    st_read_f32(st, t, v);
    return v;
}

static int rel_ok(const char *what, double got, double want, double tol) {
    double rel = fabs(got - want) / fmax(fabs(want), 1e-30);
    char buf[256];
    snprintf(buf, sizeof buf, "%-60s got %.9g want %.9g rel %.2e (tol %.0e)", what, got, want, rel, tol);
    return test_check(rel <= tol, buf);
}

// One fixture variant: its directory, reference.json, reference tensors and batch.
typedef struct {
    const char *variant;
    char dir[512];
    cJSON *ref;
    StFile st;           // reference.safetensors
    T5Batch *b;          // the batch of reference.safetensors
    float smoothing;     // label_smoothing of reference.json
    ModelLoadOptions lo;
} Fixture;

// Loss, label-smoothed loss and logits; *n gets the label count.
static void check_forward(Fixture *fx, T5Model *m, long *n) {
    char what[256];
    const T5Batch *b = fx->b;
    t5_plan_activations(m, b->B, b->S, b->T);
    double nll = t5_forward(m, b, 0.0f, n) / (double)*n;
    double loss = t5_forward(m, b, fx->smoothing, n) / (double)*n;
    float *want = read_ref(&fx->st, "loss_nll", 1);
    snprintf(what, sizeof what, "%s: loss_nll", fx->variant);
    rel_ok(what, nll, want[0], 1e-5);
    free(want);
    want = read_ref(&fx->st, "loss", 1);
    snprintf(what, sizeof what, "%s: loss (label_smoothing %g)", fx->variant, fx->smoothing);
    rel_ok(what, loss, want[0], 1e-5);
    free(want);
    size_t nlog = (size_t)b->B * b->T * m->cfg.vocab_size;
    want = read_ref(&fx->st, "logits", nlog);
    snprintf(what, sizeof what, "%s: logits", fx->variant);
    test_close(what, m->acts.logits, want, nlog, 1e-5);
    free(want);
}

// Backward of the last forward: every gradient tensor.
static void check_backward(Fixture *fx, T5Model *m, long n) {
    char what[256];
    const ParamLayout *L = &m->lay;
    t5_zero_grads(m);
    t5_backward(m, fx->smoothing, (float)(1.0 / (double)n));
    for (int i = 0; i < L->count; i++) {
        const ParamSpec *p = &L->specs[i];
        char name[160];
        snprintf(name, sizeof name, "grad.%s", p->name);
        float *want = read_ref(&fx->st, name, p->numel);
        snprintf(what, sizeof what, "%s: %s", fx->variant, name);
        test_close(what, (float *)m->grads + p->offset, want, p->numel, 1e-4);
        free(want);
    }
}

// Each sublayer's branch gradient dropout(dx) made by the norm backward before it
// (rmsnorm_backward_dropout): the same loss and bitwise-equal gradients as every dropout
// run as its own pass, and no branch gradient left to make (branch_passes 0) where the
// unfused run made one per sublayer and embedding.
static void check_fused_branch_dropout(Fixture *fx, T5Model *m) {
    char what[320];
    const T5Batch *b = fx->b;
    T5Model un;
    model_load(&un, fx->dir, backend_cpu(), fx->lo);
    un.dropout_p = m->dropout_p = 0.1f;
    m->dropout_seed = un.dropout_seed = 77;
    un.test.unfused_backward_dropout = 1;
    t5_plan_activations(&un, b->B, b->S, b->T);
    t5_zero_grads(m);
    long n1 = 0, n2 = 0;
    double l1 = t5_forward(m, b, fx->smoothing, &n1), l2 = t5_forward(&un, b, fx->smoothing, &n2);
    t5_backward(m, fx->smoothing, (float)(1.0 / (double)n1));
    t5_backward(&un, fx->smoothing, (float)(1.0 / (double)n2));
    long sublayers = 2L * m->cfg.num_layers + 3L * m->cfg.num_decoder_layers + 2;
    snprintf(what, sizeof what, "%s: branch dropout fused into the norm backward (dropout 0.1): same loss, bitwise-equal "
             "grads, %ld separate passes (unfused %ld of %ld)", fx->variant, m->test.branch_passes, un.test.branch_passes, sublayers);
    test_check(l1 == l2 && !memcmp(m->grads, un.grads, m->lay.total * sizeof(float)) && m->test.branch_passes == 0 &&
                   un.test.branch_passes == sublayers, what);
    t5_free(&un);
    m->dropout_p = 0.0f;
}

// q, k, v (cross: k, v; gated: wi_0, wi_1) as batched GEMMs (block.c linears_forward /
// linears_backward) and the attention's input-side backward as one joined GEMM, against one
// GEMM each: the same loss, and the paths really taken: per block one batched forward call
// for the self-attention, the cross-attention's k, v and a gated FFN, one batched backward
// call for a gated FFN, and one joined backward for each attention sublayer. The gradients:
// bitwise where only the batching differs (the CPU batch is a loop of the single ops); the
// joined GEMM sums q, k, v's products in one pass (one rounding, not three), so those
// gradients agree to fp32 rounding (relative to the tensor's largest).
static void check_batched_linears(Fixture *fx, T5Model *m) {
    char what[320];
    const T5Batch *b = fx->b;
    T5Model un;
    model_load(&un, fx->dir, backend_cpu(), fx->lo);
    un.dropout_p = m->dropout_p = 0.1f;
    m->dropout_seed = un.dropout_seed = 91;
    un.test.unbatched_linears = 1;
    t5_plan_activations(&un, b->B, b->S, b->T);
    t5_zero_grads(m);
    m->test.batched_linear_calls = m->test.joined_qkv_backward_calls = 0;
    long n1 = 0, n2 = 0;
    double l1 = t5_forward(m, b, fx->smoothing, &n1), l2 = t5_forward(&un, b, fx->smoothing, &n2);
    t5_backward(m, fx->smoothing, (float)(1.0 / (double)n1));
    t5_backward(&un, fx->smoothing, (float)(1.0 / (double)n2));
    const T5Config *c = &m->cfg;
    const long attn = (long)c->num_layers + 2L * c->num_decoder_layers,
               gated = c->is_gated ? (long)c->num_layers + c->num_decoder_layers : 0;
    // per tensor: bitwise, or (q, k, v, the norms and everything upstream of them: the joined
    // sums reach every earlier gradient) within 1e-5 of the tensor's largest gradient
    double worst = 0.0;
    for (int t = 0; t < m->lay.count; t++) {
        const ParamSpec *p = &m->lay.specs[t];
        const float *a = m->grads + p->offset, *b = un.grads + p->offset;
        double big = 0.0, diff = 0.0;
        for (size_t i = 0; i < p->numel; i++) {
            big = fmax(big, fabs(b[i]));
            diff = fmax(diff, fabs((double)a[i] - b[i]));
        }
        if (big > 0 && diff / big > worst) worst = diff / big;
    }
    snprintf(what, sizeof what, "%s: q, k, v (and gated wi_0, wi_1) batched, attention input gradients joined: same loss, "
             "grads within %.2e of one GEMM each (tensor-relative, want <= 1e-5); %ld batched calls (want %ld), %ld joined "
             "(want %ld), unbatched %ld and %ld", fx->variant, worst, m->test.batched_linear_calls, attn + 2 * gated,
             m->test.joined_qkv_backward_calls, attn, un.test.batched_linear_calls, un.test.joined_qkv_backward_calls);
    test_check(l1 == l2 && worst <= 1e-5 && m->test.batched_linear_calls == attn + 2 * gated &&
                   m->test.joined_qkv_backward_calls == attn && un.test.batched_linear_calls == 0 &&
                   un.test.joined_qkv_backward_calls == 0, what);
    t5_free(&un);
    m->dropout_p = 0.0f;
}

// Each block's residual adds fused with the next sublayer's norm (residual_rmsnorm_forward:
// encoder attention -> FFN, decoder self -> cross -> FFN) against the two ops: the same loss
// and bitwise-equal gradients (backward recomputes the norms with rmsnorm_forward), with
// dropout on, and the fusion really made: num_layers + 2 * num_decoder_layers per forward.
static void check_fused_residual_norm(Fixture *fx, T5Model *m) {
    char what[320];
    const T5Batch *b = fx->b;
    T5Model un;
    model_load(&un, fx->dir, backend_cpu(), fx->lo);
    un.dropout_p = m->dropout_p = 0.1f;
    m->dropout_seed = un.dropout_seed = 93;
    un.test.unfused_residual_norm = 1;
    t5_plan_activations(&un, b->B, b->S, b->T);
    t5_zero_grads(m);
    m->test.fused_residual_norms = 0;
    long n1 = 0, n2 = 0;
    double l1 = t5_forward(m, b, fx->smoothing, &n1), l2 = t5_forward(&un, b, fx->smoothing, &n2);
    long fused = m->test.fused_residual_norms, want = (long)m->cfg.num_layers + 2L * m->cfg.num_decoder_layers;
    t5_backward(m, fx->smoothing, (float)(1.0 / (double)n1));
    t5_backward(&un, fx->smoothing, (float)(1.0 / (double)n2));
    snprintf(what, sizeof what, "%s: residual add + next norm fused (dropout 0.1): same loss, bitwise-equal grads as "
             "two ops; %ld fused in the forward (want %ld), unfused %ld", fx->variant, fused, want,
             un.test.fused_residual_norms);
    test_check(l1 == l2 && !memcmp(m->grads, un.grads, m->lay.total * sizeof(float)) && fused == want &&
                   un.test.fused_residual_norms == 0, what);
    t5_free(&un);
    m->dropout_p = 0.0f;
}

// Gradient checkpointing and kept sublayer norms / FFN hidden states
// (T5Model.keep_sublayer_acts): what is recomputed or kept gives the same loss and
// bitwise-equal gradients as the plain plan m (dropout on: a recompute must regenerate
// the same masks). The arena must shrink with checkpointing and grow by exactly
// t5_keep_bytes with keep, and the kept buffers must be there (else the test proves nothing).
static void check_plan_variant(Fixture *fx, T5Model *m, int ckpt, int keep) {
    char what[320];
    const T5Batch *b = fx->b;
    float smoothing = fx->smoothing;
    T5Model ck;
    model_load(&ck, fx->dir, backend_cpu(), fx->lo);
    ck.dropout_p = 0.1f;
    m->dropout_p = 0.1f;
    m->dropout_seed = ck.dropout_seed = 1234;
    ck.gradient_checkpointing = ckpt;
    ck.keep_sublayer_acts = keep;
    t5_plan_activations(&ck, b->B, b->S, b->T);
    t5_zero_grads(m);
    long n1 = 0, n2 = 0;
    double l1 = t5_forward(m, b, smoothing, &n1), l2 = t5_forward(&ck, b, smoothing, &n2);
    t5_backward(m, smoothing, (float)(1.0 / (double)n1));
    t5_backward(&ck, smoothing, (float)(1.0 / (double)n2));
    size_t plain = t5_activation_bytes(&ck.cfg, DTYPE_F32, b->B, b->S, b->T, ckpt ? T5_ACTS_CHECKPOINT : T5_ACTS_TRAIN, 0);
    size_t kept = t5_keep_bytes(&ck.cfg, DTYPE_F32, b->B, b->S, b->T, ckpt, 0);
    int arena_ok = ck.acts.arena_bytes == plain + (keep ? kept : 0) && kept > 0 && (ckpt ? ck.acts.arena_bytes < m->acts.arena_bytes : 1) &&
                   (!ckpt && keep ? ck.acts.arena_bytes > m->acts.arena_bytes : 1);
    // a plain ReLU FFN keeps h's keep bits instead of its wi output, or regenerates both (scratch)
    const int relu = ck.cfg.act == ACT_RELU && !ck.cfg.is_gated;
    int kept_ok = !keep || (ck.acts.enc[0].self.ln && ck.acts.enc[0].ffn.h && ck.acts.dec[0].cross.ln && ck.acts.dec[0].cross.rstd &&
                            ck.acts.dec[ck.cfg.num_decoder_layers - 1].ffn.ln &&
                            (relu ? ck.acts.enc[0].ffn.bits && !ck.acts.enc[0].ffn.a : !ck.acts.enc[0].ffn.bits));
    int none_ok = keep || (!ck.acts.enc[0].self.ln && !ck.acts.enc[0].ffn.h && !ck.acts.dec[0].ffn.ln && !ck.acts.enc[0].ffn.bits &&
                           (relu ? ck.scratch.ffn_bits != NULL : ck.scratch.ffn_bits == NULL));
    snprintf(what, sizeof what, "%s: %s%s%s (dropout 0.1): same loss and bitwise-equal grads, arena %.1f vs %.1f KiB",
             fx->variant, ckpt ? "gradient checkpointing" : "", ckpt && keep ? " + " : "",
             keep ? "kept sublayer norms and FFN hidden states" : "", ck.acts.arena_bytes / 1024.0, m->acts.arena_bytes / 1024.0);
    test_check(l1 == l2 && !memcmp(m->grads, ck.grads, m->lay.total * sizeof(float)) && arena_ok && kept_ok && none_ok,
               what);
    t5_free(&ck);
    m->dropout_p = 0.0f;
}

// The head's gradient written by the forward's loss pass (T5Model.head_grad_in_forward, as
// zero/step.c sets it): the same loss and bitwise-equal gradients as the loss, then the
// gradient in backward; and the pass is really skipped (head_grad_ready), with the logits in
// one chunk; chunked logits take the two passes.
static void check_head_grad_in_forward(Fixture *fx, T5Model *m) {
    char what[320];
    const T5Batch *b = fx->b;
    float smoothing = fx->smoothing;
    T5Model hg;
    model_load(&hg, fx->dir, backend_cpu(), fx->lo);
    t5_plan_activations(&hg, b->B, b->S, b->T);
    t5_zero_grads(m);
    long n1 = 0, n2 = 0;
    double l1 = t5_forward(m, b, smoothing, &n1);
    const float dloss = (float)(1.0 / (double)n1);
    hg.head_grad_in_forward = 1, hg.head_dloss = dloss;
    double l2 = t5_forward(&hg, b, smoothing, &n2);
    hg.head_grad_in_forward = 0;
    const int ready = hg.head_grad_ready;
    t5_backward(m, smoothing, dloss);
    t5_backward(&hg, smoothing, dloss);
    snprintf(what, sizeof what, "%s: the head's gradient in the forward's loss pass: same loss and bitwise-equal grads "
             "(the backward's pass skipped: %s)", fx->variant, ready ? "yes" : "NO");
    test_check(l1 == l2 && ready && !hg.head_grad_ready && !memcmp(m->grads, hg.grads, m->lay.total * sizeof(float)),
               what);
    t5_free(&hg);
}

// Gradient checkpointing in sub-batches (T5Model.sub_batch = 1: each block runs row by row,
// model/t5.c window_enter): the same loss and gradients as checkpointing the whole batch at
// once (dropout 0; the weight gradients add window by window, so within 1e-5 of the largest
// gradient), and the arena is smaller (a block's activations hold one row).
static void check_sub_batch(Fixture *fx, T5Model *m) {
    char what[320];
    const T5Batch *b = fx->b;
    float smoothing = fx->smoothing;
    T5Model whole, sub;
    model_load(&whole, fx->dir, backend_cpu(), fx->lo);
    model_load(&sub, fx->dir, backend_cpu(), fx->lo);
    whole.dropout_p = sub.dropout_p = 0.0f;
    whole.gradient_checkpointing = sub.gradient_checkpointing = 1;
    sub.sub_batch = 1;
    t5_plan_activations(&whole, b->B, b->S, b->T);
    t5_plan_activations(&sub, b->B, b->S, b->T);
    long n1 = 0, n2 = 0;
    double l1 = t5_forward(&whole, b, smoothing, &n1), l2 = t5_forward(&sub, b, smoothing, &n2);
    t5_backward(&whole, smoothing, (float)(1.0 / (double)n1));
    t5_backward(&sub, smoothing, (float)(1.0 / (double)n2));
    const float *g1 = whole.grads, *g2 = sub.grads;
    double worst = 0, big = 0;
    for (size_t i = 0; i < m->lay.total; i++) {
        double d = fabs((double)g1[i] - g2[i]), a = fabs((double)g1[i]);
        if (d > worst) worst = d;
        if (a > big) big = a;
    }
    snprintf(what, sizeof what, "%s: checkpointing in sub-batches of 1 row (B=%d): loss %.9g vs %.9g, grads within "
             "%.2e of the largest (%.3g), arena %.1f vs %.1f KiB", fx->variant, b->B, l2, l1, worst / big, big,
             sub.acts.arena_bytes / 1024.0, whole.acts.arena_bytes / 1024.0);
    test_check(b->B > 1 && fabs(l1 - l2) <= 1e-6 * fabs(l1) && worst <= 1e-5 * big && sub.acts.arena_bytes < whole.acts.arena_bytes &&
                   !sub.win.on && sub.B == b->B, what);
    // dropout on: the windows draw their own masks, the same in forward and in the recompute
    // (a window's masks are a function of its first row): two runs give the same bits
    T5Model again;
    model_load(&again, fx->dir, backend_cpu(), fx->lo);
    again.gradient_checkpointing = 1;
    again.sub_batch = 1;
    t5_plan_activations(&again, b->B, b->S, b->T);
    sub.dropout_p = again.dropout_p = 0.1f;
    sub.dropout_seed = again.dropout_seed = 99;
    t5_zero_grads(&sub);
    double l3 = t5_forward(&sub, b, smoothing, &n1), l4 = t5_forward(&again, b, smoothing, &n2);
    t5_backward(&sub, smoothing, (float)(1.0 / (double)n1));
    t5_backward(&again, smoothing, (float)(1.0 / (double)n2));
    int finite = 1;
    for (size_t i = 0; i < m->lay.total; i++) finite &= isfinite(((const float *)sub.grads)[i]);
    snprintf(what, sizeof what, "%s: checkpointing in sub-batches, dropout 0.1: finite, and the same bits twice "
             "(loss %.9g, dropout changed it from %.9g)", fx->variant, l3, l2);
    test_check(finite && l3 == l4 && l3 != l2 && !memcmp(sub.grads, again.grads, m->lay.total * sizeof(float)), what);
    // ... and the recompute's masks are the forward's: the gradient matches the loss's slope
    // along it, (L(w + eps u) - L(w - eps u)) / 2 eps = |g| for u = g / |g| (same seed: the
    // same masks at both points); a recompute with other masks would be off by far more
    double gg = 0;
    const float *g = sub.grads;
    for (size_t i = 0; i < m->lay.total; i++) gg += (double)g[i] * g[i];
    const double norm = sqrt(gg), eps = 1e-2;
    float *w = sub.params, *w0 = mallocCheck(m->lay.total * sizeof(float));
    memcpy(w0, w, m->lay.total * sizeof(float));
    for (size_t i = 0; i < m->lay.total; i++) w[i] = (float)(w0[i] + eps * g[i] / norm);
    double lp = t5_forward(&sub, b, smoothing, &n1);
    for (size_t i = 0; i < m->lay.total; i++) w[i] = (float)(w0[i] - eps * g[i] / norm);
    double lm = t5_forward(&sub, b, smoothing, &n1);
    memcpy(w, w0, m->lay.total * sizeof(float));
    free(w0);
    double slope = (lp - lm) / (2 * eps) / (double)n1;
    snprintf(what, sizeof what, "%s: checkpointing in sub-batches, dropout 0.1: the loss's slope along the gradient "
             "%.6g = |g| %.6g", fx->variant, slope, norm);
    test_check(fabs(slope - norm) <= 0.02 * norm, what);
    t5_free(&whole);
    t5_free(&sub);
    t5_free(&again);
}

// The LM head in chunks (T5Acts.head_rows, what large batches get): a logits budget of
// 4 rows a chunk, so the chunks end inside a sequence and the last one is short; the loss
// and every gradient still match HF's.
static void check_head_chunks(Fixture *fx) {
    char what[256];
    const T5Batch *b = fx->b;
    T5Model m;
    model_load(&m, fx->dir, backend_cpu(), fx->lo);
    m.dropout_p = 0.0f;
    m.acts.head_logits_bytes = 4 * 4 * (size_t)m.cfg.vocab_size * sizeof(float);
    t5_plan_activations(&m, b->B, b->S, b->T);
    size_t nT = (size_t)b->B * b->T;
    snprintf(what, sizeof what, "%s: head in chunks of %zu of %zu rows", fx->variant, m.acts.head_rows, nT);
    test_check(m.acts.head_rows == 4 && nT % 4 != 0, what);
    long n = 0;
    double loss = t5_forward(&m, b, fx->smoothing, &n) / (double)n;
    float *want = read_ref(&fx->st, "loss", 1);
    snprintf(what, sizeof what, "%s: chunked head: loss", fx->variant);
    rel_ok(what, loss, want[0], 1e-5);
    free(want);
    t5_zero_grads(&m);
    t5_backward(&m, fx->smoothing, (float)(1.0 / (double)n));
    const char *names[] = {"grad.shared.weight", "grad.lm_head.weight", "grad.decoder.final_layer_norm.weight",
                           "grad.encoder.block.0.layer.0.SelfAttention.q.weight"};
    for (int i = 0; i < 4; i++) {
        int t = params_find(&m.lay, names[i] + 5);
        if (t < 0) continue;  // lm_head: tied variants have none
        const ParamSpec *p = &m.lay.specs[t];
        want = read_ref(&fx->st, names[i], p->numel);
        snprintf(what, sizeof what, "%s: chunked head: %s", fx->variant, names[i]);
        test_close(what, (float *)m.grads + p->offset, want, p->numel, 1e-4);
        free(want);
    }
    t5_free(&m);
}

// Weight decay set: exactly HF Trainer's decay parameter names.
static void check_decay_set(Fixture *fx, const T5Model *m) {
    char what[256];
    const ParamLayout *L = &m->lay;
    const cJSON *decay = cJSON_GetObjectItem(fx->ref, "decay_parameter_names");
    int mismatch = 0, n_decay = 0;
    for (int i = 0; i < L->count; i++) {
        int in_hf = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, decay) if (cJSON_IsString(it) && !strcmp(it->valuestring, L->specs[i].name)) in_hf = 1;
        if (in_hf == L->specs[i].no_decay) {
            printf("  decay mismatch: %s (ours no_decay=%d)\n", L->specs[i].name, L->specs[i].no_decay);
            mismatch++;
        }
        n_decay += !L->specs[i].no_decay;
    }
    snprintf(what, sizeof what, "%s: %d decayed tensors match HF's decay_parameter_names", fx->variant, n_decay);
    test_check(!mismatch && n_decay == cJSON_GetArraySize(decay), what);
}

// The ZeRO options of one run: stage 3 gets a prefetch budget of about two blocks (a pool
// of 3 buffers), nothing persistent; buckets of 37 / 53 elements cut tensors and units at
// odd places.
static ZeroOptions fixture_zero_options(const T5Model *m, int stage, int offload) {
    ZeroOptions zo = zero_options_stage(stage);
    zo.reduce_bucket = stage ? 37 : 0;
    zo.gather_bucket = stage ? 53 : 0;
    zo.overlap_comm = stage >= 2;
    zo.prefetch = stage == 3;
    zo.prefetch_elems = 2 * (m->lay.units[m->lay.unit_enc0].hi - m->lay.units[m->lay.unit_enc0].lo);
    zo.persist_threshold = 0;
    zo.offload_optimizer = offload;
    return zo;
}

// Parameters after the steps against the reference.
static void check_final_params(Fixture *fx, ZeroState *z, const T5Model *m, int stage, int offload) {
    char what[256];
    float *final = mallocCheck(m->lay.total * sizeof(float));
    zero_params_to_host(z, final);
    for (int i = 0; i < m->lay.count; i++) {
        const ParamSpec *p = &m->lay.specs[i];
        char name[160];
        snprintf(name, sizeof name, "final.%s", p->name);
        float *want = read_ref(&fx->st, name, p->numel);
        snprintf(what, sizeof what, "%s, stage %d%s: %s", fx->variant, stage, offload ? " offload" : "", name);
        test_close(what, final + p->offset, want, p->numel, 1e-5);
        free(want);
    }
    free(final);
}

// 3 AdamW steps from the initial weights at one ZeRO stage on one rank (the stage's unit
// hooks, partition buffers and bucketed collectives all run), optionally with the
// optimizer offloaded (host master and moments, AdamW on the CPU: zero/offload.c).
static void check_steps(Fixture *fx, int stage, int offload) {
    char what[256];
    const cJSON *ref = fx->ref;
    const char *variant = fx->variant;
    T5Model m;
    model_load(&m, fx->dir, backend_cpu(), fx->lo);
    m.dropout_p = 0.0f;
    t5_plan_activations(&m, fx->b->B, fx->b->S, fx->b->T);
    LrSchedule sched = {.base_lr = json_num(ref, "learning_rate"),
                        .warmup_steps = (int)json_num(ref, "warmup_steps"),
                        .total_steps = (int)json_num(ref, "num_training_steps")};
    if (!lr_schedule_parse(json_str(ref, "lr_scheduler_type"), &sched.type))
        t5_fail("reference.json: unknown lr_scheduler_type");
    AdamWConfig oc = {.lr = (float)json_num(ref, "learning_rate"), .beta1 = (float)json_num(ref, "adam_beta1"),
                      .beta2 = (float)json_num(ref, "adam_beta2"), .eps = (float)json_num(ref, "adam_epsilon"),
                      .weight_decay = (float)json_num(ref, "weight_decay"),
                      .max_grad_norm = (float)json_num(ref, "max_grad_norm")};
    ZeroState z;
    ZeroOptions zo = fixture_zero_options(&m, stage, offload);
    zero_init(&z, &m, zero_comm_single(), &zo, &oc, NULL);
    const cJSON *steps = cJSON_GetObjectItem(ref, "steps");
    int clipped = 0;
    long gathered_first = 0;
    for (int s = 0; s < cJSON_GetArraySize(steps); s++) {
        const cJSON *rs = cJSON_GetArrayItem(steps, s);
        StepResult r = zero_train_step(&z, &sched, NULL, fx->b, 1, fx->smoothing);
        if (s == 0) gathered_first = z.fetch.n_gathered;
        clipped += r.grad_norm > oc.max_grad_norm;
        snprintf(what, sizeof what, "%s, stage %d%s: step %d loss", variant, stage, offload ? " offload" : "", s + 1);
        rel_ok(what, r.loss, json_num(rs, "loss"), 1e-5);
        snprintf(what, sizeof what, "%s, stage %d%s: step %d grad_norm (pre-clip)", variant, stage,
                 offload ? " offload" : "", s + 1);
        rel_ok(what, r.grad_norm, json_num(rs, "grad_norm"), 1e-5);
        snprintf(what, sizeof what, "%s, stage %d: step %d learning_rate", variant, stage, s + 1);
        rel_ok(what, r.lr, json_num(rs, "learning_rate"), 1e-6);
    }
    printf("  (%d of %d steps had the gradient clipped)\n", clipped, cJSON_GetArraySize(steps));
    if (stage == 3 && !offload) {
        // step 1 learns the order of fetches of forward and backward (two units of history);
        // step 2 starts from a history step 1 never had (the end of backward, not nothing),
        // so its first two units come on demand; from then on the update's own prefetch
        // gathers the next forward's first units: every other fetch was prefetched or still
        // there from its last use
        int later = 2;
        snprintf(what, sizeof what, "%s, stage 3: later steps gather %ld unit(s) on demand (want %d), %ld prefetched, "
                 "%ld reused", variant, z.fetch.n_gathered - gathered_first, later, z.fetch.n_prefetched, z.fetch.n_reused);
        test_check(z.fetch.n_gathered - gathered_first == later && z.fetch.n_prefetched > 0 && z.fetch.n_reused > 0, what);
    }
    check_final_params(fx, &z, &m, stage, offload);
    zero_free(&z);
    t5_free(&m);
}

static void run_variant(const char *variant) {
    char path[600], what[256];
    Fixture fx = {.variant = variant};
    snprintf(fx.dir, sizeof fx.dir, "tests/fixtures/%s", variant);
    printf("--- fixture %s\n", variant);
    snprintf(path, sizeof path, "%s/reference.json", fx.dir);
    char *text = read_text_file(path, NULL);
    if (!text) t5_fail("%s: cannot open (run tools/make_fixtures.py)", path);
    fx.ref = cJSON_Parse(text);
    if (!fx.ref) t5_fail("%s: malformed JSON", path);
    fx.smoothing = (float)json_num(fx.ref, "label_smoothing");

    T5Model m;
    model_load(&m, fx.dir, backend_cpu(), fx.lo);
    m.dropout_p = 0.0f;
    snprintf(what, sizeof what, "%s: untied head as in reference.json", variant);
    test_check(m.cfg.untied_lm_head == cJSON_IsTrue(cJSON_GetObjectItem(fx.ref, "untied_lm_head")), what);

    snprintf(path, sizeof path, "%s/reference.safetensors", fx.dir);
    st_open(&fx.st, path);
    BatchFile bf;
    batch_file_load(&bf, path, m.cfg.vocab_size, m.cfg.decoder_start_token_id, m.cfg.pad_token_id);
    T5Batch *b = fx.b = &bf.batch;
    int *shifted = mallocCheck((size_t)b->B * b->T * sizeof(int));
    t5_shift_right(b->labels, shifted, b->B, b->T, m.cfg.decoder_start_token_id, m.cfg.pad_token_id);
    snprintf(what, sizeof what, "%s: t5_shift_right(labels) == HF decoder_input_ids", variant);
    test_check(!memcmp(shifted, b->decoder_input_ids, (size_t)b->B * b->T * sizeof(int)), what);
    free(shifted);

    long n = 0;
    check_forward(&fx, &m, &n);
    check_backward(&fx, &m, n);
    check_fused_branch_dropout(&fx, &m);
    check_batched_linears(&fx, &m);
    check_fused_residual_norm(&fx, &m);
    check_plan_variant(&fx, &m, 1, 0);
    check_plan_variant(&fx, &m, 0, 1);
    check_plan_variant(&fx, &m, 1, 1);
    check_sub_batch(&fx, &m);
    check_head_grad_in_forward(&fx, &m);
    check_head_chunks(&fx);
    check_decay_set(&fx, &m);
    t5_free(&m);
    // runs 4 and 5: stages 2 and 3 with the optimizer offloaded
    for (int run = 0; run <= 5; run++) check_steps(&fx, run <= 3 ? run : run - 2, run >= 4);
    batch_file_free(&bf);
    st_close(&fx.st);
    cJSON_Delete(fx.ref);
    free(text);
}

int main(void) {
    for (int i = 0; i < (int)(sizeof VARIANTS / sizeof VARIANTS[0]); i++) run_variant(VARIANTS[i]);
    return test_summary();
}
