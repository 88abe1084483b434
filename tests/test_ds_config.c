// tests/test_ds_config.c: the DeepSpeed JSON config (deepspeed/ds_config.c) without a GPU:
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
//  - the bad configs and the smaller pieces: tests/test_ds_config_errors.c.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds_config_test.h"

// ---- 1. every file in configs/ loads and resolves unchanged ------------------------------
static void test_configs_dir(void) {
    DIR *d = opendir("configs");
    test_check(d != NULL, "configs/ exists");
    if (!d) return;
    static const char *const want[] = {"ds_config.json",       "ds_config_no_offload.json",
                                       "ds_config_1gpu.json",  "ds_config_sharded_ddp.json",
                                       "ds_config_zero1.json", "ds_config_zero2.json",
                                       "ds_config_zero2_offload.json", "ds_config_zero3.json",
                                       "ds_config_zero3_offload_optimizer.json", "ds_config_zero3_offload.json",
                                       "ds_config_all_blocks.json"};
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
        char path[300], out[400], cmd[8192], what[600];
        snprintf(path, sizeof path, "configs/%s", e->d_name);
        snprintf(out, sizeof out, "%s/run_%.*s", g_tmp, (int)(len - 5), e->d_name);
        DsConfig c;
        ds_config_load(&c, path);
        int half = (c.fp16.enabled.v && !c.fp16.enabled.is_auto) || (c.bf16.enabled.v && !c.bf16.enabled.is_auto);
        // in a working directory of its own: DeepSpeed's monitors write relative to it
        // (ds_config_all_blocks.json's output/ds_logs/train_bert), never into the repository
        char repo[1024];
        if (!getcwd(repo, sizeof repo)) snprintf(repo, sizeof repo, ".");
        snprintf(cmd, sizeof cmd,
                 "mkdir -p '%s.cwd' && cd '%s.cwd' && '%s/train_t5' --model '%s/tests/fixtures/trainer_model' "
                 "--tokenizer_name '%s/data/sample/spiece.model' --data_dir '%s/tests/fixtures/trainer_data' "
                 "--max_steps 3 --per_device_train_batch_size 4 "
                 "--logging_steps 1 --do_train --deepspeed '%s/%s' --output_dir '%s' "
                 "--cache_dir '%s/cache' > '%s.log' 2> '%s.err'",
                 out, out, repo, repo, repo, repo, repo, path, out, g_tmp, out, out);
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
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.log' '%s.err' '%s.cwd'", out, out, out, out);
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

// ---- 5. the blocks around training (issue 36): configs/ds_config_all_blocks.json as read,
// DeepSpeed's defaults, null where DeepSpeed takes None, the NOTICEs, a secret never printed
static void test_blocks(void) {
    DsConfig c;
    ds_config_load(&c, "configs/ds_config_all_blocks.json");
    test_check(c.activation_checkpointing.present && c.activation_checkpointing.number_checkpoints.is_null &&
                   c.activation_checkpointing.number_checkpoints.is_set && !c.activation_checkpointing.cpu_checkpointing.v,
               "all_blocks: activation_checkpointing present, number_checkpoints null");
    test_check(c.aio.present && c.aio.block_size.v == 1048576 && c.aio.queue_depth.v == 8 &&
                   c.aio.intra_op_parallelism.v == 1 && c.aio.intra_op_parallelism.is_set && !c.aio.single_submit.v &&
                   c.aio.overlap_events.v,
               "all_blocks: aio as the docs show it (thread_count read as intra_op_parallelism)");
    test_check(c.tensorboard.enabled.v && !strcmp(c.tensorboard.output_path.v, "output/ds_logs/") &&
                   !strcmp(c.tensorboard.job_name.v, "train_bert") && c.csv_monitor.enabled.v &&
                   !strcmp(c.csv_monitor.job_name.v, "train_bert"),
               "all_blocks: tensorboard and csv_monitor enabled, output/ds_logs/ train_bert");
    test_check(c.flops_profiler.enabled.v && c.flops_profiler.profile_step.v == 1 && c.flops_profiler.top_modules.v == 1 &&
                   c.flops_profiler.module_depth.v == -1 && c.flops_profiler.output_file.is_null &&
                   !c.flops_profiler.output_file.v[0],
               "all_blocks: flops_profiler step 1, top 1, output_file null");
    test_check(c.comms_logger.present && c.comms_logger.enabled.v && !c.comms_logger.verbose.v && c.comms_logger.prof_all.v &&
                   !c.wandb.enabled.v && !strcmp(c.wandb.project.v, "my_project") && !c.comet.enabled.v &&
                   c.comet.samples_log_interval.v == 50,
               "all_blocks: comms_logger enabled; wandb and comet present, disabled");

    // DeepSpeed's defaults when the blocks are absent or empty
    ds_config_load(&c, write_tmp("blocks_empty.json", "{\"activation_checkpointing\": {}, \"aio\": {}, "
                                 "\"tensorboard\": {}, \"csv_monitor\": {}, \"flops_profiler\": {}, \"comms_logger\": {}, "
                                 "\"wandb\": {}, \"comet\": {}}"));
    test_check(c.activation_checkpointing.present && c.aio.block_size.v == 1048576 && c.aio.queue_depth.v == 8 &&
                   c.aio.intra_op_parallelism.v == 1 && c.aio.overlap_events.v && !c.aio.single_submit.v &&
                   !c.tensorboard.enabled.v && !c.tensorboard.output_path.v[0] &&
                   !strcmp(c.tensorboard.job_name.v, "DeepSpeedJobName") &&
                   !strcmp(c.csv_monitor.job_name.v, "DeepSpeedJobName") && !c.flops_profiler.enabled.v &&
                   c.flops_profiler.profile_step.v == 1 && c.flops_profiler.top_modules.v == 1 &&
                   c.flops_profiler.detailed.v && c.comms_logger.present && !c.comms_logger.enabled.v &&
                   c.comms_logger.prof_all.v && !c.wandb.enabled.v && !strcmp(c.wandb.project.v, "deepspeed") &&
                   c.comet.samples_log_interval.v == 100,
               "empty blocks: DeepSpeed 0.19.8's defaults (1 MiB blocks, depth 8, DeepSpeedJobName, step 1, ...)");

    // null where DeepSpeed's field is Optional, a secret never printed, each no-op key named
    const char *path = write_tmp("blocks_null.json",
                                 "{\"activation_checkpointing\": {\"number_checkpoints\": null, \"profile\": true}, "
                                 "\"flops_profiler\": {\"output_file\": null}, \"wandb\": {\"enabled\": false, "
                                 "\"group\": null, \"team\": null}, \"comet\": {\"online\": null, \"api_key\": "
                                 "\"SECRET_KEY_123\", \"mode\": null}}");
    ds_config_load(&c, path);
    char *out = NULL;
    size_t outlen = 0;
    FILE *m = open_memstream(&out, &outlen);
    ds_config_print_unacted(&c, path, m);
    fclose(m);
    static const char *const named[] = {"\"activation_checkpointing.number_checkpoints\" = null",
                                        "\"activation_checkpointing.profile\" = true", "\"wandb.enabled\" = false",
                                        "\"wandb.group\" = null", "\"wandb.team\" = null", "\"comet.online\" = null",
                                        "\"comet.mode\" = null", "\"comet.api_key\" = (set; not shown)"};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        char what[256];
        snprintf(what, sizeof what, "null parses; NOTICE names %s", named[i]);
        test_check(strstr(out, named[i]) != NULL, what);
    }
    test_check(!strstr(out, "SECRET_KEY_123"), "comet.api_key's value is never printed");
    free(out);

    // the run-dependent blocks: each set key named when the run does not act on it
    out = NULL;
    m = open_memstream(&out, &outlen);
    ds_config_load(&c, "configs/ds_config_all_blocks.json");
    ds_config_print_section_unacted(&c, "aio", "f.json", "no NVMe offload", m);
    fclose(m);
    static const char *const aio_keys[] = {"\"aio.block_size\"", "\"aio.queue_depth\"",
                                           "\"aio.intra_op_parallelism\" (or its other name \"thread_count\")",
                                           "\"aio.single_submit\"", "\"aio.overlap_events\""};
    for (size_t i = 0; i < sizeof aio_keys / sizeof aio_keys[0]; i++) {
        char what[256];
        snprintf(what, sizeof what, "section NOTICE names %s", aio_keys[i]);
        test_check(strstr(out, aio_keys[i]) != NULL, what);
    }
    free(out);
}

int main(void) {
    if (ds_test_begin("test_ds_config")) return 2;
    test_configs_dir();
    test_configs_run();
    test_seed("ds_config_zero1.json", 1, 0, 0, 0);
    test_seed("ds_config_zero2.json", 2, 0, 0, 0);
    test_seed("ds_config_zero2_offload.json", 2, 1, 0, 0);
    test_seed("ds_config_zero3.json", 3, 0, 0, 1);
    test_seed("ds_config_zero3_offload_optimizer.json", 3, 1, 0, 1);
    test_seed("ds_config_zero3_offload.json", 3, 1, 1, 1);
    test_2021();
    test_2021_family();
    test_batch_rule();
    test_blocks();
    ds_test_end();
    return test_summary();
}
