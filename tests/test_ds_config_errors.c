// tests/test_ds_config_errors.c: the DeepSpeed JSON config's errors and smaller pieces,
// without a GPU (the configs that load are tests/test_ds_config.c's):
//  - a list of bad configs, each run in a forked child: exit 1 and one "error:" line naming
//    the key (tests/test_fork.h), found while loading or while resolving against the flags;
//  - the 2021 post's own flags contradicting its ds_config.json (refused, as HF refuses them
//    today);
//  - the flags given on the command line, a file's value over a flag left at its default,
//    the defaults of the scheduler and offload sections, and the reference table.
#include <string.h>

#include "ds_config_test.h"

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
    // the blocks around training (issue 36): each acted on, and refused only where it cannot be
    {"wandb_enabled.json", "{\"wandb\": {\"enabled\": true, \"project\": \"p\"}}", "key \"wandb.enabled\"",
     "sends nothing over the network"},
    {"comet_enabled.json", "{\"comet\": {\"enabled\": true}}", "key \"comet.enabled\"", "\"tensorboard\""},
    {"aio_use_gds.json", "{\"aio\": {\"use_gds\": true}}", "key \"aio.use_gds\"", "set it to false"},
    {"aio_block_unaligned.json", "{\"aio\": {\"block_size\": 5000}}", "key \"aio.block_size\"", "multiple of 4096"},
    {"aio_block_small.json", "{\"aio\": {\"block_size\": 512}}", "key \"aio.block_size\"", "found 512"},
    {"aio_queue_zero.json", "{\"aio\": {\"queue_depth\": 0}}", "key \"aio.queue_depth\"", "found 0"},
    {"aio_threads_both.json", "{\"aio\": {\"thread_count\": 2, \"intra_op_parallelism\": 2}}", "\"thread_count\"",
     "\"intra_op_parallelism\""},
    {"aio_unknown.json", "{\"aio\": {\"blocksize\": 4096}}", "unknown key \"aio.blocksize\"",
     "did you mean \"aio.block_size\""},
    {"act_ckpt_bool.json", "{\"activation_checkpointing\": true}", "key \"activation_checkpointing\"",
     "expected an object"},
    {"act_ckpt_partition_string.json", "{\"activation_checkpointing\": {\"partition_activations\": \"yes\"}}",
     "key \"activation_checkpointing.partition_activations\"", "true or false"},
    {"act_ckpt_number_fraction.json", "{\"activation_checkpointing\": {\"number_checkpoints\": 2.5}}",
     "key \"activation_checkpointing.number_checkpoints\"", "or null"},
    {"act_ckpt_number_auto.json", "{\"activation_checkpointing\": {\"number_checkpoints\": \"auto\"}}",
     "key \"activation_checkpointing.number_checkpoints\"", "\"auto\" is only"},
    {"act_ckpt_cpu_null.json", "{\"activation_checkpointing\": {\"cpu_checkpointing\": null}}",
     "key \"activation_checkpointing.cpu_checkpointing\"", "found null"},
    {"tensorboard_path_number.json", "{\"tensorboard\": {\"enabled\": true, \"output_path\": 5}}",
     "key \"tensorboard.output_path\"", "a string"},
    {"tensorboard_typo.json", "{\"tensorboard\": {\"enabld\": true}}", "unknown key \"tensorboard.enabld\"",
     "did you mean \"tensorboard.enabled\""},
    {"csv_job_null.json", "{\"csv_monitor\": {\"enabled\": true, \"job_name\": null}}",
     "key \"csv_monitor.job_name\"", "found null"},
    {"csv_enabled_auto.json", "{\"csv_monitor\": {\"enabled\": \"auto\"}}", "key \"csv_monitor.enabled\"",
     "\"auto\" is only"},
    {"flops_step_negative.json", "{\"flops_profiler\": {\"enabled\": true, \"profile_step\": -1}}",
     "key \"flops_profiler.profile_step\"", "found -1"},
    {"flops_top_zero.json", "{\"flops_profiler\": {\"top_modules\": 0}}", "key \"flops_profiler.top_modules\"",
     "found 0"},
    {"flops_output_number.json", "{\"flops_profiler\": {\"output_file\": 3}}", "key \"flops_profiler.output_file\"",
     "a string"},
    {"flops_depth_low.json", "{\"flops_profiler\": {\"module_depth\": -2}}", "key \"flops_profiler.module_depth\"",
     "found -2"},
    {"comms_ops_string.json", "{\"comms_logger\": {\"enabled\": true, \"prof_ops\": \"all_reduce\"}}",
     "key \"comms_logger.prof_ops\"", "a list"},
    {"comms_ops_empty_name.json", "{\"comms_logger\": {\"prof_ops\": [\"\"]}}", "key \"comms_logger.prof_ops\"",
     "non-empty strings"},
    {"comms_ops_number.json", "{\"comms_logger\": {\"prof_ops\": [\"all_reduce\", 1]}}",
     "key \"comms_logger.prof_ops\"", "found [\"all_reduce\",1]"},
    {"comms_verbose_string.json", "{\"comms_logger\": {\"verbose\": \"true\"}}", "key \"comms_logger.verbose\"",
     "true or false"},
    {"wandb_project_null.json", "{\"wandb\": {\"project\": null}}", "key \"wandb.project\"", "found null"},
    {"comet_key_number.json", "{\"comet\": {\"api_key\": 123}}", "key \"comet.api_key\"", "a string"},
    {"comet_online_string.json", "{\"comet\": {\"online\": \"yes\"}}", "key \"comet.online\"", "or null"},
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

// Errors found while loading. Returns the number of cases.
static int test_bad_loads(void) {
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
    return n;
}

// The configs that fail while resolving against the flags, with the flags; returns how many.
static int bad_resolve_cases(BadResolve r[16]) {
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
    return nr;
}

// Errors found while resolving against the flags. Returns the number of cases.
static int test_bad_resolves(void) {
    int n = 0;
    BadResolve r[16];
    int nr = bad_resolve_cases(r);
    for (int i = 0; i < nr; i++) {
        Job j = {.path = write_tmp(r[i].name, r[i].json), .a = r[i].a, .resolve = 1};
        test_expect_error(r[i].name, job_fn, &j, r[i].needle1, r[i].needle2);
        n++;
    }
    return n;
}

// The 2021 post's command line with its ds_config.json: --adam_eps 1e-06 contradicts eps 1e-8
// (transformers 4.2 silently kept the file's value; today's HF and train_t5 refuse).
static void test_post_flags(void) {
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
}

static void test_bad_configs(void) {
    int n = test_bad_loads();
    n += test_bad_resolves();
    test_post_flags();
    n++;
    char what[64];
    snprintf(what, sizeof what, "bad configs listed: %d (>= 14)", n);
    test_check(n >= 14, what);
}

// ---- 6. the other pieces ---------------------------------------------------------------
// The flags given on the command line; a value in the file over a flag left at its default.
static void test_flags_and_file(void) {
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
}

// WarmupCosineLR and WarmupLR defaults, null nvme_path (accelerate writes it), nvme.
static void test_section_defaults(void) {
    DsConfig c;
    DsResolveArgs a;
    const char *path = write_tmp("cosine.json",
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
}

// resolve's `path` names the file in its messages; the reference table.
static void test_names_and_reference(void) {
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
    test_check(strstr(out, "zero_optimization.reduce_bucket_size") && strstr(out, "flops_profiler.profile_step") &&
                   strstr(out, "NOT SUPPORTED") && strstr(out, "no-op:") && strstr(out, "only false accepted"),
               "ds_config_print_reference lists supported, no-op, default-only and rejected keys");
    int lines = 0;
    for (char *p = out; *p; p++) lines += *p == '\n';
    char what[128];
    snprintf(what, sizeof what, "reference has one line per key: %d lines", lines);
    test_check(lines > 100, what);
    free(out);
}

// ---- every number a config can hold: beyond a double (cJSON reads 1e400 as inf) or beyond
// fp32 is refused naming the key. The keys are read off ds_config_print_reference, so a key
// added later is covered without a change here.

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
    if (ds_test_begin("test_ds_config_errors")) return 2;
    test_bad_configs();
    test_flags_and_file();
    test_section_defaults();
    test_names_and_reference();
    test_every_number_key();
    ds_test_end();
    return test_summary();
}
