// tests/test_fp8_model.c: --fp8 through the whole model on the CPU reference (model/fp8.h,
// model/block.c's linear door, zero/step.c's end-of-step update), on the fixture models of
// tests/fixtures (relu_tied: plain ReLU; gated_noscale: wi_0/wi_1, untied shapes):
//   - the slots: one per linear group, fewer with --fp8_bf16's names;
//   - a training step with fp8 is not the fp32 step (the rounding happens) but close to it,
//     and five steps learn as fp32 does;
//   - after a step every slot's three scales came from that step's amaxes (every group of
//     linears went through fp8 both ways), the amaxes moved into the history;
//   - evaluation outside a step does not use fp8 (bitwise the model without the state);
//   - gradient checkpointing recomputes with the same scales: the same step, bit for bit;
//   - ZeRO stages 2 and 3 give stage 0's fp8 steps bit for bit; accumulation updates once.
//   - the plain ReLU FFN's fused fp8_relu_drop_matmul_* give the steps of the ops they stand
//     for bit for bit (with and without the kept inputs, dropout on); a gated FFN never fuses;
//   - the weights' codes kept for the step give the steps of rounding every call bit for bit.
#include <math.h>
#include <string.h>

#include "../common/check.h"
#include "../data/batch_file.h"
#include "../kernels/fp8_format.h"
#include "../model/fp8.h"
#include "../model/load.h"
#include "../zero/step.h"
#include "test.h"

typedef struct {
    T5Model m;
    ZeroState z;
} Run;

// dropout: the model's rate (0 elsewhere); acts: keep the sublayer activations (the ReLU
// FFN's keep bits come with them); inputs: keep the rounded inputs, before the activation plan
// as the trainer does (the plan then leaves the FFN hidden states out: t5.c fp8_h_unneeded).
static void run_open_full(Run *r, const char *dir, const T5Batch *b, int fp8, unsigned keep, int ckpt, int stage,
                          float dropout, int acts, int inputs) {
    ModelLoadOptions lo = {0};
    model_load(&r->m, dir, backend_cpu(), lo);
    r->m.dropout_p = dropout;
    r->m.gradient_checkpointing = ckpt;
    r->m.keep_sublayer_acts = acts;
    if (fp8) t5_fp8_init(&r->m, keep, 4, 0);
    if (fp8 && inputs) t5_fp8_keep_inputs(&r->m, b->B, b->S, b->T);
    t5_plan_activations(&r->m, b->B, b->S, b->T);
    AdamWConfig oc = adamw_default_config();
    oc.lr = 1e-2f;
    ZeroOptions zo = zero_options_stage(stage);
    zo.overlap_comm = stage >= 2;
    zero_init(&r->z, &r->m, zero_comm_single(), &zo, &oc, NULL);
}

static void run_open_stage(Run *r, const char *dir, const T5Batch *b, int fp8, unsigned keep, int ckpt, int stage) {
    run_open_full(r, dir, b, fp8, keep, ckpt, stage, 0.0f, 0, 0);
}

static void run_open(Run *r, const char *dir, const T5Batch *b, int fp8, unsigned keep, int ckpt) {
    run_open_stage(r, dir, b, fp8, keep, ckpt, 0);
}

static void run_close(Run *r) {
    zero_free(&r->z);
    t5_free(&r->m);
}

static StepResult run_step(Run *r, const T5Batch *b) {
    LrSchedule sched = {.base_lr = 1e-2, .warmup_steps = 0, .total_steps = 100, .type = LR_CONSTANT};
    return zero_train_step(&r->z, &sched, NULL, b, 1, 0.0f);
}

static int slots_expected(const T5Config *c, unsigned keep) {
    const int out = !(keep & T5_FP8_KEEP_ATTN_OUT);
    int enc = c->num_layers, dec = c->num_decoder_layers;
    if (keep & T5_FP8_KEEP_FIRST_LAST) enc = enc > 2 ? enc - 2 : 0, dec = dec > 2 ? dec - 2 : 0;
    return enc * (3 + out) + dec * (5 + 2 * out);
}

static void check_slots(const char *dir, const T5Batch *b, const char *variant) {
    const unsigned keeps[] = {0, T5_FP8_KEEP_ATTN_OUT, T5_FP8_KEEP_FIRST_LAST, T5_FP8_KEEP_ATTN_OUT | T5_FP8_KEEP_FIRST_LAST};
    char what[256];
    for (int i = 0; i < 4; i++) {
        Run r;
        run_open(&r, dir, b, 1, keeps[i], 0);
        const int want = slots_expected(&r.m.cfg, keeps[i]);
        snprintf(what, sizeof what, "%s: keep %u: %d fp8 slots (want %d)", variant, keeps[i], r.m.fp8->n_slots, want);
        test_check(r.m.fp8->n_slots == want, what);
        run_close(&r);
    }
    snprintf(what, sizeof what, "%s: --fp8_bf16 \"attention_output,first_last\" parses to both names", variant);
    test_check(t5_fp8_parse_keep("attention_output,first_last", "--fp8_bf16") == (T5_FP8_KEEP_ATTN_OUT | T5_FP8_KEEP_FIRST_LAST) &&
                   t5_fp8_parse_keep("none", "--fp8_bf16") == 0 && t5_fp8_parse_keep(NULL, "--fp8_bf16") == 0,
               what);
}

// After one step: every entry's scale is the one its history column 0 gives, != 1 (the
// operand was seen), and the amaxes are back to 0.
static void check_state_after_step(const T5Fp8 *f, const char *variant) {
    const size_t e = (size_t)f->n_slots * FP8_OPERANDS;
    float *scale = mallocCheck(e * sizeof(float)), *inv = mallocCheck(e * sizeof(float));
    float *amax = mallocCheck(e * sizeof(float)), *hist = mallocCheck(e * (size_t)f->hist_len * sizeof(float));
    const Backend *be = backend_cpu();
    be->to_host(scale, f->scale, e * sizeof(float));
    be->to_host(inv, f->inv, e * sizeof(float));
    be->to_host(amax, f->amax, e * sizeof(float));
    be->to_host(hist, f->history, e * (size_t)f->hist_len * sizeof(float));
    int unseen = 0, wrong = 0, amax_left = 0;
    for (size_t i = 0; i < e; i++) {
        const float h = hist[i * (size_t)f->hist_len];
        const float want = fp8_scale_from_amax(h, fp8_operand_format((int)(i % FP8_OPERANDS)), 0, 1.0f);
        unseen += !(h > 0.0f) || scale[i] == 1.0f;
        wrong += scale[i] != want || inv[i] != 1.0f / want;
        amax_left += amax[i] != 0.0f;
    }
    char what[256];
    snprintf(what, sizeof what, "%s: after a step every one of %zu operands was seen (%d not) by %ld update(s)", variant, e,
             unseen, f->updates);
    test_check(unseen == 0 && f->updates == 1, what);
    snprintf(what, sizeof what, "%s: scale = fp8 max / the history's amax, inv = 1/scale (%d wrong)", variant, wrong);
    test_check(wrong == 0, what);
    snprintf(what, sizeof what, "%s: the amaxes moved into the history (%d left)", variant, amax_left);
    test_check(amax_left == 0, what);
    freeCheck(scale), freeCheck(inv), freeCheck(amax), freeCheck(hist);
}

static void check_training(const char *dir, const T5Batch *b, const char *variant) {
    char what[256];
    Run ref, f8, ck;
    run_open(&ref, dir, b, 0, 0, 0);
    run_open(&f8, dir, b, 1, 0, 0);
    run_open(&ck, dir, b, 1, 0, 1);
    Run kp;  // the forward's rounded inputs kept for the backward (model/fp8.h)
    run_open(&kp, dir, b, 1, 0, 0);
    t5_fp8_keep_inputs(&kp.m, b->B, b->S, b->T);
    StepResult r0 = run_step(&ref, b), r1 = run_step(&f8, b), r2 = run_step(&ck, b);
    const StepResult k1 = run_step(&kp, b);
    const double dl = fabs(r1.loss - r0.loss) / r0.loss, dg = fabs(r1.grad_norm - r0.grad_norm) / r0.grad_norm;
    snprintf(what, sizeof what, "%s: step 1 loss fp8 %.7f vs fp32 %.7f (rel %.2e: rounded, within 5%%)", variant, r1.loss,
             r0.loss, dl);
    test_check(r1.loss != r0.loss && dl < 0.05, what);
    snprintf(what, sizeof what, "%s: step 1 grad norm fp8 %.6f vs fp32 %.6f (rel %.2e: within 25%%)", variant,
             r1.grad_norm, r0.grad_norm, dg);
    test_check(r1.grad_norm != r0.grad_norm && dg < 0.25, what);
    snprintf(what, sizeof what, "%s: gradient checkpointing recomputes the same fp8 step (loss %.9g / %.9g, norm %.9g / %.9g)",
             variant, r2.loss, r1.loss, r2.grad_norm, r1.grad_norm);
    test_check(r2.loss == r1.loss && r2.grad_norm == r1.grad_norm, what);
    test_check(!f8.m.fp8_training, "the fp8 switch is off between steps");
    check_state_after_step(f8.m.fp8, variant);
    // evaluation outside a step: the model's own GEMMs, as without the state
    long n = 0;
    const double with_state = t5_forward(&f8.m, b, 0.0f, &n);
    T5Fp8 *saved = f8.m.fp8;
    f8.m.fp8 = NULL;
    const double without = t5_forward(&f8.m, b, 0.0f, &n);
    f8.m.fp8 = saved;
    snprintf(what, sizeof what, "%s: a forward outside a step ignores the fp8 state (%.9g vs %.9g)", variant, with_state,
             without);
    test_check(with_state == without, what);
    // kept rounded inputs: the same steps as rounding them again (the second in delayed scaling)
    const StepResult f2 = run_step(&f8, b), k2 = run_step(&kp, b);
    snprintf(what, sizeof what, "%s: kept rounded inputs (%.1f KiB): two steps bit for bit as rounding again (%.9g %.9g)",
             variant, kp.m.fp8->kept_bytes / 1024.0, k1.loss, k2.loss);
    test_check(kp.m.fp8->kept && k1.loss == r1.loss && k1.grad_norm == r1.grad_norm && k2.loss == f2.loss &&
                   k2.grad_norm == f2.grad_norm && kp.m.fp8->kept_bytes == t5_fp8_keep_bytes(&kp.m.cfg, 0, b->B, b->S, b->T),
               what);
    run_close(&kp);
    run_step(&ref, b);  // ref to f8's two steps
    // learning: four more steps each, the fp8 losses near the fp32 ones and falling as they do
    double l0 = r0.loss, l1 = r1.loss, worst = 0;
    for (int s = 0; s < 4; s++) {
        r0 = run_step(&ref, b), r1 = run_step(&f8, b);
        const double d = fabs(r1.loss - r0.loss) / r0.loss;
        if (d > worst) worst = d;
    }
    snprintf(what, sizeof what, "%s: 6 steps: fp8 loss %.5f -> %.5f, fp32 %.5f -> %.5f (worst rel gap %.2e, within 10%%)",
             variant, l1, r1.loss, l0, r0.loss, worst);
    test_check(r1.loss < l1 && r0.loss < l0 && worst < 0.10, what);
    run_close(&ref);
    run_close(&f8);
    run_close(&ck);
}

// ZeRO stages 2 and 3 (stage 3 rounds the gathered copies of the weights) give stage 0's fp8
// steps bit for bit; two micro-batches of a step update the scales once.
static void check_stages_and_accumulation(const char *dir, const T5Batch *b, const char *variant) {
    char what[256];
    Run s0;
    run_open(&s0, dir, b, 1, 0, 0);
    StepResult r0[2] = {run_step(&s0, b), run_step(&s0, b)};
    for (int stage = 2; stage <= 3; stage++) {
        Run r;
        run_open_stage(&r, dir, b, 1, 0, 0, stage);
        StepResult a = run_step(&r, b), c = run_step(&r, b);
        snprintf(what, sizeof what, "%s: fp8 at ZeRO stage %d: two steps' losses and norms as stage 0's (%.9g %.9g / %.9g %.9g)",
                 variant, stage, a.loss, c.loss, r0[0].loss, r0[1].loss);
        test_check(a.loss == r0[0].loss && c.loss == r0[1].loss && a.grad_norm == r0[0].grad_norm &&
                       c.grad_norm == r0[1].grad_norm,
                   what);
        run_close(&r);
    }
    run_close(&s0);
    Run acc;
    run_open(&acc, dir, b, 1, 0, 0);
    const T5Batch micro[2] = {*b, *b};
    LrSchedule sched = {.base_lr = 1e-2, .warmup_steps = 0, .total_steps = 100, .type = LR_CONSTANT};
    StepResult ra = zero_train_step(&acc.z, &sched, NULL, micro, 2, 0.0f);
    snprintf(what, sizeof what, "%s: a step of two micro-batches updates the scales once (%ld), loss %.7f near one batch's %.7f",
             variant, acc.m.fp8->updates, ra.loss, r0[0].loss);
    test_check(acc.m.fp8->updates == 1 && fabs(ra.loss - r0[0].loss) < 0.05 * r0[0].loss, what);
    run_close(&acc);
}

// The step's weight codes kept (t5_fp8_keep_weights: rounded by a group's first forward of a
// step, read by its later forwards and its backward): three steps bit for bit as rounding them
// every call, at stages 0 and 3, with gradient checkpointing (the recompute reads them), with
// two micro-batches a step, with the inputs kept too; dropout 0.1, sublayer activations kept.
static void check_kept_weights(const char *dir, const T5Batch *b, const char *variant) {
    static const struct {
        int stage, ckpt, micro, inputs;
        const char *name;
    } cfgs[] = {{0, 0, 1, 0, "stage 0"},
                {3, 0, 1, 0, "stage 3"},
                {0, 1, 1, 0, "gradient checkpointing"},
                {0, 0, 2, 0, "2 micro-batches"},
                {0, 0, 1, 1, "inputs kept too"},
                {3, 1, 2, 1, "stage 3, checkpointing, 2 micro-batches, inputs kept"}};
    LrSchedule sched = {.base_lr = 1e-2, .warmup_steps = 0, .total_steps = 100, .type = LR_CONSTANT};
    const T5Batch micro[2] = {*b, *b};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        Run r[2];  // [0] rounding every call, [1] the weights kept
        for (int k = 0; k < 2; k++) {
            run_open_full(&r[k], dir, b, 1, 0, cfgs[c].ckpt, cfgs[c].stage, 0.1f, 1, cfgs[c].inputs);
            if (k) t5_fp8_keep_weights(&r[k].m);
        }
        int same = 1;
        double l[2] = {0, 0};
        for (int s = 0; s < 3; s++) {
            StepResult x[2];
            for (int k = 0; k < 2; k++) x[k] = zero_train_step(&r[k].z, &sched, NULL, micro, cfgs[c].micro, 0.0f);
            same &= x[0].loss == x[1].loss && x[0].grad_norm == x[1].grad_norm;
            l[0] = x[0].loss, l[1] = x[1].loss;
        }
        char what[320];
        snprintf(what, sizeof what, "%s: kept fp8 weight codes (%.1f KiB), %s: 3 steps bit for bit (loss %.9g / %.9g)",
                 variant, r[1].m.fp8->wkept_bytes / 1024.0, cfgs[c].name, l[1], l[0]);
        test_check(same && r[1].m.fp8->wkept && !r[0].m.fp8->wkept &&
                       r[1].m.fp8->wkept_bytes == t5_fp8_weight_bytes(&r[1].m.cfg, 0),
                   what);
        run_close(&r[0]);
        run_close(&r[1]);
    }
}

// The plain ReLU FFN with its keep bits (kept sublayer activations), dropout 0.1: the fused
// fp8_relu_drop_matmul_* (backend.h; from the second step on, delayed scaling) give the steps
// of relu_drop_* then fp8_matmul_* bit for bit, with the rounded inputs kept (forward and
// backward fuse) and without (the backward only: the forward must store h). A gated FFN
// never fuses. With the inputs kept, the plan leaves the hidden states out; the same steps
// with them kept (the inputs kept after the plan) come out bit for bit.
static void check_fused_relu(const char *dir, const T5Batch *b, const char *variant) {
    char what[320];
    for (int kept = 0; kept <= 1; kept++) {
        Run r[3];  // [0] fused where it applies, [1] the test knob: never, [2] fused, h kept
        for (int u = 0; u < 3; u++) {
            run_open_full(&r[u], dir, b, 1, 0, 0, 0, 0.1f, 1, kept && u < 2);
            if (kept && u == 2) t5_fp8_keep_inputs(&r[u].m, b->B, b->S, b->T);
            r[u].m.test.unfused_fp8_relu = u == 1;
        }
        const T5Config *c = &r[0].m.cfg;
        const int relu = !c->is_gated && c->act == ACT_RELU && c->d_ff % 8 == 0;
        const long want = relu ? 2L * (c->num_layers + c->num_decoder_layers) * (1 + kept) : 0;
        int same = 1;
        double l[2] = {0, 0};
        for (int s = 0; s < 3; s++) {
            const StepResult a = run_step(&r[0], b), u = run_step(&r[1], b), h = run_step(&r[2], b);
            same &= a.loss == u.loss && a.grad_norm == u.grad_norm && a.loss == h.loss && a.grad_norm == h.grad_norm;
            l[0] = a.loss, l[1] = u.loss;
        }
        snprintf(what, sizeof what,
                 "%s: fp8 ReLU FFN %s kept inputs, dropout 0.1: 3 steps fused (%ld calls, want %ld) bit for bit "
                 "unfused (%ld) and with h kept: loss %.9g / %.9g",
                 variant, kept ? "with" : "without", r[0].m.test.fused_fp8_relu_calls, want,
                 r[1].m.test.fused_fp8_relu_calls, l[0], l[1]);
        test_check(same && r[0].m.test.fused_fp8_relu_calls == want && r[1].m.test.fused_fp8_relu_calls == 0, what);
        const size_t h_bytes = r[0].m.cfg.d_ff * sizeof(float) *
                               (size_t)b->B * (r[0].m.cfg.num_layers * b->S + r[0].m.cfg.num_decoder_layers * b->T);
        snprintf(what, sizeof what, "%s: %s kept inputs the plan leaves the FFN hidden states out: %zu bytes (want %zu)",
                 variant, kept ? "with" : "without", r[0].m.acts.h_unkept_bytes, kept ? h_bytes : (size_t)0);
        test_check(r[0].m.acts.h_unkept_bytes == (kept ? h_bytes : 0) && r[2].m.acts.h_unkept_bytes == 0, what);
        for (int u = 0; u < 3; u++) run_close(&r[u]);
    }
}

// --fp8_bf16 first_last with the inputs kept before the plan: the first and last blocks' wo stay
// bf16 and read h, so the plan keeps every hidden state (none left out), and the steps (the
// middle blocks fused, dropout 0.1) are bit for bit those of the inputs kept after the plan.
static void check_first_last_keeps_h(const char *dir, const T5Batch *b, const char *variant) {
    Run r[2];
    for (int k = 0; k < 2; k++) {
        run_open_full(&r[k], dir, b, 1, T5_FP8_KEEP_FIRST_LAST, 0, 0, 0.1f, 1, k == 0);
        if (k == 1) t5_fp8_keep_inputs(&r[k].m, b->B, b->S, b->T);
    }
    int same = 1;
    double l = 0;
    for (int s = 0; s < 3; s++) {
        const StepResult x = run_step(&r[0], b), y = run_step(&r[1], b);
        same &= x.loss == y.loss && x.grad_norm == y.grad_norm;
        l = x.loss;
    }
    char what[256];
    snprintf(what, sizeof what, "%s: --fp8_bf16 first_last, inputs kept: no hidden state left out (%zu bytes), 3 steps "
             "bit for bit (loss %.9g)", variant, r[0].m.acts.h_unkept_bytes, l);
    test_check(same && r[0].m.acts.h_unkept_bytes == 0 && r[0].m.fp8->kept, what);
    run_close(&r[0]);
    run_close(&r[1]);
}

int main(void) {
    const char *variants[] = {"relu_tied", "gated_noscale"};
    for (int v = 0; v < 2; v++) {
        char dir[256], path[300];
        snprintf(dir, sizeof dir, "tests/fixtures/%s", variants[v]);
        snprintf(path, sizeof path, "%s/reference.safetensors", dir);
        T5Model probe;
        ModelLoadOptions lo = {0};
        model_load(&probe, dir, backend_cpu(), lo);
        BatchFile bf;
        batch_file_load(&bf, path, probe.cfg.vocab_size, probe.cfg.decoder_start_token_id, probe.cfg.pad_token_id);
        t5_free(&probe);
        printf("--- fp8 on fixture %s\n", variants[v]);
        check_slots(dir, &bf.batch, variants[v]);
        check_training(dir, &bf.batch, variants[v]);
        check_stages_and_accumulation(dir, &bf.batch, variants[v]);
        check_fused_relu(dir, &bf.batch, variants[v]);
        check_kept_weights(dir, &bf.batch, variants[v]);
        check_first_last_keeps_h(dir, &bf.batch, variants[v]);
        batch_file_free(&bf);
    }
    return test_summary();
}
