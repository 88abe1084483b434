// tests/test_ds_config.c: the DeepSpeed JSON config (zero/ds_config.c) without a GPU:
//  - every file in configs/ loads, resolves unchanged and is accepted by the ZeRO set-up
//    (zero_options_from_config: what is not built is refused there);
//  - every file in configs/ trains 3 steps of a tiny T5 through ./train_t5 on the CPU, except
//    those that switch fp16/bf16 on themselves: those need a GPU, and on the CPU they must
//    stop with the one-line "--device cuda" error;
//  - the "auto" seeds resolve field by field as HF's HfTrainerDeepSpeedConfig would
//    (trainer_config_process / trainer_config_finalize), including the hidden-size buckets;
//  - the 2021 post's ds_config.json field by field (and its cpu_offload NOTICE), its copy
//    without offload, its one-GPU t5-3b config, the --sharded_ddp stand-in, and the post's
//    own flags contradicting ds_config.json (refused, as HF refuses them today);
//  - DeepSpeed's batch rule (any two of train_batch_size, micro, accumulation give the third);
//  - a list of bad configs, each run in a forked child: exit 1 and one "error:" line naming
//    the key (tests/test_fork.h).
#include <cjson/cJSON.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/check.h"
#include "../zero/ds_config.h"
#include "../zero/zero.h"
#include "test.h"
#include "test_fork.h"

static char g_tmp[64];
static char *g_files[128];
static int g_nfiles;

// Write `text` to <tmp>/<name>; returns the path (kept for cleanup).
static const char *write_tmp(const char *name, const char *text) {
    char *path = path_join(g_tmp, name);
    FILE *f = fopenCheck(path, "w");
    fwriteCheck(text, 1, strlen(text), f, path);
    fcloseCheck(f, path);
    if (g_nfiles < 128) g_files[g_nfiles++] = path;
    return path;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

// check helpers printing what they compared
static void check_ll(const char *what, long long got, long long want) {
    char buf[256];
    snprintf(buf, sizeof buf, "%-60s %lld (want %lld)", what, got, want);
    test_check(got == want, buf);
}
static void check_num(const char *what, double got, double want) {
    char buf[256];
    snprintf(buf, sizeof buf, "%-60s %.10g (want %.10g)", what, got, want);
    test_check(near(got, want), buf);
}

// ---- children --------------------------------------------------------------------------
typedef struct {
    const char *path;
    DsResolveArgs a;
    int resolve;
    const char *shown;  // the name ds_config_resolve gives in messages (NULL: the path)
} Job;

static void job_fn(const void *arg) {
    const Job *j = arg;
    DsConfig c;
    ds_config_load(&c, j->path);
    if (j->resolve) {
        ds_config_resolve(&c, &j->a, j->shown);
        (void)zero_options_from_config(&c, j->shown ? j->shown : j->path);
    }
}

// Run fn in a child; returns its exit status (128+signal if killed), its stderr in buf.
static int run_child(FailFn fn, const void *arg, char *buf, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) exit(2);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        if (!freopen("/dev/null", "w", stdout)) _exit(3);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], buf + n, cap - 1 - n)) > 0) n += (size_t)r;
    buf[n] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// t5-large-like flags with every flag explicit (HF's own strictness)
static DsResolveArgs args_explicit(void) {
    DsResolveArgs a = ds_resolve_args_default();
    a.world_size = 2;
    a.per_device_train_batch_size = 4;
    a.gradient_accumulation_steps = 3;
    a.learning_rate = 1e-4;
    a.adam_beta1 = 0.85;
    a.adam_beta2 = 0.995;
    a.adam_epsilon = 1e-7;
    a.weight_decay = 0.01;
    a.max_grad_norm = 0.5;
    a.warmup_steps = 10;
    a.total_steps = 200;
    a.bf16 = 1;
    a.d_model = 1024;
    a.flag_set_mask = DS_FLAGS_ALL;
    return a;
}

// ---- 1. every file in configs/ loads and resolves unchanged ------------------------------
static void test_configs_dir(void) {
    DIR *d = opendir("configs");
    test_check(d != NULL, "configs/ exists");
    if (!d) return;
    static const char *const want[] = {"ds_config.json",       "ds_config_no_offload.json",
                                       "ds_config_1gpu.json",  "ds_config_sharded_ddp.json",
                                       "ds_config_zero1.json", "ds_config_zero2.json",
                                       "ds_config_zero2_offload.json", "ds_config_zero3.json",
                                       "ds_config_zero3_offload_optimizer.json"};
    enum { NWANT = sizeof want / sizeof want[0] };
    int found[NWANT] = {0}, n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        for (int i = 0; i < NWANT; i++) found[i] |= !strcmp(e->d_name, want[i]);
        char *path = path_join("configs", e->d_name);
        char err[4096], what[512];
        // load only, then load + resolve with HF-default flags (nothing explicit)
        Job j = {.path = path, .a = ds_resolve_args_default(), .resolve = 0};
        int rc = run_child(job_fn, &j, err, sizeof err);
        snprintf(what, sizeof what, "%-44s loads (exit %d) %.200s", path, rc, strstr(err, "error:") ? err : "");
        test_check(rc == 0 && !strstr(err, "error:"), what);
        j.resolve = 1;
        j.a.world_size = 2;
        j.a.total_steps = 1000;
        j.a.d_model = 1024;
        rc = run_child(job_fn, &j, err, sizeof err);
        snprintf(what, sizeof what, "%-44s resolves with HF's default flags, ZeRO accepts it (exit %d) %.200s", path, rc,
                 strstr(err, "error:") ? err : "");
        test_check(rc == 0 && !strstr(err, "error:"), what);
        free(path);
        n++;
    }
    closedir(d);
    for (int i = 0; i < NWANT; i++) {
        char what[128];
        snprintf(what, sizeof what, "configs/%s is there", want[i]);
        test_check(found[i], what);
    }
    check_ll("JSON files in configs/", n, NWANT);
}

// ---- 1b. every file in configs/ runs: 3 steps of a tiny T5 on the CPU ----------------------
static void test_configs_run(void) {
    if (access("./train_t5", X_OK) != 0) {
        test_check(0, "./train_t5 is built (run make first): the configs cannot be run");
        return;
    }
    struct dirent **names;
    int nn = scandir("configs", &names, NULL, alphasort);
    for (int k = 0; k < nn; k++) {
        const struct dirent *e = names[k];
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[300], out[400], cmd[2048], what[600];
        snprintf(path, sizeof path, "configs/%s", e->d_name);
        snprintf(out, sizeof out, "%s/run_%.*s", g_tmp, (int)(len - 5), e->d_name);
        DsConfig c;
        ds_config_load(&c, path);
        int half = (c.fp16.enabled.v && !c.fp16.enabled.is_auto) || (c.bf16.enabled.v && !c.bf16.enabled.is_auto);
        snprintf(cmd, sizeof cmd,
                 "./train_t5 --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
                 "--data_dir tests/fixtures/trainer_data --max_steps 3 --per_device_train_batch_size 4 "
                 "--logging_steps 1 --do_train --deepspeed %s --output_dir '%s' "
                 "--cache_dir '%s/cache' > '%s.log' 2> '%s.err'",
                 path, out, g_tmp, out, out);
        int rc = system(cmd);
        rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
        char file[420];
        snprintf(file, sizeof file, "%s.err", out);
        char *err = access(file, R_OK) == 0 ? read_text_file(file, NULL) : NULL;
        const char *eline = err ? strstr(err, "error:") : NULL;
        if (half) {
            // fp16/bf16 switched on by the file itself: GPU only; the CPU run must say so
            snprintf(what, sizeof what, "%-44s %s in the file: GPU only; on the CPU: exit %d, \"%.*s\"", path,
                     c.fp16.enabled.v ? "fp16" : "bf16", rc, eline ? (int)strcspn(eline, "\n") : 15,
                     eline ? eline : "(no error line)");
            test_check(rc == 1 && eline && strstr(eline, "--device cuda"), what);
        } else {
            int steps = 0;
            double last = 0;
            snprintf(file, sizeof file, "%s/trainer_state.json", out);
            if (rc == 0 && access(file, R_OK) == 0) {
                char *text = read_text_file(file, NULL);
                cJSON *st = cJSON_Parse(text);
                const cJSON *it;
                cJSON_ArrayForEach(it, cJSON_GetObjectItem(st, "log_history")) {
                    const cJSON *l = cJSON_GetObjectItem(it, "loss");
                    if (cJSON_IsNumber(l) && isfinite(l->valuedouble)) steps++, last = l->valuedouble;
                }
                cJSON_Delete(st);
                free(text);
            }
            snprintf(what, sizeof what, "%-44s trains on the CPU: exit %d, %d finite losses logged (want 3), last %.6f %.*s",
                     path, rc, steps, last, eline ? (int)strcspn(eline, "\n") : 0, eline ? eline : "");
            test_check(rc == 0 && steps == 3, what);
        }
        free(err);
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.log' '%s.err'", out, out, out);
        if (system(cmd) != 0) printf("could not remove %s\n", out);
    }
    for (int k = 0; k < nn; k++) free(names[k]);
    if (nn >= 0) free(names);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/cache'", g_tmp);
    if (system(cmd) != 0) printf("could not remove %s/cache\n", g_tmp);
}

// ---- 2. the "auto" seeds resolve as HF would ---------------------------------------------
static void test_seed(const char *file, int stage, int offload_opt, int offload_param, int decay) {
    char path[256], what[256];
    snprintf(path, sizeof path, "configs/%s", file);
    DsConfig c;
    ds_config_load(&c, path);
#define W(s) (snprintf(what, sizeof what, "%s: %s", file, s), what)
    test_check(c.train_batch_size.is_auto && c.train_micro_batch_size_per_gpu.is_auto &&
                   c.gradient_accumulation_steps.is_auto && c.gradient_clipping.is_auto && c.optimizer.lr.is_auto &&
                   c.optimizer.betas[0].is_auto && c.optimizer.betas[1].is_auto && c.optimizer.eps.is_auto &&
                   c.optimizer.weight_decay.is_auto && c.fp16.enabled.is_auto && c.bf16.enabled.is_auto &&
                   c.scheduler.warmup_min_lr.is_auto && c.scheduler.warmup_max_lr.is_auto &&
                   c.scheduler.warmup_num_steps.is_auto && c.zero.reduce_bucket_size.is_auto && !c.resolved,
               W("after load every \"auto\" key is still marked auto"));
    DsResolveArgs a = args_explicit();
    ds_config_resolve(&c, &a, NULL);
    test_check(c.resolved, W("resolved"));
    // trainer_config_process
    check_ll(W("train_micro_batch_size_per_gpu = --per_device_train_batch_size"), c.train_micro_batch_size_per_gpu.v, 4);
    check_ll(W("gradient_accumulation_steps = --gradient_accumulation_steps"), c.gradient_accumulation_steps.v, 3);
    check_ll(W("train_batch_size = world x micro x accumulation"), c.train_batch_size.v, 2 * 4 * 3);
    check_num(W("gradient_clipping = --max_grad_norm"), c.gradient_clipping.v, 0.5);
    check_ll(W("optimizer.type AdamW"), c.optimizer.type, DS_OPTIMIZER_ADAMW);
    check_num(W("optimizer.params.lr = --learning_rate"), c.optimizer.lr.v, 1e-4);
    check_num(W("optimizer.params.betas[0] = --adam_beta1"), c.optimizer.betas[0].v, 0.85);
    check_num(W("optimizer.params.betas[1] = --adam_beta2"), c.optimizer.betas[1].v, 0.995);
    check_num(W("optimizer.params.eps = --adam_epsilon"), c.optimizer.eps.v, 1e-7);
    check_num(W("optimizer.params.weight_decay = --weight_decay"), c.optimizer.weight_decay.v, 0.01);
    check_ll(W("scheduler.type"), c.scheduler.type, decay ? DS_SCHEDULER_WARMUP_DECAY_LR : DS_SCHEDULER_WARMUP_LR);
    check_num(W("scheduler.params.warmup_min_lr = 0 (HF fill_only)"), c.scheduler.warmup_min_lr.v, 0);
    check_num(W("scheduler.params.warmup_max_lr = --learning_rate"), c.scheduler.warmup_max_lr.v, 1e-4);
    check_ll(W("scheduler.params.warmup_type log (DeepSpeed default)"), c.scheduler.warmup_type, DS_WARMUP_LOG);
    // trainer_config_finalize
    check_ll(W("scheduler.params.warmup_num_steps = warmup steps"), c.scheduler.warmup_num_steps.v, 10);
    if (decay) check_ll(W("scheduler.params.total_num_steps = run's steps"), c.scheduler.total_num_steps.v, 200);
    check_ll(W("fp16.enabled = --fp16 (false)"), c.fp16.enabled.v, 0);
    check_ll(W("bf16.enabled = --bf16 (true)"), c.bf16.enabled.v, 1);
    check_ll(W("fp16.initial_scale_power 16"), c.fp16.initial_scale_power.v, 16);
    check_ll(W("fp16.loss_scale_window 1000"), c.fp16.loss_scale_window.v, 1000);
    check_ll(W("fp16.hysteresis 2"), c.fp16.hysteresis.v, 2);
    check_num(W("fp16.min_loss_scale 1"), c.fp16.min_loss_scale.v, 1);
    check_num(W("fp16.loss_scale 0 (dynamic)"), c.fp16.loss_scale.v, 0);
    check_ll(W("zero_optimization.stage"), c.zero.stage, stage);
    check_ll(W("zero_optimization.reduce_bucket_size = d_model^2"), c.zero.reduce_bucket_size.v, 1024LL * 1024);
    if (stage == 3) {
        check_ll(W("stage3_prefetch_bucket_size = int(0.9 d_model^2)"), c.zero.stage3_prefetch_bucket_size.v, 943718);
        check_ll(W("stage3_param_persistence_threshold = 10 d_model"), c.zero.stage3_param_persistence_threshold.v,
                 10240);
        check_ll(W("stage3_max_live_parameters 1e9"), c.zero.stage3_max_live_parameters.v, 1000000000LL);
        check_ll(W("stage3_max_reuse_distance 1e9"), c.zero.stage3_max_reuse_distance.v, 1000000000LL);
        check_ll(W("sub_group_size 1e9"), c.zero.sub_group_size.v, 1000000000LL);
        check_ll(W("stage3_gather_16bit_weights_on_model_save"), c.zero.stage3_gather_16bit_weights_on_model_save.v, 1);
    } else {
        check_ll(W("allgather_bucket_size"), c.zero.allgather_bucket_size.v, stage == 1 ? 500000000LL : 200000000LL);
        check_ll(W("allgather_partitions"), c.zero.allgather_partitions.v, 1);
        check_ll(W("reduce_scatter"), c.zero.reduce_scatter.v, 1);
    }
    check_ll(W("overlap_comm"), c.zero.overlap_comm.v, 1);
    check_ll(W("contiguous_gradients"), c.zero.contiguous_gradients.v, 1);
    check_ll(W("offload_optimizer.device"), c.zero.offload_optimizer.device, offload_opt ? OFFLOAD_CPU : OFFLOAD_NONE);
    check_ll(W("offload_optimizer.pin_memory"), c.zero.offload_optimizer.pin_memory.v, offload_opt);
    check_ll(W("offload_param.device"), c.zero.offload_param.device, offload_param ? OFFLOAD_CPU : OFFLOAD_NONE);
    check_ll(W("steps_per_print 2000 (no-op)"), c.steps_per_print.v, 2000);

    // the same file with HF's defaults and --fp16 only: fp16 on, bf16 off, lr 5e-5 ...
    ds_config_load(&c, path);
    a = ds_resolve_args_default();
    a.fp16 = 1;
    a.total_steps = 50;
    a.d_model = 512;
    a.flag_set_mask = DS_FLAG_FP16;
    ds_config_resolve(&c, &a, NULL);
    test_check(c.fp16.enabled.v == 1 && c.bf16.enabled.v == 0, W("--fp16: fp16.enabled true, bf16.enabled false"));
    check_num(W("HF default lr 5e-5 fills \"auto\""), c.optimizer.lr.v, 5e-5);
    check_num(W("HF default max_grad_norm 1.0 fills \"auto\""), c.gradient_clipping.v, 1.0);
    check_ll(W("HF default batch 8 x 1 x world 1"), c.train_batch_size.v, 8);
    check_ll(W("reduce_bucket_size = 512^2"), c.zero.reduce_bucket_size.v, 512LL * 512);
#undef W
}

// ---- 3. the 2021 post's ds_config.json ---------------------------------------------------
static void test_2021(void) {
    const char *path = "configs/ds_config.json";
    char err[4096];
    Job j = {.path = path, .resolve = 0};
    int rc = run_child(job_fn, &j, err, sizeof err);
    test_check(rc == 0 && strstr(err, "NOTICE:") && strstr(err, "zero_optimization.cpu_offload") &&
                   strstr(err, "offload_optimizer") && !strstr(err, "error:"),
               "2021 ds_config.json: cpu_offload is accepted with one NOTICE line on stderr");

    DsConfig c;
    ds_config_load(&c, path);
    test_check(c.fp16.enabled.v == 1 && c.fp16.enabled.is_set && !c.fp16.enabled.is_auto, "2021: fp16.enabled true");
    check_num("2021: fp16.loss_scale 0 (dynamic)", c.fp16.loss_scale.v, 0);
    check_ll("2021: fp16.loss_scale_window", c.fp16.loss_scale_window.v, 1000);
    check_ll("2021: fp16.hysteresis", c.fp16.hysteresis.v, 2);
    check_num("2021: fp16.min_loss_scale", c.fp16.min_loss_scale.v, 1);
    check_ll("2021: fp16.initial_scale_power (absent: DeepSpeed's 16)", c.fp16.initial_scale_power.v, 16);
    check_ll("2021: bf16.enabled (absent: false)", c.bf16.enabled.v, 0);
    check_ll("2021: zero_optimization.stage 2", c.zero.stage, ZERO_STAGE_GRADIENTS);
    check_ll("2021: allgather_partitions", c.zero.allgather_partitions.v, 1);
    check_ll("2021: allgather_bucket_size 2e8", c.zero.allgather_bucket_size.v, 200000000LL);
    check_ll("2021: reduce_bucket_size 2e8", c.zero.reduce_bucket_size.v, 200000000LL);
    check_ll("2021: overlap_comm", c.zero.overlap_comm.v, 1);
    check_ll("2021: reduce_scatter", c.zero.reduce_scatter.v, 1);
    check_ll("2021: contiguous_gradients", c.zero.contiguous_gradients.v, 1);
    check_ll("2021: cpu_offload true", c.zero.cpu_offload.v, 1);
    check_ll("2021: -> offload_optimizer.device cpu", c.zero.offload_optimizer.device, OFFLOAD_CPU);
    check_ll("2021: offload_optimizer.pin_memory (DeepSpeed default false)", c.zero.offload_optimizer.pin_memory.v, 0);
    check_num("2021: offload_optimizer.ratio 1", c.zero.offload_optimizer.ratio.v, 1);
    check_ll("2021: offload_param.device none", c.zero.offload_param.device, OFFLOAD_NONE);
    check_ll("2021: optimizer.type Adam", c.optimizer.type, DS_OPTIMIZER_ADAM);
    check_ll("2021: adam_w_mode (DeepSpeed default true: decoupled decay)", c.optimizer.adam_w_mode.v, 1);
    check_num("2021: optimizer.params.lr", c.optimizer.lr.v, 3e-5);
    check_num("2021: optimizer.params.betas[0]", c.optimizer.betas[0].v, 0.8);
    check_num("2021: optimizer.params.betas[1]", c.optimizer.betas[1].v, 0.999);
    check_num("2021: optimizer.params.eps", c.optimizer.eps.v, 1e-8);
    check_num("2021: optimizer.params.weight_decay", c.optimizer.weight_decay.v, 3e-7);
    check_ll("2021: scheduler.type WarmupLR", c.scheduler.type, DS_SCHEDULER_WARMUP_LR);
    check_num("2021: scheduler.params.warmup_min_lr", c.scheduler.warmup_min_lr.v, 0);
    check_num("2021: scheduler.params.warmup_max_lr", c.scheduler.warmup_max_lr.v, 3e-5);
    check_ll("2021: scheduler.params.warmup_num_steps", c.scheduler.warmup_num_steps.v, 500);
    check_ll("2021: scheduler.params.warmup_type (DeepSpeed default log)", c.scheduler.warmup_type, DS_WARMUP_LOG);
    check_ll("2021: steps_per_print", c.steps_per_print.v, 2000);
    check_ll("2021: wall_clock_breakdown", c.wall_clock_breakdown.v, 0);
    test_check(!c.train_batch_size.is_set && !c.train_micro_batch_size_per_gpu.is_set &&
                   !c.gradient_accumulation_steps.is_set && !c.gradient_clipping.is_set,
               "2021: no batch keys and no gradient_clipping in the file");

    // the post's DeepSpeed run: 2 GPUs, BS 40 per device, --learning_rate 3e-5 (agrees)
    DsResolveArgs a = ds_resolve_args_default();
    a.world_size = 2;
    a.per_device_train_batch_size = 40;
    a.learning_rate = 3e-5;
    a.fp16 = 1;
    a.flag_set_mask = DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE | DS_FLAG_LEARNING_RATE | DS_FLAG_FP16;
    ds_config_resolve(&c, &a, NULL);
    check_ll("2021 resolved: micro from --per_device_train_batch_size", c.train_micro_batch_size_per_gpu.v, 40);
    check_ll("2021 resolved: accumulation from the flags", c.gradient_accumulation_steps.v, 1);
    check_ll("2021 resolved: train_batch_size 2 x 40 x 1", c.train_batch_size.v, 80);
    check_num("2021 resolved: gradient_clipping absent = DeepSpeed's 0 (off)", c.gradient_clipping.v, 0);
    check_num("2021 resolved: lr kept", c.optimizer.lr.v, 3e-5);
    check_num("2021 resolved: weight_decay kept (flag not explicit)", c.optimizer.weight_decay.v, 3e-7);
    check_ll("2021 resolved: warmup_num_steps kept (flag not explicit)", c.scheduler.warmup_num_steps.v, 500);

    char *out = NULL;
    size_t outlen = 0;
    FILE *m = open_memstream(&out, &outlen);
    ds_config_print(&c, m);
    fclose(m);
    test_check(strstr(out, "train_batch_size 80 = micro 40 x accumulation 1") &&
                   strstr(out, "fp16, dynamic loss scale 2^16 (window 1000, hysteresis 2, min 1)") &&
                   strstr(out, "Adam lr 3e-05 betas (0.8, 0.999) eps 1e-08 weight_decay 3e-07") &&
                   strstr(out, "WarmupLR (log warmup) 0 -> 3e-05 over 500 steps") &&
                   strstr(out, "stage 2 (gradients)") && strstr(out, "optimizer cpu") && strstr(out, "clipping   off"),
               "2021: ds_config_print summary");
    printf("%s", out);
    free(out);
}

// ---- 3b. the rest of the post's configs, and its flags against its ds_config.json ---------
static void test_2021_family(void) {
    DsConfig a, b;
    ds_config_load(&a, "configs/ds_config.json");
    ds_config_load(&b, "configs/ds_config_no_offload.json");
    check_ll("no_offload: cpu_offload false -> offload_optimizer none", b.zero.offload_optimizer.device, OFFLOAD_NONE);
    b.zero.cpu_offload = a.zero.cpu_offload;
    b.zero.offload_optimizer = a.zero.offload_optimizer;
    test_check(b.fp16.enabled.v == a.fp16.enabled.v && b.zero.stage == a.zero.stage &&
                   b.zero.reduce_bucket_size.v == a.zero.reduce_bucket_size.v &&
                   b.zero.allgather_bucket_size.v == a.zero.allgather_bucket_size.v &&
                   b.optimizer.type == a.optimizer.type && near(b.optimizer.lr.v, a.optimizer.lr.v) &&
                   near(b.optimizer.betas[0].v, a.optimizer.betas[0].v) && near(b.optimizer.eps.v, a.optimizer.eps.v) &&
                   near(b.optimizer.weight_decay.v, a.optimizer.weight_decay.v) && b.scheduler.type == a.scheduler.type &&
                   b.scheduler.warmup_num_steps.v == a.scheduler.warmup_num_steps.v,
               "no_offload: otherwise the same as ds_config.json (fp16, stage 2, buckets, Adam, WarmupLR 500)");

    DsConfig c;
    ds_config_load(&c, "configs/ds_config_1gpu.json");
    test_check(c.fp16.enabled.v == 1 && !c.fp16.enabled.is_auto, "1gpu: fp16.enabled true");
    check_ll("1gpu: stage 2", c.zero.stage, ZERO_STAGE_GRADIENTS);
    check_ll("1gpu: cpu_offload -> offload_optimizer cpu", c.zero.offload_optimizer.device, OFFLOAD_CPU);
    check_ll("1gpu: reduce_bucket_size 2e8", c.zero.reduce_bucket_size.v, 200000000LL);
    check_ll("1gpu: allgather_bucket_size 2e8", c.zero.allgather_bucket_size.v, 200000000LL);
    check_ll("1gpu: optimizer Adam", c.optimizer.type, DS_OPTIMIZER_ADAM);
    test_check(c.optimizer.adam_w_mode.is_set && c.optimizer.adam_w_mode.v, "1gpu: adam_w_mode true, written out");
    check_num("1gpu: betas[0] 0.9", c.optimizer.betas[0].v, 0.9);
    check_num("1gpu: betas[1] 0.999", c.optimizer.betas[1].v, 0.999);
    check_num("1gpu: eps 1e-8", c.optimizer.eps.v, 1e-8);
    check_num("1gpu: weight_decay 3e-7", c.optimizer.weight_decay.v, 3e-7);
    check_ll("1gpu: WarmupLR", c.scheduler.type, DS_SCHEDULER_WARMUP_LR);
    check_ll("1gpu: warmup_num_steps 500", c.scheduler.warmup_num_steps.v, 500);

    // --sharded_ddp stand-in: ZeRO-2, the Trainer's own AdamW and schedule from the post's flags
    ds_config_load(&c, "configs/ds_config_sharded_ddp.json");
    DsResolveArgs ra = ds_resolve_args_default();
    ra.world_size = 2;
    ra.per_device_train_batch_size = 30;
    ra.learning_rate = 3e-5;
    ra.adam_epsilon = 1e-6;
    ra.warmup_steps = 5;
    ra.total_steps = 34;
    ra.fp16 = 1;
    ra.d_model = 1024;
    ra.flag_set_mask = DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE | DS_FLAG_LEARNING_RATE | DS_FLAG_ADAM_EPSILON |
                       DS_FLAG_WARMUP_STEPS | DS_FLAG_TOTAL_STEPS | DS_FLAG_FP16;
    ds_config_resolve(&c, &ra, NULL);
    test_check(!c.optimizer.present && !c.scheduler.present,
               "sharded_ddp: no optimizer / scheduler sections (the Trainer's AdamW and --lr_scheduler_type)");
    check_ll("sharded_ddp: stage 2 (FairScale's sharded optimizer + gradients)", c.zero.stage, ZERO_STAGE_GRADIENTS);
    check_num("sharded_ddp: AdamW eps = --adam_eps 1e-06", c.optimizer.eps.v, 1e-6);
    check_num("sharded_ddp: clipping = --max_grad_norm 1.0 (as the Trainer clips)", c.gradient_clipping.v, 1.0);
    check_ll("sharded_ddp: fp16 = --fp16", c.fp16.enabled.v, 1);
    check_ll("sharded_ddp: train_batch_size 2 x 30", c.train_batch_size.v, 60);

    // the post's flags against its ds_config.json: HF 4.2 let the file win silently; HF today
    // and train_t5 refuse the contradiction; without --adam_eps / --warmup_steps it resolves
    Job j = {.path = "configs/ds_config.json", .a = ds_resolve_args_default(), .resolve = 1};
    j.a.world_size = 2;
    j.a.per_device_train_batch_size = 50;
    j.a.learning_rate = 3e-5;
    j.a.adam_epsilon = 1e-6;
    j.a.warmup_steps = 5;
    j.a.flag_set_mask = DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE | DS_FLAG_LEARNING_RATE | DS_FLAG_ADAM_EPSILON;
    // (--adam_eps against the file's eps: "2021 post's flags + ds_config.json" below)
    char err[4096], what[700];
    j.a.adam_epsilon = 1e-8;
    j.a.flag_set_mask = DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE | DS_FLAG_LEARNING_RATE | DS_FLAG_WARMUP_STEPS;
    int rc = run_child(job_fn, &j, err, sizeof err);
    const char *e = strstr(err, "error: ");
    snprintf(what, sizeof what, "post's --warmup_steps 5 vs ds_config.json's 500 steps: refused (exit %d) %.*s", rc,
             e ? (int)strcspn(e, "\n") : 0, e ? e : "");
    test_check(rc == 1 && e && strstr(e, "\"scheduler.params.warmup_num_steps\" is 500") && strstr(e, "--warmup_steps"),
               what);
    j.a.flag_set_mask = DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE | DS_FLAG_LEARNING_RATE;
    rc = run_child(job_fn, &j, err, sizeof err);
    test_check(rc == 0 && !strstr(err, "error:"),
               "post's flags without --adam_eps / --warmup_steps: ds_config.json resolves (the file's eps and warmup, "
               "as in 2021)");
}

// ---- 4. DeepSpeed's batch rule ------------------------------------------------------------
static void check_batch(const char *name, const char *json, int world, int P, int G, long long t, long long mi,
                        long long g) {
    const char *path = write_tmp(name, json);
    DsConfig c;
    ds_config_load(&c, path);
    DsResolveArgs a = ds_resolve_args_default();
    a.world_size = world;
    a.per_device_train_batch_size = P;
    a.gradient_accumulation_steps = G;
    ds_config_resolve(&c, &a, NULL);
    char what[256];
    snprintf(what, sizeof what, "batch %-28s world %d: %lld = %lld x %lld x %d (want %lld = %lld x %lld)", name, world,
             c.train_batch_size.v, c.train_micro_batch_size_per_gpu.v, c.gradient_accumulation_steps.v, world, t, mi, g);
    test_check(c.train_batch_size.v == t && c.train_micro_batch_size_per_gpu.v == mi &&
                   c.gradient_accumulation_steps.v == g,
               what);
}

static void test_batch_rule(void) {
    check_batch("train+micro.json", "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", 2, 8, 1, 32, 4, 4);
    check_batch("train+accum.json", "{\"train_batch_size\": 32, \"gradient_accumulation_steps\": 2}", 2, 8, 1, 32, 8, 2);
    check_batch("micro+accum.json", "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2}", 4, 8,
                1, 32, 4, 2);
    check_batch("train_only.json", "{\"train_batch_size\": 16}", 2, 8, 1, 16, 8, 1);
    check_batch("micro_only.json", "{\"train_micro_batch_size_per_gpu\": 6}", 3, 8, 2, 36, 6, 2);
    check_batch("none.json", "{}", 2, 8, 2, 32, 8, 2);
    check_batch("all_three.json",
                "{\"train_batch_size\": 48, \"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 3}",
                2, 1, 1, 48, 8, 3);
    check_batch("auto_with_train.json",
                "{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": \"auto\", "
                "\"gradient_accumulation_steps\": \"auto\"}",
                2, 8, 1, 16, 8, 1);
}

// ---- 5. bad configs: one error line naming the key ----------------------------------------
typedef struct {
    const char *name;  // file name in the temp dir
    const char *json;  // NULL: the file does not exist
    const char *needle1, *needle2;
} BadLoad;

static const BadLoad k_bad_loads[] = {
    {"type_batch_string.json", "{\"train_batch_size\": \"16\"}", "key \"train_batch_size\"", "found \"16\""},
    {"type_bool_string.json", "{\"zero_optimization\": {\"overlap_comm\": \"yes\"}}",
     "key \"zero_optimization.overlap_comm\"", "expected true or false"},
    {"type_section_bool.json", "{\"fp16\": true}", "key \"fp16\"", "expected an object"},
    {"type_legacy_zero_bool.json", "{\"zero_optimization\": true}", "key \"zero_optimization\"", "found true"},
    {"type_fractional_accum.json", "{\"gradient_accumulation_steps\": 2.5}", "key \"gradient_accumulation_steps\"",
     "found 2.5"},
    {"neg_reduce_bucket.json", "{\"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": -5}}",
     "key \"zero_optimization.reduce_bucket_size\"", "found -5"},
    {"neg_allgather_bucket.json", "{\"zero_optimization\": {\"stage\": 2, \"allgather_bucket_size\": -1}}",
     "key \"zero_optimization.allgather_bucket_size\"", "non-negative integer"},
    {"neg_loss_scale.json", "{\"fp16\": {\"enabled\": true, \"loss_scale\": -1}}", "key \"fp16.loss_scale\"",
     "found -1"},
    {"zero_min_loss_scale.json", "{\"fp16\": {\"enabled\": true, \"min_loss_scale\": 0}}", "key \"fp16.min_loss_scale\"",
     "a number > 0"},
    {"big_scale_power.json", "{\"fp16\": {\"initial_scale_power\": 65}}", "key \"fp16.initial_scale_power\"",
     "[0, 64]"},
    {"stage4.json", "{\"zero_optimization\": {\"stage\": 4}}", "key \"zero_optimization.stage\"", "found 4"},
    {"offload_param_stage2.json",
     "{\"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": \"cpu\"}}}",
     "key \"zero_optimization.offload_param\"", "needs ZeRO stage 3"},
    {"cpu_offload_param_stage2.json", "{\"zero_optimization\": {\"stage\": 2, \"cpu_offload_param\": true}}",
     "key \"zero_optimization.cpu_offload_param\"", "needs ZeRO stage 3"},
    {"offload_stage0.json", "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}}}",
     "key \"zero_optimization.offload_optimizer\"", "stage 1, 2 or 3"},
    {"ratio_stage2.json", "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", "
                          "\"ratio\": 0.5}}}",
     "key \"zero_optimization.offload_optimizer.ratio\"", "stage 3"},
    {"nvme_no_path.json", "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\"}}}",
     "key \"zero_optimization.offload_param.nvme_path\"", "missing"},
    {"nvme_path_cpu.json", "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", "
                           "\"nvme_path\": \"/nvme\"}}}",
     "key \"zero_optimization.offload_optimizer.nvme_path\"", "\"cpu\""},
    {"device_hpu.json", "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"hpu\"}}}",
     "key \"zero_optimization.offload_optimizer.device\"", "\"hpu\""},
    {"cpu_offload_and_new.json", "{\"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true, \"offload_optimizer\": "
                                 "{\"device\": \"cpu\"}}}",
     "\"zero_optimization.cpu_offload\"", "\"zero_optimization.offload_optimizer\""},
    {"unknown_top.json", "{\"zero_optimisation\": {\"stage\": 2}}", "unknown key \"zero_optimisation\"",
     "did you mean \"zero_optimization\""},
    {"unknown_nested.json", "{\"zero_optimization\": {\"stage\": 2, \"reduce_bucket_sise\": 5e8}}",
     "unknown key \"zero_optimization.reduce_bucket_sise\"", "did you mean \"zero_optimization.reduce_bucket_size\""},
    {"unknown_nothing_close.json", "{\"my_custom_setting\": 1}", "unknown key \"my_custom_setting\"", "remove it"},
    {"unknown_sched_param.json", "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_l\": 1e-4}}}",
     "unknown key \"scheduler.params.warmup_max_l\"", "did you mean \"scheduler.params.warmup_max_lr\""},
    {"unsupported_flops.json", "{\"flops_profiler\": {\"enabled\": true}}", "key \"flops_profiler\"",
     "does not support"},
    {"unsupported_act_ckpt.json", "{\"activation_checkpointing\": {\"partition_activations\": true}}",
     "key \"activation_checkpointing\"", "--gradient_checkpointing"},
    {"unsupported_tensorboard.json", "{\"tensorboard\": {\"enabled\": true}}", "key \"tensorboard\"",
     "does not support"},
    {"unsupported_amp.json", "{\"amp\": {\"enabled\": true}}", "key \"amp\"", "does not support"},
    {"only_default_prescale.json", "{\"prescale_gradients\": true}", "key \"prescale_gradients\"",
     "set it to false"},
    {"only_default_quantized.json", "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_weights\": true}}",
     "key \"zero_optimization.zero_quantized_weights\"", "does not support"},
    {"fp16_and_bf16.json", "{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}", "\"fp16.enabled\"",
     "\"bf16.enabled\""},
    {"bf16_and_bfloat16.json", "{\"bf16\": {\"enabled\": true}, \"bfloat16\": {\"enabled\": true}}", "\"bfloat16\"",
     "\"bf16\""},
    {"missing_file.json", NULL, "missing_file.json", "cannot open"},
    {"invalid_trailing_comma.json", "{\n  \"fp16\": {\"enabled\": true},\n}\n", "invalid JSON at line 3",
     "true}, }\")"},
    {"invalid_truncated.json", "{\"zero_optimization\": {\"stage\": 2", "invalid JSON at line 1", "'stage': 2\")"},
    {"invalid_bare_word.json", "{\"fp16\": {\"enabled\": tru}}", "invalid JSON at line 1", "'enabled': tru}}\")"},
    {"invalid_empty.json", "", "invalid JSON", "line 1"},
    {"top_level_array.json", "[1, 2]", "top level", "object"},
    {"duplicate_key.json", "{\"fp16\": {\"enabled\": true, \"enabled\": false}}", "key \"fp16.enabled\"",
     "appears twice"},
    {"auto_stage.json", "{\"zero_optimization\": {\"stage\": \"auto\"}}", "key \"zero_optimization.stage\"",
     "\"auto\" is only"},
    {"auto_window.json", "{\"fp16\": {\"loss_scale_window\": \"auto\"}}", "key \"fp16.loss_scale_window\"",
     "\"auto\" is only"},
    {"auto_allgather.json", "{\"zero_optimization\": {\"allgather_bucket_size\": \"auto\"}}",
     "key \"zero_optimization.allgather_bucket_size\"", "\"auto\" is only"},
    {"betas_length.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9]}}}",
     "key \"optimizer.params.betas\"", "[beta1, beta2]"},
    {"betas_range.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, 1.5]}}}",
     "key \"optimizer.params.betas\"", "found [0.9,1.5]"},
    {"betas_auto_element.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [\"auto\", 0.999]}}}",
     "key \"optimizer.params.betas\"", "found [\"auto\",0.999]"},
    {"eps_zero.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"eps\": 0}}}", "key \"optimizer.params.eps\"",
     "a number > 0"},
    {"optimizer_lamb.json", "{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"lr\": 1e-3}}}",
     "key \"optimizer.type\"", "\"Lamb\" is a DeepSpeed choice train_t5 does not support"},
    {"optimizer_unknown.json", "{\"optimizer\": {\"type\": \"Adamm\"}}", "key \"optimizer.type\"",
     "expected \"Adam\" or \"AdamW\""},
    {"optimizer_no_type.json", "{\"optimizer\": {\"params\": {\"lr\": 1e-4}}}", "key \"optimizer.type\"", "missing"},
    {"adam_w_mode_false.json", "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false}}}",
     "key \"optimizer.params.adam_w_mode\"", "does not support"},
    {"scheduler_onecycle.json", "{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {}}}", "key \"scheduler.type\"",
     "\"OneCycle\" is a DeepSpeed choice train_t5 does not support"},
    {"scheduler_case.json", "{\"scheduler\": {\"type\": \"warmuplr\"}}", "key \"scheduler.type\"", "found \"warmuplr\""},
    {"scheduler_decay_no_total.json", "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": "
                                      "10}}}",
     "key \"scheduler.params.total_num_steps\"", "missing"},
    {"scheduler_warmuplr_total.json", "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"total_num_steps\": 100}}}",
     "key \"scheduler.params.total_num_steps\"", "not a parameter of WarmupLR"},
    {"scheduler_cosine_max_lr.json", "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": "
                                     "100, \"warmup_max_lr\": 1e-4}}}",
     "key \"scheduler.params.warmup_max_lr\"", "not a parameter of WarmupCosineLR"},
    {"warmup_type_bad.json", "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"cosine\"}}}",
     "key \"scheduler.params.warmup_type\"", "\"log\" or \"linear\""},
};

typedef struct {
    const char *name, *json;
    DsResolveArgs a;
    const char *needle1, *needle2;
} BadResolve;

static void test_bad_configs(void) {
    int n = 0;
    for (size_t i = 0; i < sizeof k_bad_loads / sizeof k_bad_loads[0]; i++) {
        const BadLoad *b = &k_bad_loads[i];
        Job j = {.resolve = 0};
        char *missing = NULL;
        if (b->json) j.path = write_tmp(b->name, b->json);
        else j.path = missing = path_join(g_tmp, b->name);
        test_expect_error(b->name, job_fn, &j, b->needle1, b->needle2);
        free(missing);
        n++;
    }

    // errors found while resolving against the flags
    BadResolve r[16];
    int nr = 0;
    DsResolveArgs d = ds_resolve_args_default();
#define ADD(nm, js, needle1_, needle2_) \
    r[nr] = (BadResolve){.name = nm, .json = js, .a = d, .needle1 = needle1_, .needle2 = needle2_}; \
    nr++
    d = ds_resolve_args_default();
    ADD("batch_not_multiplying.json",
        "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 2}",
        "\"train_batch_size\" 64 != \"train_micro_batch_size_per_gpu\" 8 x \"gradient_accumulation_steps\" 2",
        "world size 1 (= 16)");
    d.world_size = 2;
    ADD("batch_not_divisible.json", "{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 4}",
        "do not multiply out", "world size 2");
    d = ds_resolve_args_default();
    d.per_device_train_batch_size = 4;
    ADD("batch_auto_vs_explicit_train.json",
        "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\"}",
        "\"train_batch_size\" 64", "\"train_micro_batch_size_per_gpu\" 4 (\"auto\": --per_device_train_batch_size)");
    d = ds_resolve_args_default();
    d.learning_rate = 1e-4;
    d.flag_set_mask = DS_FLAG_LEARNING_RATE;
    ADD("lr_vs_flag.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-5}}}",
        "\"optimizer.params.lr\" is 3e-05", "--learning_rate is 0.0001");
    ADD("warmup_max_lr_default_vs_flag.json",
        "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\"}}, \"scheduler\": {\"type\": "
        "\"WarmupDecayLR\", \"params\": {\"total_num_steps\": \"auto\"}}}",
        "\"scheduler.params.warmup_max_lr\" is 0.001 (DeepSpeed's default: the key is absent)",
        "--learning_rate is 0.0001");
    d = ds_resolve_args_default();
    d.per_device_train_batch_size = 16;
    d.flag_set_mask = DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE;
    ADD("micro_vs_flag.json", "{\"train_micro_batch_size_per_gpu\": 8}", "\"train_micro_batch_size_per_gpu\" is 8",
        "--per_device_train_batch_size is 16");
    d = ds_resolve_args_default();
    d.world_size = 2;
    d.flag_set_mask = DS_FLAG_GRADIENT_ACCUMULATION_STEPS;
    ADD("derived_accum_vs_flag.json", "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 8}",
        "\"gradient_accumulation_steps\" is 4 (derived)", "--gradient_accumulation_steps is 1");
    d = ds_resolve_args_default();
    d.warmup_steps = 5;
    d.flag_set_mask = DS_FLAG_WARMUP_STEPS;
    ADD("warmup_vs_flag.json",
        "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 500}}}",
        "\"scheduler.params.warmup_num_steps\" is 500", "--warmup_steps is 5");
    d = ds_resolve_args_default();
    d.flag_set_mask = DS_FLAG_MAX_GRAD_NORM;
    ADD("clipping_absent_vs_flag.json", "{}", "\"gradient_clipping\" is 0 (DeepSpeed's default: the key is absent)",
        "--max_grad_norm is 1");
    d = ds_resolve_args_default();
    d.adam_beta1 = 0.9;
    d.flag_set_mask = DS_FLAG_ADAM_BETA1;
    ADD("betas_vs_flag.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.8, 0.999]}}}",
        "\"optimizer.params.betas[0]\" is 0.8", "--adam_beta1 is 0.9");
    d = ds_resolve_args_default();
    d.bf16 = 1;
    d.flag_set_mask = DS_FLAG_BF16;
    ADD("fp16_file_bf16_flag.json", "{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": \"auto\"}}",
        "\"fp16.enabled\"", "\"bf16.enabled\"");
    d = ds_resolve_args_default();
    d.fp16 = 1;
    d.flag_set_mask = DS_FLAG_FP16;
    ADD("fp16_false_vs_flag.json", "{\"fp16\": {\"enabled\": false}}", "\"fp16.enabled\" is false",
        "--fp16 is true");
    d = ds_resolve_args_default();
    ADD("total_steps_unknown.json",
        "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": \"auto\"}}}",
        "key \"scheduler.params.total_num_steps\"", "not known");
    ADD("d_model_unknown.json", "{\"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": \"auto\"}}",
        "key \"zero_optimization.stage3_prefetch_bucket_size\"", "d_model");
    d.total_steps = 100;
    d.flag_set_mask = DS_FLAG_TOTAL_STEPS;
    ADD("total_vs_flag.json",
        "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 1000}}}",
        "\"scheduler.params.total_num_steps\" is 1000", "100 optimizer steps");
#undef ADD
    for (int i = 0; i < nr; i++) {
        Job j = {.path = write_tmp(r[i].name, r[i].json), .a = r[i].a, .resolve = 1};
        test_expect_error(r[i].name, job_fn, &j, r[i].needle1, r[i].needle2);
        n++;
    }

    // the 2021 post's command line with its ds_config.json: --adam_eps 1e-06 contradicts eps 1e-8
    // (transformers 4.2 silently kept the file's value; today's HF and train_t5 refuse)
    char *argv[] = {"train_t5",   "--model",      "t5-large",       "--adam_eps",   "1e-06",
                    "--learning_rate", "3e-5",     "--warmup_steps", "5",            "--fp16",
                    "--per_device_train_batch_size=40"};
    int argc = (int)(sizeof argv / sizeof argv[0]);
    Job j = {.path = "configs/ds_config.json", .a = ds_resolve_args_default(), .resolve = 1};
    j.a.world_size = 2;
    j.a.per_device_train_batch_size = 40;
    j.a.learning_rate = 3e-5;
    j.a.adam_epsilon = 1e-6;
    j.a.warmup_steps = 5;
    j.a.fp16 = 1;
    j.a.flag_set_mask = ds_flag_set_mask_from_argv(argc, argv, 1);
    // load prints its cpu_offload NOTICE first, so the shape is: the NOTICE, then one error line
    char err[4096], desc[1024];
    int rc = run_child(job_fn, &j, err, sizeof err);
    const char *e = strstr(err, "error: ");
    int lines = 0;
    for (const char *p = err; *p; p++) lines += *p == '\n';
    snprintf(desc, sizeof desc, "error: %-30s exit %d, %d line(s): %.600s", "2021 post's flags + ds_config.json", rc,
             lines, e ? e : err);
    test_check(rc == 1 && lines == 2 && !strncmp(err, "NOTICE: ", 8) && e &&
                   strstr(e, "\"optimizer.params.eps\" is 1e-08") && strstr(e, "--adam_epsilon is 1e-06"),
               desc);
    n++;
    char what[64];
    snprintf(what, sizeof what, "bad configs listed: %d (>= 14)", n);
    test_check(n >= 14, what);
}

// ---- 6. the other pieces ---------------------------------------------------------------
static void test_misc(void) {
    char *argv[] = {"train_t5", "--learning_rate", "3e-5", "--adam_eps=1e-6", "--fp16",  "--warmup_ratio", "0.1",
                    "--model",  "x",               "--num_train_epochs", "1", "--weight_decay", "0"};
    unsigned bits = ds_flag_set_mask_from_argv((int)(sizeof argv / sizeof argv[0]), argv, 1);
    unsigned want = DS_FLAG_LEARNING_RATE | DS_FLAG_ADAM_EPSILON | DS_FLAG_FP16 | DS_FLAG_WARMUP_STEPS |
                    DS_FLAG_TOTAL_STEPS | DS_FLAG_WEIGHT_DECAY;
    char what[128];
    snprintf(what, sizeof what, "explicit flags from argv: 0x%x (want 0x%x)", bits, want);
    test_check(bits == want, what);

    // a value in the file wins over a flag left at its default (HF would compare with the default)
    const char *path = write_tmp("file_wins.json",
                                 "{\"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 3e-5, \"weight_decay\": 0.1}}, "
                                 "\"gradient_clipping\": 0.3, \"bfloat16\": {\"enabled\": true}, "
                                 "\"zero_optimization\": {\"stage\": 3, \"stage3_gather_fp16_weights_on_model_save\": true}}");
    DsConfig c;
    ds_config_load(&c, path);
    DsResolveArgs a = ds_resolve_args_default();
    ds_config_resolve(&c, &a, NULL);
    check_ll("optimizer.type \"adamw\" (DeepSpeed lower-cases) -> AdamW", c.optimizer.type, DS_OPTIMIZER_ADAMW);
    check_num("file lr 3e-5 kept (--learning_rate not given)", c.optimizer.lr.v, 3e-5);
    check_num("file weight_decay kept", c.optimizer.weight_decay.v, 0.1);
    check_num("file gradient_clipping kept", c.gradient_clipping.v, 0.3);
    check_num("absent betas: DeepSpeed's 0.9", c.optimizer.betas[0].v, 0.9);
    check_ll("\"bfloat16\" (old name) -> bf16.enabled", c.bf16.enabled.v, 1);
    check_ll("stage3_gather_fp16_weights_on_model_save (old name)", c.zero.stage3_gather_16bit_weights_on_model_save.v, 1);
    check_ll("overlap_comm default at stage 3: true", c.zero.overlap_comm.v, 1);
    check_ll("stage3_prefetch_bucket_size default 5e7", c.zero.stage3_prefetch_bucket_size.v, 50000000LL);
    check_ll("stage3_param_persistence_threshold default 1e5", c.zero.stage3_param_persistence_threshold.v, 100000);

    // no optimizer / scheduler sections: HF Trainer's AdamW and schedule from the flags
    path = write_tmp("sections_absent.json", "{\"zero_optimization\": {\"stage\": 1}}");
    ds_config_load(&c, path);
    check_ll("overlap_comm default below stage 3: false", c.zero.overlap_comm.v, 0);
    a = ds_resolve_args_default();
    a.learning_rate = 2e-3;
    a.weight_decay = 0.05;
    ds_config_resolve(&c, &a, NULL);
    test_check(!c.optimizer.present && c.optimizer.type == DS_OPTIMIZER_ADAMW && near(c.optimizer.lr.v, 2e-3) &&
                   near(c.optimizer.weight_decay.v, 0.05) && !c.scheduler.present &&
                   c.scheduler.type == DS_SCHEDULER_NONE,
               "no optimizer/scheduler sections: AdamW from the flags, scheduler from --lr_scheduler_type");

    // WarmupCosineLR and WarmupLR defaults, null nvme_path (accelerate writes it), nvme
    path = write_tmp("cosine.json",
                     "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 100, "
                     "\"warmup_type\": \"linear\"}}, \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": "
                     "{\"device\": \"nvme\", \"nvme_path\": \"/local_nvme\", \"ratio\": 0.3}, \"offload_param\": "
                     "{\"device\": \"none\", \"nvme_path\": null}}}");
    ds_config_load(&c, path);
    check_num("WarmupCosineLR cos_min_ratio default 1e-4", c.scheduler.cos_min_ratio.v, 1e-4);
    check_num("WarmupCosineLR warmup_min_ratio default 0", c.scheduler.warmup_min_ratio.v, 0);
    check_ll("WarmupCosineLR warmup_num_steps default 1000", c.scheduler.warmup_num_steps.v, 1000);
    check_ll("warmup_type linear", c.scheduler.warmup_type, DS_WARMUP_LINEAR);
    test_check(c.zero.offload_optimizer.device == OFFLOAD_NVME && !strcmp(c.zero.offload_optimizer.nvme_path, "/local_nvme") &&
                   near(c.zero.offload_optimizer.ratio.v, 0.3),
               "offload_optimizer nvme with path and ratio 0.3 at stage 3");
    check_ll("offload_optimizer.buffer_count default 4", c.zero.offload_optimizer.buffer_count.v, 4);
    check_ll("offload_param.buffer_count default 5", c.zero.offload_param.buffer_count.v, 5);
    check_ll("offload_param.buffer_size default 1e8", c.zero.offload_param.buffer_size.v, 100000000LL);
    check_ll("offload_param.max_in_cpu default 1e9", c.zero.offload_param.max_in_cpu.v, 1000000000LL);

    path = write_tmp("warmuplr_default_max.json",
                     "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": \"auto\"}}, \"scheduler\": {\"type\": "
                     "\"WarmupLR\", \"params\": {\"warmup_num_steps\": \"auto\"}}}");
    ds_config_load(&c, path);
    a = ds_resolve_args_default();
    a.learning_rate = 7e-4;
    a.warmup_steps = 33;
    a.flag_set_mask = DS_FLAG_LEARNING_RATE | DS_FLAG_WARMUP_STEPS;
    ds_config_resolve(&c, &a, NULL);
    check_num("WarmupLR without warmup_max_lr: the optimizer's lr", c.scheduler.warmup_max_lr.v, 7e-4);
    check_num("WarmupLR warmup_min_lr default 0", c.scheduler.warmup_min_lr.v, 0);
    check_ll("warmup_num_steps auto = 33", c.scheduler.warmup_num_steps.v, 33);

    // resolve's `path` names the file in its messages
    Job j = {.path = write_tmp("named.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-5}}}"),
             .a = ds_resolve_args_default(), .resolve = 1, .shown = "my_ds_config.json"};
    j.a.learning_rate = 1e-3;
    j.a.flag_set_mask = DS_FLAG_LEARNING_RATE;
    test_expect_error("resolve names the file it is given", job_fn, &j, "error: my_ds_config.json: ",
                      "\"optimizer.params.lr\" is 3e-05 but --learning_rate is 0.001");

    // the reference table
    char *out = NULL;
    size_t outlen = 0;
    FILE *m = open_memstream(&out, &outlen);
    ds_config_print_reference(m);
    fclose(m);
    test_check(strstr(out, "zero_optimization.reduce_bucket_size") && strstr(out, "flops_profiler") &&
                   strstr(out, "NOT SUPPORTED") && strstr(out, "no-op:") && strstr(out, "only false accepted"),
               "ds_config_print_reference lists supported, no-op, default-only and rejected keys");
    int lines = 0;
    for (char *p = out; *p; p++) lines += *p == '\n';
    snprintf(what, sizeof what, "reference has one line per key: %d lines", lines);
    test_check(lines > 100, what);
    free(out);
}

// ---- every number a config can hold: beyond a double (cJSON reads 1e400 as inf) or beyond
// fp32 is refused naming the key. The keys are read off ds_config_print_reference, so a key
// added later is covered without a change here (issue 13).

// {"a": {"b": VALUE}} for the key "a.b" (betas: [0.9, VALUE]); a scheduler's params come
// with a scheduler type that takes them.
static void nested_json(const char *key, const char *value, char *json, size_t cap) {
    char path[128];
    snprintf(path, sizeof path, "%s", key);
    size_t k = 0;
    int depth = 0;
    char *save = NULL;
    for (char *seg = strtok_r(path, ".", &save), *next; seg; seg = next, depth++) {
        next = strtok_r(NULL, ".", &save);
        if (next && depth == 0 && !strcmp(seg, "scheduler")) {
            const char *type = strstr(key, "ratio") ? "WarmupCosineLR" : "WarmupDecayLR";
            k += (size_t)snprintf(json + k, cap - k, "{\"scheduler\": {\"type\": \"%s\", ", type);
            next = strtok_r(NULL, ".", &save);  // "params" follows
            k += (size_t)snprintf(json + k, cap - k, "\"params\": ");
            seg = next;
            if (!seg) break;
            next = strtok_r(NULL, ".", &save);
        }
        if (next) k += (size_t)snprintf(json + k, cap - k, "{\"%s\": ", seg);
        else if (!strcmp(seg, "betas")) k += (size_t)snprintf(json + k, cap - k, "{\"betas\": [0.9, %s]", value);
        else k += (size_t)snprintf(json + k, cap - k, "{\"%s\": %s", seg, value);
    }
    int open = 0;
    for (const char *c = json; *c; c++) open += (*c == '{') - (*c == '}');
    while (open-- > 0) k += (size_t)snprintf(json + k, cap - k, "}");
}

static void test_every_number_key(void) {
    char *out = NULL;
    size_t outlen = 0;
    FILE *m = open_memstream(&out, &outlen);
    ds_config_print_reference(m);
    fclose(m);
    int keys = 0, n = 0;
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char key[128], dflt[64];
        int used = 0;
        if (sscanf(line, "%127s %63s %n", key, dflt, &used) != 2 || !strcmp(key, "key")) continue;
        const char *takes = line + used;
        int is_num = strstr(takes, "integer") || !strncmp(takes, "a number", 8) || !strncmp(takes, "[beta1", 6) ||
                     (!strncmp(takes, "only ", 5) && takes[5] >= '0' && takes[5] <= '9') ||
                     !strcmp(key, "zero_optimization.stage");
        if (!is_num) continue;
        keys++;
        const char *values[] = {"1e400", "-1e400", "1e39"};
        for (int v = 0; v < 3; v++) {
            char json[1024], name[64], what[1100];
            nested_json(key, values[v], json, sizeof json);
            snprintf(name, sizeof name, "number_%d.json", n++);
            Job j = {.path = write_tmp(name, json), .resolve = 0};
            const char *last = strrchr(key, '.') ? strrchr(key, '.') + 1 : key;
            snprintf(what, sizeof what, "%s", json);
            test_expect_error(what, job_fn, &j, j.path, last);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "every number key of the reference tried: %d keys", keys);
    test_check(keys >= 30, what);
    free(out);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/test_ds_config.XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    test_configs_dir();
    test_configs_run();
    test_seed("ds_config_zero1.json", 1, 0, 0, 0);
    test_seed("ds_config_zero2.json", 2, 0, 0, 0);
    test_seed("ds_config_zero2_offload.json", 2, 1, 0, 0);
    test_seed("ds_config_zero3.json", 3, 0, 0, 1);
    test_seed("ds_config_zero3_offload_optimizer.json", 3, 1, 0, 1);
    test_2021();
    test_2021_family();
    test_batch_rule();
    test_bad_configs();
    test_misc();
    test_every_number_key();
    for (int i = 0; i < g_nfiles; i++) {
        unlink(g_files[i]);
        free(g_files[i]);
    }
    rmdir(g_tmp);
    return test_summary();
}
