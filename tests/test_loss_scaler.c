// tests/test_loss_scaler.c: DeepSpeed's dynamic loss scaler state machine
// (optim/loss_scaler.c) on traces derived line by line from
// deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler.update_scale, and the skipped
// step on the CPU training path: an inf injected into one gradient skips the update
// (parameters, optimizer step count and lr schedule untouched) and counts hysteresis down.
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "../data/batch_file.h"
#include "../model/load.h"
#include "../zero/step.h"
#include "test.h"

typedef struct {
    int overflow;
    double scale_after;
    int hysteresis_after;
} TraceStep;

static void run_trace(const char *name, LossScaler s, const TraceStep *t, int n) {
    int ok = 1, bad = -1;
    for (int i = 0; i < n && ok; i++) {
        loss_scaler_update(&s, t[i].overflow);
        if (s.cur_scale != t[i].scale_after || s.cur_hysteresis != t[i].hysteresis_after) ok = 0, bad = i;
    }
    char what[256];
    if (ok) snprintf(what, sizeof what, "%s: %d updates follow DeepSpeed's trace", name, n);
    else
        snprintf(what, sizeof what, "%s: iter %d: scale %g hysteresis %d, want %g / %d", name, bad, s.cur_scale,
                 s.cur_hysteresis, t[bad].scale_after, t[bad].hysteresis_after);
    test_check(ok, what);
}

static void test_state_machine(void) {
    // window 3, hysteresis 2, scale 2^4, min 1, no consecutive hysteresis
    const TraceStep a[] = {
        {1, 16, 1},  // iter 0: overflow, hysteresis 2 -> 1, scale kept
        {1, 8, 1},   // iter 1: overflow with hysteresis 1: halve
        {0, 8, 1},   // iter 2: stable interval 0
        {0, 8, 1},   // iter 3: 1
        {0, 8, 1},   // iter 4: 2
        {0, 16, 2},  // iter 5: 3 % window == 0: double, refill hysteresis
        {0, 16, 2}, {0, 16, 2},
        {0, 32, 2},  // iter 8: stable 6
        {1, 32, 1},  // iter 9: overflow eats hysteresis only
        {0, 32, 1},  // iter 10: no refill without consecutive_hysteresis
        {1, 16, 1},  // iter 11: overflow at hysteresis 1: halve
    };
    run_trace("window 3, hysteresis 2", loss_scaler_dynamic(4, 3, 2, 1.0, 0), a, (int)(sizeof a / sizeof a[0]));

    const TraceStep b[] = {
        {1, 4, 1}, {0, 4, 2},  // consecutive hysteresis refills on every clean step
        {1, 4, 1}, {1, 2, 1}, {1, 1, 1},  // halving stops at min_scale 1
    };
    run_trace("consecutive hysteresis", loss_scaler_dynamic(2, 1000, 2, 1.0, 1), b, (int)(sizeof b / sizeof b[0]));

    const TraceStep c[] = {{1, 32768, 1}, {1, 16384, 1}, {1, 8192, 1}};  // hysteresis 1 = delayed_shift 1
    run_trace("hysteresis 1 halves at once", loss_scaler_dynamic(16, 1000, 1, 1.0, 0), c, 3);

    LossScaler s = loss_scaler_dynamic(16, 1000, 2, 1.0, 0);
    test_check(s.cur_scale == 65536.0, "initial_scale_power 16 -> scale 65536 (DeepSpeed's default)");
    for (int i = 0; i < 1000; i++) loss_scaler_update(&s, 0);
    test_check(s.cur_scale == 65536.0, "1000 clean steps from the start: no growth yet (stable interval = iter - (-1) - 1 = 999)");
    loss_scaler_update(&s, 0);
    test_check(s.cur_scale == 131072.0, "the 1001st clean step (stable interval 1000): scale doubles");

    // at min scale an overflow is fatal (DeepSpeed raises): one error line, exit 1
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        LossScaler m = loss_scaler_dynamic(0, 1000, 1, 1.0, 0);
        loss_scaler_update(&m, 1);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    test_check(WIFEXITED(status) && WEXITSTATUS(status) == 1, "overflow at min_loss_scale: error exit 1 (DeepSpeed raises)");
}

static void test_skipped_step(void) {
    const char *dir = "tests/fixtures/relu_tied";
    char path[256];
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    T5Model m;
    ModelLoadOptions lo = {0};
    model_load(&m, dir, backend_cpu(), lo);
    m.dropout_p = 0;
    BatchFile bf;
    batch_file_load(&bf, path, m.cfg.vocab_size, 0, 0);
    t5_plan_activations(&m, bf.batch.B, bf.batch.S, bf.batch.T);
    AdamWConfig oc = adamw_default_config();
    oc.lr = 1e-2f;
    ZeroState z;
    ZeroOptions zo = zero_options_stage(0);
    zero_init(&z, &m, zero_comm_single(), &zo, &oc, NULL);
    const AdamW *opt = &z.opt;
    LrSchedule sched = {.type = LR_LINEAR, .base_lr = 1e-2, .warmup_steps = 0, .total_steps = 10};
    LossScaler sc = loss_scaler_dynamic(10, 1000, 2, 1.0, 0);
    size_t bytes = m.lay.total * sizeof(float);
    float *before = mallocCheck(bytes);
    memcpy(before, m.params, bytes);

    long n = 0;
    zero_step_accumulate(&z, &bf.batch, 1, 0.0f, sc.cur_scale, 0, &n);
    ((float *)m.grads)[m.lay.specs[5].offset + 3] = INFINITY;  // one inf anywhere
    StepResult r = zero_step_apply(&z, &sched, &sc);
    test_check(r.skipped == 1, "injected inf: the step is reported as skipped");
    test_check(!memcmp(before, m.params, bytes), "injected inf: parameters unchanged");
    test_check(opt->step == 0, "injected inf: optimizer step count unchanged (lr schedule not advanced)");
    test_check(sc.cur_scale == 1024.0 && sc.cur_hysteresis == 1 && sc.skipped_steps == 1,
               "injected inf: hysteresis 2 -> 1, scale kept at 2^10, one skipped step");
    float zero_check = 0;
    for (size_t i = 0; i < m.lay.total; i++) zero_check += fabsf(((float *)m.grads)[i]);
    test_check(zero_check == 0, "injected inf: gradients cleared for the next step");

    // a clean step: applied with the first lr of the schedule, unscaled gradients
    r = zero_train_step(&z, &sched, &sc, &bf.batch, 1, 0.0f);
    test_check(!r.skipped && opt->step == 1 && r.lr == 1e-2, "clean step after the skip: applied with lr(step 0)");
    float *scaled = mallocCheck(bytes);
    memcpy(scaled, m.params, bytes);

    // the same clean step without a scaler gives the same parameters (unscaling is exact
    // up to fp32 rounding of scale * grad)
    T5Model ref;
    model_load(&ref, dir, backend_cpu(), lo);
    ref.dropout_p = 0;
    t5_plan_activations(&ref, bf.batch.B, bf.batch.S, bf.batch.T);
    ZeroState z2;
    zero_init(&z2, &ref, zero_comm_single(), &zo, &oc, NULL);
    StepResult r2 = zero_train_step(&z2, &sched, NULL, &bf.batch, 1, 0.0f);
    char what[200];
    snprintf(what, sizeof what, "grad_norm with scale 1024 = without (%.9g vs %.9g)", r.grad_norm, r2.grad_norm);
    test_check(fabs(r.grad_norm - r2.grad_norm) <= 1e-6 * r2.grad_norm, what);
    test_close("parameters after a scaled step = after an unscaled step", scaled, ref.params, ref.lay.total, 1e-6);
    zero_free(&z2);
    t5_free(&ref);
    free(scaled);
    free(before);
    zero_free(&z);
    batch_file_free(&bf);
    t5_free(&m);
}

int main(void) {
    test_state_machine();
    test_skipped_step();
    return test_summary();
}
