// tests/test_trainer.c: `train_t5 --do_train` against Hugging Face Trainer itself.
// tools/make_trainer_fixture.py ran transformers 5.17's Trainer on 24 real en-ro lines
// with the real T5 tokenizer (sequential sampler, dropout 0, label smoothing, weight
// decay, clipping, linear warmup, gradient accumulation); here the same flags
// (args.json) run ./train_t5 and its trainer_state.json log_history, results files and
// final model.safetensors are compared with HF's.
//   main     GA 2, label smoothing 0.1: loss/grad_norm/lr/epoch per step + final weights
//   padded   main with long max lengths: micro-batches with different token counts, so
//            the token-weighted normalization over the whole step is really tested
//   ga1      one micro-batch of 8 per step: the same figures as main
//   nosmooth GA 2 without label smoothing: HF 5.17 logs the SUM of the micro-batch
//            means there (a bug we do not copy, docs/TRAINER.md); we compare our loss with
//            the token-weighted mean HF's fixture records (ce_token_mean)
// Run from the repository root after `make` (uses ./train_t5).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../formats/safetensors.h"
#include "test_files.h"
#include "test.h"

// The fixtures are made on a CPU whose torch kernels are AVX2's (tools/make_trainer_fixture.py
// records torch's cpu_capability), the reduction orders train_t5's CPU backend follows: then loss
// and grad_norm agree to ~1e-7 and 1.3e-6 (the embedding's gradient of this d_model-8 model, a sum
// over the whole 32128-row vocabulary). Fixtures made under torch's AVX512 kernels (the GPU
// machine's host) were 1.7e-6 to 1.8e-5 away from AVX2's own: the 1e-5-level "drift" issue 35 saw.
#define LOSS_TOL 1e-6
#define GRAD_NORM_TOL 2e-6

static int rel_ok(const char *what, double got, double want, double tol) {
    double rel = fabs(got - want) / fmax(fabs(want), 1e-12);
    if (want == 0) rel = fabs(got);
    char buf[256];
    snprintf(buf, sizeof buf, "%-48s got %.9g want %.9g rel %.2e (tol %.0e)", what, got, want, rel, tol);
    return test_check(isfinite(got) && rel <= tol, buf);
}

// Run ./train_t5 with the fixture's flags into out_dir; returns the exit status.
static int run_train_t5(const char *run, const char *out_dir, const char *cache_dir) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/trainer_%s/args.json", run);
    cJSON *args = test_load_json(path, "");
    const cJSON *flags = cJSON_GetObjectItem(args, "train_t5_flags");
    size_t cap = 8192, len = 0;
    char *cmd = mallocCheck(cap);
    len += (size_t)snprintf(cmd, cap, "./train_t5 --device cpu");  // a CPU test, GPU or not
    const cJSON *f;
    cJSON_ArrayForEach(f, flags) len += (size_t)snprintf(cmd + len, cap - len, " '%s'", f->valuestring);
    snprintf(cmd + len, cap - len, " --output_dir '%s' --cache_dir '%s' > '%s.log' 2>&1", out_dir, cache_dir, out_dir);
    int rc = system(cmd);
    free(cmd);
    cJSON_Delete(args);
    return rc;
}

// log_history against HF's steps.json.
static void check_log_history(const char *run, const char *out, int nosmooth) {
    char path[600], what[160];
    snprintf(path, sizeof path, "tests/fixtures/trainer_%s/steps.json", run);
    cJSON *ref = test_load_json(path, "");
    snprintf(path, sizeof path, "%s/trainer_state.json", out);
    cJSON *state = test_load_json(path, "");
    const cJSON *hist = cJSON_GetObjectItem(state, "log_history");
    const cJSON *steps = cJSON_GetObjectItem(ref, "steps");
    for (int i = 0; i < cJSON_GetArraySize(steps); i++) {
        const cJSON *want = cJSON_GetArrayItem(steps, i), *got = cJSON_GetArrayItem(hist, i);
        if (!got) {
            snprintf(what, sizeof what, "%s: log_history has step %d", run, i + 1);
            test_check(0, what);
            continue;
        }
        snprintf(what, sizeof what, "%s: step %d step number", run, i + 1);
        test_check(test_json_num(got, "step") == test_json_num(want, "step"), what);
        snprintf(what, sizeof what, "%s: step %d loss%s", run, i + 1, nosmooth ? " (vs token mean)" : "");
        rel_ok(what, test_json_num(got, "loss"), test_json_num(want, nosmooth ? "ce_token_mean" : "loss"), LOSS_TOL);
        if (!nosmooth) {
            snprintf(what, sizeof what, "%s: step %d grad_norm", run, i + 1);
            rel_ok(what, test_json_num(got, "grad_norm"), test_json_num(want, "grad_norm"), GRAD_NORM_TOL);
        }
        snprintf(what, sizeof what, "%s: step %d learning_rate", run, i + 1);
        rel_ok(what, test_json_num(got, "learning_rate"), test_json_num(want, "learning_rate"), 1e-9);
        snprintf(what, sizeof what, "%s: step %d epoch", run, i + 1);
        rel_ok(what, test_json_num(got, "epoch"), test_json_num(want, "epoch"), 1e-12);
    }
    cJSON_Delete(ref);
    cJSON_Delete(state);
}

// Results files as HF writes them (runtime fields differ by nature), the output files, no *.tmp.
static void check_results_files(const char *run, const char *out, int nosmooth) {
    char path[600], what[160];
    snprintf(path, sizeof path, "tests/fixtures/trainer_%s/train_results.json", run);
    cJSON *hf_res = test_load_json(path, "");
    snprintf(path, sizeof path, "%s/train_results.json", out);
    cJSON *res = test_load_json(path, "");
    const char *keys[] = {"epoch", "total_flos", "train_loss", "train_runtime", "train_samples_per_second",
                          "train_steps_per_second"};
    int all_keys = 1;
    for (int k = 0; k < 6; k++) all_keys &= cJSON_IsNumber(cJSON_GetObjectItem(res, keys[k]));
    snprintf(what, sizeof what, "%s: train_results.json has HF's keys", run);
    test_check(all_keys, what);
    snprintf(path, sizeof path, "tests/fixtures/trainer_%s/trainer_state.json", run);
    cJSON *hf_state = test_load_json(path, "");
    snprintf(what, sizeof what, "%s: total_flos (HF's trainer_state.json)", run);
    rel_ok(what, test_json_num(res, "total_flos"), test_json_num(hf_state, "total_flos"), 1e-12);
    cJSON_Delete(hf_state);
    if (!nosmooth) {
        snprintf(what, sizeof what, "%s: train_loss", run);
        rel_ok(what, test_json_num(res, "train_loss"), test_json_num(hf_res, "train_loss"), LOSS_TOL);
    }
    const char *files[] = {"all_results.json", "config.json", "model.safetensors", "spiece.model"};
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "%s/%s", out, files[k]);
        snprintf(what, sizeof what, "%s: output_dir has %s", run, files[k]);
        test_check(path_exists(path), what);
    }
    snprintf(path, sizeof path, "ls '%s' | grep -q '\\.tmp$'", out);
    snprintf(what, sizeof what, "%s: no *.tmp left in output_dir", run);
    test_check(system(path) != 0, what);

    cJSON_Delete(hf_res);
    cJSON_Delete(res);
}

// Final weights against HF's final.safetensors, when the fixture has one.
static void check_final_weights(const char *run, const char *out) {
    char path[600], what[160];
    snprintf(path, sizeof path, "tests/fixtures/trainer_%s/final.safetensors", run);
    if (!path_exists(path)) return;
    StFile want, got;
    st_open(&want, path);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    st_open(&got, path);
    double worst = 0;
    int missing = 0;
    for (int t = 0; t < want.count; t++) {
        const StTensor *w = &want.tensors[t], *g = st_find(&got, w->name);
        if (!g || g->numel != w->numel) {
            missing++;
            continue;
        }
        float *a = mallocCheck(w->numel * sizeof(float)), *b = mallocCheck(w->numel * sizeof(float));
        st_read_f32(&want, w, a);
        st_read_f32(&got, g, b);
        snprintf(what, sizeof what, "%s: final %s", run, w->name);
        double maxd = 0, maxr = 0;
        for (uint64_t k = 0; k < w->numel; k++) {
            maxd = fmax(maxd, fabs((double)a[k] - b[k]));
            maxr = fmax(maxr, fabs((double)a[k]));
        }
        worst = fmax(worst, maxd / fmax(maxr, 1e-30));
        test_close(what, b, a, w->numel, 1e-5);
        free(a);
        free(b);
    }
    snprintf(what, sizeof what, "%s: every HF tensor in model.safetensors (worst rel %.2e)", run, worst);
    test_check(!missing, what);
    st_close(&want);
    st_close(&got);
}

static void compare_run(const char *run, const char *tmp) {
    char out[512], cache[512], path[600], what[160];
    snprintf(out, sizeof out, "%s/%s", tmp, run);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    printf("--- run %s\n", run);
    int rc = run_train_t5(run, out, cache);
    snprintf(what, sizeof what, "%s: ./train_t5 exits 0", run);
    if (!test_check(rc == 0, what)) {
        snprintf(path, sizeof path, "cat '%s.log'", out);
        if (system(path) != 0) printf("(no log)\n");
        return;
    }
    int nosmooth = !strcmp(run, "nosmooth");
    check_log_history(run, out, nosmooth);
    check_results_files(run, out, nosmooth);
    check_final_weights(run, out);
}

// --freeze_embeds (finetune_trainer.py): shared.weight, and with it the tied head, stays
// exactly as loaded while the other weights train.
static void freeze_embeds(const char *tmp) {
    char out[512], cmd[2048], path[600];
    snprintf(out, sizeof out, "%s/freeze", tmp);
    snprintf(cmd, sizeof cmd,
             "./train_t5 --device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
             "--data_dir tests/fixtures/trainer_data --max_steps 2 --per_device_train_batch_size 4 --learning_rate 1e-2 "
             "--freeze_embeds --do_train --output_dir '%s' --cache_dir '%s/cache' > '%s.log' 2>&1", out, tmp, out);
    if (!test_check(system(cmd) == 0, "freeze_embeds: ./train_t5 exits 0")) return;
    StFile a, b;
    st_open(&a, "tests/fixtures/trainer_model/model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    st_open(&b, path);
    const char *names[2] = {"shared.weight", "encoder.block.0.layer.0.SelfAttention.q.weight"};
    for (int k = 0; k < 2; k++) {
        const StTensor *ta = st_find(&a, names[k]), *tb = st_find(&b, names[k]);
        if (!ta || !tb || ta->numel != tb->numel) {
            test_check(0, "freeze_embeds: tensors present");
            continue;
        }
        float *x = mallocCheck(ta->numel * sizeof(float)), *y = mallocCheck(ta->numel * sizeof(float));
        st_read_f32(&a, ta, x);
        st_read_f32(&b, tb, y);
        int same = !memcmp(x, y, ta->numel * sizeof(float));
        char what[200];
        snprintf(what, sizeof what, "freeze_embeds: %s %s", names[k], k == 0 ? "unchanged" : "trained (changed)");
        test_check(k == 0 ? same : !same, what);
        free(x);
        free(y);
    }
    st_close(&a);
    st_close(&b);
}

// --deepspeed configs/ds_config_zero2.json (all "auto"): WarmupLR with DeepSpeed's own
// semantics (log warmup; the scheduler sets warmup_min_lr at construction and steps after
// each update, so updates 1 and 2 both run at the start), stage 2 on one rank.
static void deepspeed_config(const char *tmp) {
    char out[512], cmd[2048], path[600], what[200];
    snprintf(out, sizeof out, "%s/ds", tmp);
    snprintf(cmd, sizeof cmd,
             "./train_t5 --device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
             "--data_dir tests/fixtures/trainer_data --max_steps 6 --per_device_train_batch_size 4 --learning_rate 1e-3 "
             "--warmup_steps 4 --logging_steps 1 --do_train --deepspeed configs/ds_config_zero2.json --output_dir '%s' "
             "--cache_dir '%s/cache' > '%s.log' 2>&1", out, tmp, out);
    if (!test_check(system(cmd) == 0, "deepspeed ds_config_zero2.json: ./train_t5 exits 0")) return;
    snprintf(path, sizeof path, "grep -q 'zero stage 2 (one rank: its partition is the whole model' '%s.log'", out);
    test_check(system(path) == 0, "deepspeed: stage 2 on one rank is reported as such");
    snprintf(path, sizeof path, "grep -q '^ZeRO stage 2, rank 0 of 1: allocated' '%s.log'", out);
    test_check(system(path) == 0, "deepspeed: stage 2 runs (its memory line printed)");
    snprintf(path, sizeof path, "%s/trainer_state.json", out);
    cJSON *st = test_load_json(path, "");
    const cJSON *h = cJSON_GetObjectItem(st, "log_history");
    // iteration it = update - 2; it < 0: warmup_min_lr; it < W: min + (max-min) log(it+1)/log(W)
    const double W = 4, want[6] = {0, 0, 1e-3 * log(2) / log(W), 1e-3 * log(3) / log(W), 1e-3, 1e-3};
    double worst = 0;
    for (int k = 0; k < 6; k++) worst = fmax(worst, fabs(test_json_num(cJSON_GetArrayItem(h, k), "learning_rate") - want[k]));
    snprintf(what, sizeof what, "deepspeed: WarmupLR (log, 4 steps) learning rates of 6 updates (max diff %.1e)", worst);
    test_check(worst < 1e-12, what);
    cJSON_Delete(st);
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    char tmp[] = "/tmp/t5_test_trainer.XXXXXX";
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    const char *runs[] = {"main", "padded", "ga1", "nosmooth"};
    for (int i = 0; i < 4; i++) compare_run(runs[i], tmp);
    freeze_embeds(tmp);
    deepspeed_config(tmp);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
    return test_summary();
}
