// trainer/trainer.c: `train_t5 --do_train ...`'s main (see trainer.h and docs/TRAINER.md):
// start-up and resolution, the memory plan checked, the data opened, the model loaded, then
// the tasks: training (train_loop.c), evaluation and prediction. The run's state is
// trainer/run.h; what it does is the run plan (plan.c, --deepspeed's part in deepspeed.c),
// resolved before anything is written; models, trainer_state.json and checkpoints are
// checkpoint.c's; logs and metrics files run_log.c's; the step arithmetic train_loop.c's.
#include "trainer.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../eval/bleu.h"
#include "../data/collate.h"
#include "../data/sampler.h"
#include "../data/splits.h"
#include "../model/fp8.h"
#include "../model/hf_dir.h"
#include "gen_defaults.h"
#include "../model/generate.h"
#include "../model/load.h"
#include "../zero/checkpoint.h"
#include "../comm/comm.h"
#include "../deepspeed/ds_config.h"
#include "../zero/partition.h"
#include "../zero/planner.h"
#include "../zero/step.h"
#include "args.h"
#include "run.h"
#include "device.h"
#include "estimate.h"
#include "output_dir.h"
#include "log_format.h"
#include "progress.h"
#include "retention.h"
#include "signals.h"
#include "tensorboard.h"
#include "run_log.h"
#include "train_loop.h"
#include "../common/t5_env.h"


// ---------------------------------------------------------------------------------
// set-up

static char *resolve_spm_path(const TrainArgs *a) {
    const char *src = a->tokenizer_name;
    if (!src) {
        if (!path_is_dir(a->model))
            t5_fail("--model %s is a preset without a directory: pass --tokenizer_name (a spiece.model file, e.g. "
                    "data/sample/spiece.model)", a->model);
        src = a->model;
    }
    char *p = path_is_dir(src) ? path_join(src, "spiece.model") : path_join("", src);
    if (!path_exists(p))
        t5_fail("%s: no SentencePiece model there%s; HINT: pass --tokenizer_name FILE (e.g. data/sample/spiece.model)", p,
                a->tokenizer_name ? "" : " (the model directory has no spiece.model)");
    return p;
}

static void apply_freeze(T5Model *m, int embeds, int encoder) {
    // finetune_trainer.py's freeze_embeds: the shared embedding (and with it a tied head);
    // its freeze_encoder: model.get_encoder()'s parameters, whose embed_tokens IS shared
    for (int i = 0; i < m->lay.count; i++) {
        ParamSpec *p = &m->lay.specs[i];
        if ((embeds || encoder) && p->kind == PARAM_EMBEDDING) p->frozen = 1;
        if (encoder && params_is_encoder(&m->lay, p)) p->frozen = 1;
    }
}

static void check_vocab(const Run *r, const Dataset *ds, int vocab_size) {
    if (ds->tokenizer_hash != spm_model_hash(r->spm))
        t5_fail("%s: tokenized with another SentencePiece model than %s; HINT: run train_t5 prepare again with "
                "--tokenizer_name %s", ds->path, r->spm_path, r->spm_path);
    if ((int)ds->vocab_size > vocab_size)
        t5_fail("%s: tokenized with a vocabulary of %u ids but the model has %d; HINT: use the model's own spiece.model",
                ds->path, ds->vocab_size, vocab_size);
}

// ---------------------------------------------------------------------------------
// training

// The activation arena is sized once for the largest batch the run can see: its shapes.
static void plan_shapes(Run *r, const Dataset *const sets[SPLIT_COUNT], int *B_out, int *S_out, int *T_out) {
    const TrainArgs *a = &r->a;
    int maxS = 1, maxT = 1;
    for (int k = 0; k < SPLIT_COUNT; k++) {
        if (!sets[k]) continue;
        // each split's labels have their own limit (val/test_max_target_length)
        int limT = k == SPLIT_TRAIN ? a->max_target_length : train_args_label_length(a, k == SPLIT_TEST);
        for (uint64_t i = 0; i < sets[k]->count; i++) {
            const int32_t *s, *t;
            int ls, lt;
            dataset_example(sets[k], i, &s, &ls, &t, &lt);
            if (ls > maxS) maxS = ls;
            if ((lt < limT ? lt : limT) > maxT) maxT = lt < limT ? lt : limT;
        }
    }
    if (maxS > a->max_source_length) maxS = a->max_source_length;
    int B = 1;
    if (sets[SPLIT_TRAIN] && r->p.micro_batch > B) B = r->p.micro_batch;
    if ((sets[SPLIT_VAL] || sets[SPLIT_TEST]) && a->per_device_eval_batch_size > B) B = a->per_device_eval_batch_size;
    *B_out = B;
    *S_out = maxS;
    *T_out = maxT;
}

// This rank's GPU memory plan at batch B (the arena's, trainer and evaluation) and eval batch E
// (the generate calls' decoder); *zp the ZeRO plan it came from.
static MemPlan plan_memory(const Run *r, const T5Config *cfg, Dtype dt, int B, int E, int S, int T, ZeroPlan *zp) {
    const TrainArgs *a = &r->a;
    *zp = planner_memory_zero_opts(cfg, dt, B, S, T, a->gradient_checkpointing, a->checkpoint_sub_batch, &r->p.zopt,
                                   r->comm.world);
    if (a->fp8 && !r->p.zopt.inference) planner_add_fp8(&zp->gpu, cfg, B, S, T, a->fp8_amax_history);
    MemPlan plan = zp->gpu;
    if (a->predict_with_generate && (a->do_eval || a->do_predict))  // the decoder of each generate call
        planner_add_generation(&plan, cfg, dt, E, a->generation_num_beams, S, a->generation_max_length);
    return plan;
}

// A row count as a batch bound for --find_max_batch's search: at least 1, at most BATCH_SEARCH_MAX.
#define BATCH_SEARCH_MAX (1 << 20)
static int batch_bound(long rows) { return rows < 1 ? 1 : rows > BATCH_SEARCH_MAX ? BATCH_SEARCH_MAX : (int)rows; }

// --find_max_batch: the largest per-device batch B, train and eval alike (the 2021 post passes
// the same number to both), whose plan fits --max_gpu_memory; the plan grows with B, so doubling
// then bisection. `limit`: no larger batch than the train split's rows per rank (or the eval
// split's, without training) could be used. The generation batch is B cut to `eval_rows`, the
// evaluation splits' rows, as clamp_eval_batch cuts it in the run (t5-3b's 10 validation pairs at
// B=28: planning generation for 28 had put 3.9 GiB on the plan that the run never uses).
static void plan_find_max_batch(const Run *r, const T5Config *cfg, Dtype dt, int S, int T, int limit, int eval_rows) {
    const double G = 1073741824.0, cap = r->a.max_gpu_memory * G;
    ZeroPlan zp;
#define EVAL_B(b) ((b) < eval_rows ? (b) : eval_rows)
#define FITS(b) ((double)plan_memory(r, cfg, dt, (b), EVAL_B(b), S, T, &zp).total <= cap)
    if (!FITS(1)) {
        printf("--find_max_batch: not even batch 1 fits under %.3g GiB by the memory plan (%.2f GiB)\n",
               r->a.max_gpu_memory, plan_memory(r, cfg, dt, 1, 1, S, T, &zp).total / G);
        return;
    }
    int lo = 1, hi = 2;  // FITS(lo), and hi is the first candidate above it
    while (hi <= limit && FITS(hi)) lo = hi, hi *= 2;
    if (hi > limit) hi = limit + 1;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (FITS(mid)) lo = mid;
        else hi = mid;
    }
    double at = plan_memory(r, cfg, dt, lo, EVAL_B(lo), S, T, &zp).total / G;
    printf("--find_max_batch: the largest per-device batch under %.3g GiB by the memory plan: %d (train and eval; "
           "plan %.2f GiB", r->a.max_gpu_memory, lo, at);
    if (lo < limit)
        printf("; %d needs %.2f GiB)\n", lo + 1, plan_memory(r, cfg, dt, lo + 1, EVAL_B(lo + 1), S, T, &zp).total / G);
    else printf("; the data has no more rows per rank than that)\n");
#undef FITS
#undef EVAL_B
    fflush(stdout);
}

// This rank's memory plan at the run's ZeRO stage, world size and offload, checked against
// --max_gpu_memory BEFORE the model loads: a run that cannot fit stops with the figures
// and the cheapest change that would fit.
static void plan_check(Run *r, const T5Config *cfg, Dtype dt, int B, int S, int T) {
    const TrainArgs *a = &r->a;
    ZeroPlan zp;
    MemPlan plan = plan_memory(r, cfg, dt, B, a->per_device_eval_batch_size, S, T, &zp);
    // the offloaded state against this host's memory and disk, before anything is allocated
    if (a->deepspeed)  // every rank: each host checks its own memory and disk
        planner_check_offload(&zp, &r->p.zopt, comm_ranks_on_my_host(&r->comm), a->deepspeed, a->explain);
    r->plan_total = plan.total;
    if (is_main(r)) {
        printf("largest batch: %d x (source %d, target %d tokens), ZeRO stage %d over %d rank%s%s; ", B, S, T,
               r->p.zopt.stage, r->comm.world, r->comm.world > 1 ? "s" : "",
               r->p.zopt.offload_optimizer && !r->p.zopt.inference ? ", optimizer offloaded" : "");
        planner_print(&plan, a->max_gpu_memory);
    }
    const double G = 1073741824.0, cap = a->max_gpu_memory * G;
    if (r->p.device == DEVICE_CPU) {  // the CPU backend allocates the same plan in host memory: check it now
        double have = planner_host_available();
        if (have < 0 || (double)plan.total <= have) return;
        char why[512];
        snprintf(why, sizeof why, "the run needs %.2f GiB of host memory on the CPU backend (activations %.2f GiB for "
                 "batch %d) but %.2f GiB is available; HINT: lower --per_device_train_batch_size / "
                 "--per_device_eval_batch_size, add --gradient_checkpointing, or train on a GPU (--device cuda)",
                 plan.total / G, plan.activations / G, B, have / G);
        if (!a->explain) t5_fail("%s", why);
        if (is_main(r)) printf("--explain: host check on this machine: does NOT fit here: %s\n", why);
        return;
    }
    if (a->max_gpu_memory <= 0 || r->p.device != DEVICE_CUDA) return;  // nothing to check against
    if ((double)plan.total <= cap) {
        if (a->explain && is_main(r))
            printf("--explain: fits: %.2f GiB planned of the %g GiB cap\n", plan.total / G, a->max_gpu_memory);
        return;
    }
    double states = (double)(plan.params + plan.grads + plan.master + plan.moments);
    const char *hint = states > 0.6 * cap && !r->p.zopt.offload_optimizer
                           ? "the model states alone take most of it: offload the optimizer to host memory "
                             "(--deepspeed configs/ds_config_zero2_offload.json) or partition over more ranks"
                       : a->gradient_checkpointing
                           ? "lower --per_device_train_batch_size (and raise --gradient_accumulation_steps)"
                           : "add --gradient_checkpointing, or lower --per_device_train_batch_size";
    char why[512];
    snprintf(why, sizeof why, "the run needs %.2f GiB on the GPU (model states %.2f GiB, activations %.2f GiB for "
             "batch %d) but --max_gpu_memory is %.1f GiB; HINT: %s", plan.total / G, states / G,
             plan.activations / G, B, a->max_gpu_memory, hint);
    if (!a->explain) t5_fail("%s", why);
    // the dry run's verdict: a run that would be refused is its finding, not its failure
    if (is_main(r)) printf("--explain: does NOT fit, the run would stop here before loading: %s\n", why);
}

// ---------------------------------------------------------------------------------

// --ddp_timeout: the NCCL watchdog's limit, handed to the communicator (Comm.nccl_timeout_s).
// T5_NCCL_TIMEOUT (a launcher's setting for every rank) decides when the flag is left at HF's
// default; the two set to different values are an error naming both. Returns 0 for "the
// variable decides" (comm/comm_nccl.cu reads it then).
static double ddp_timeout_seconds(const TrainArgs *a) {
    const char *env = t5_env_get(T5_ENV_NCCL_TIMEOUT);
    if (env && atof(env) != (double)a->ddp_timeout) {
        if (a->ddp_timeout == 1800) return 0;  // the flag left at HF's default: the variable decides
        t5_fail("--ddp_timeout %d and T5_NCCL_TIMEOUT=%s contradict each other: drop one", a->ddp_timeout, env);
    }
    return (double)a->ddp_timeout;
}

// Start-up, before anything is written or read besides the flags' files (docs/TRAINER.md
// "Start-up"): the flags, --deepspeed's config, the device, the plan (config.json), the data
// layout and the tokenizer's path. Returns 0 for --help.
static int startup_resolve(Run *r, int argc, char **argv, int start) {
    TrainArgs *a = &r->a;
    *a = train_args_default();
    train_args_parse(a, argc, argv, start);
    if (a->help) return 0;
    gen_defaults_apply(a);  // --model's generation_config.json / task_specific_params, under the flags
    DsConfig ds;
    if (a->deepspeed) {
        if (a->deepspeed_text) ds_config_load_text(&ds, a->deepspeed, a->deepspeed_text);  // JSON/base64 text
        else ds_config_load(&ds, a->deepspeed);
        train_args_take_ds_precision(a, &ds);  // fp16/bf16 "enabled": true in the file
        train_args_take_ds_checkpointing(a, &ds);  // "activation_checkpointing": gradient checkpointing
    }
    train_args_resolve_dry_run_device(a);  // --explain of a GPU line on a machine without one
    train_args_check_device(a);  // the device, precision and --num_gpus, each named with its source
    if (a->tf32 == 1 && (a->fp16 || a->bf16))
        train_args_add_notice(a, a->bf16 ? "NOTICE: --tf32 with bf16: every GEMM of a 16-bit run has bf16 operands, so "
                                           "TF32 (for fp32 operands) changes nothing"
                                         : "NOTICE: --tf32 with fp16: every GEMM of a 16-bit run has fp16 operands, so "
                                           "TF32 (for fp32 operands) changes nothing");
    // run_translation.py: a non-empty --output_dir with checkpoints continues from the last one
    if (a->do_train && !a->overwrite_output_dir && !a->resume_from_checkpoint && path_is_dir(a->output_dir) &&
        (r->resume_owned = retention_last_checkpoint(a->output_dir))) {
        a->resume_from_checkpoint = r->resume_owned;
        char line[1200];
        snprintf(line, sizeof line, "Checkpoint detected, resuming training at %s. To avoid this behavior, change the "
                 "`--output_dir` or add `--overwrite_output_dir` to train from scratch.", r->resume_owned);
        train_args_add_notice(a, line);
    }
    if (a->resume_from_checkpoint) retention_check_resumable(a->resume_from_checkpoint);  // not --save_only_model's
    // node-local checkpoints (HF's --save_on_each_node, DeepSpeed's key): this host's copy may lack shards
    const int node_local = a->save_on_each_node || (a->deepspeed && ds.checkpoint.use_node_local_storage.v);
    trainer_check_resume_dir(a, node_local);  // whole (or, node-local, this host's part) before its config.json is read
    if (a->resume_from_checkpoint) trainer_check_resume_model(a);  // of --model's architecture
    run_plan_resolve(&r->p, a, a->deepspeed ? &ds : NULL);
    r->data = (DataArgs){.data_dir = a->data_dir, .train_file = a->train_file, .validation_file = a->validation_file,
                         .test_file = a->test_file, .source_lang = a->source_lang, .target_lang = a->target_lang,
                         .task = a->task, .source_prefix = a->source_prefix,
                         .n = {a->n_train, a->n_val, a->n_test}};
    (void)data_source_prefix(&r->data);
    r->spm_path = resolve_spm_path(a);
    return 1;
}

// The splits the run uses; each host's lowest rank tokenizes into the cache first (a host's
// cache is its own disk, or a shared one, written atomically), the others then map the same
// files. Each is checked against the tokenizer and the model's vocabulary.
static void open_data(Run *r, Dataset sets[SPLIT_COUNT], const Dataset *used[SPLIT_COUNT]) {
    const TrainArgs *a = &r->a;
    const int want[SPLIT_COUNT] = {[SPLIT_TRAIN] = a->do_train, [SPLIT_VAL] = r->p.has_val,
                                   [SPLIT_TEST] = a->do_predict};
    for (int pass = 0; pass < 2; pass++) {
        if ((pass == 0) == comm_is_host_leader(&r->comm))
            for (int k = 0; k < SPLIT_COUNT; k++)
                if (want[k]) data_open_split(&r->data, (Split)k, r->spm, a->cache_dir, &sets[k]);
        if (pass == 0) comm_barrier(&r->comm);
    }
    for (int k = 0; k < SPLIT_COUNT; k++) used[k] = want[k] ? &sets[k] : NULL;
}

static void check_data(const Run *r, const Dataset *const used[SPLIT_COUNT]) {
    const int vocab = r->p.model_cfg.vocab_size;
    static const char *const SPLIT_WORDS[SPLIT_COUNT] = {"training (--do_train)", "validation (--do_eval or an "
                                                         "evaluation strategy)", "test (--do_predict)"};
    for (int k = 0; k < SPLIT_COUNT; k++)  // an empty split is not a run: zero steps, or metrics of nothing
        if (used[k] && used[k]->count == 0) {
            TextSpec spec;
            char *storage = NULL;
            data_split_spec(&r->data, (Split)k, &spec, &storage);  // name what the user gave, not the cache
            t5_fail("%s: the %s split has no examples (the file is empty, or --n_train/--n_val/--n_test/"
                    "--max_*_samples is 0); HINT: give it lines, or drop the flag that asks for it",
                    spec.source_path ? spec.source_path : used[k]->path, SPLIT_WORDS[k]);
        }
    if (used[SPLIT_TRAIN]) {
        const Dataset *ds = used[SPLIT_TRAIN];
        check_vocab(r, ds, vocab);
        long global = (long)r->p.micro_batch;
        if ((long)ds->count < global)
            t5_fail("%s: %llu training examples, fewer than one batch (%ld); HINT: lower --per_device_train_batch_size",
                    ds->path, (unsigned long long)ds->count, global);
    }
    if (used[SPLIT_VAL]) check_vocab(r, used[SPLIT_VAL], vocab);
    if (used[SPLIT_TEST]) check_vocab(r, used[SPLIT_TEST], vocab);
}

// An eval batch larger than the split is the whole split in one batch: the same batches,
// without sizing buffers for --per_device_eval_batch_size rows that never come.
// The rows of the larger evaluation split (validation or test); 0 when the run has neither.
static long eval_split_rows(const Dataset *const used[SPLIT_COUNT]) {
    long rows = 0;
    if (used[SPLIT_VAL] && (long)used[SPLIT_VAL]->count > rows) rows = (long)used[SPLIT_VAL]->count;
    if (used[SPLIT_TEST] && (long)used[SPLIT_TEST]->count > rows) rows = (long)used[SPLIT_TEST]->count;
    return rows;
}

static void clamp_eval_batch(TrainArgs *a, const Dataset *const used[SPLIT_COUNT]) {
    long rows = eval_split_rows(used);
    if (rows < 1) rows = 1;
    if ((used[SPLIT_VAL] || used[SPLIT_TEST]) && a->per_device_eval_batch_size > rows)
        a->per_device_eval_batch_size = (int)rows;
}

static void run_free(Run *r, const Dataset *const used[SPLIT_COUNT]) {
    for (int k = 0; k < SPLIT_COUNT; k++)
        if (used[k]) dataset_close((Dataset *)used[k]);  // sets[k] in open_data
    cJSON_Delete(r->log_history);
    cJSON_Delete(r->results);
    spm_free(r->spm);
    free(r->spm_path);
    free(r->a.notices);
    free(r->resume_owned);
    free(r->best_model_checkpoint);
    free(r->a.logging_dir_owned);
    tb_close(&r->tb);
    if (r->zero.m) zero_free(&r->zero);
    if (r->m.lay.specs) t5_free(&r->m);
    comm_finalize(&r->comm);
}

// How the run's weights load: random init or the model's (the checkpoint's when resuming)
// file, fp32 on the host, nothing on the device until zero_init.
static ModelLoadOptions run_load_options(Run *r, float **host_weights) {
    ModelLoadOptions lo = {.init_random = r->p.init == INIT_RANDOM && !r->a.resume_from_checkpoint,
                           .seed = (unsigned long long)r->a.seed, .host_weights = host_weights, .defer_weights = 1};
    lo.device_init = lo.init_random;  // made in place by zero_init_random: no host copy
    // resuming from the shards: each buffer is read from them by ranges (zero_init_checkpoint)
    lo.shards_init = r->a.resume_from_checkpoint && zero_checkpoint_has_shards(r->a.resume_from_checkpoint);
    return lo;
}

// --fp8's notice below this many rows a micro-batch: t5-large on an H200 was 1.01x bf16 at
// 16 x 128 = 2048 and 1.17x at 64 x 128 = 8192 (docs/CUDA.md "fp8")
#define FP8_PAYS_ROWS 8192

// The model's weights stay on the host until zero_init places what the ZeRO stage keeps;
// ZeRO partitions the model states over the ranks (stage 0 without --deepspeed), the
// optimizer state only when training.
// dir NULL: the run's model (--model, or the checkpoint resumed); else the weights of
// checkpoint dir (--load_best_model_at_end), on the backend be that is open already.
void trainer_load_model_from(Run *r, const char *dir, const Backend *be) {
    const TrainArgs *a = &r->a;
    const RunPlan *p = &r->p;
    const int B = r->plan_B, S = r->plan_S, T = r->plan_T;
    // the weights stay on the host until zero_init places what the ZeRO stage keeps
    float *host_weights = NULL;
    ModelLoadOptions lo = run_load_options(r, &host_weights);
    const char *model_arg = dir ? dir : a->resume_from_checkpoint ? a->resume_from_checkpoint : a->model;
    int has_weights = dir ? 1 : p->model_has_weights;
    if (dir) {  // --load_best_model_at_end: that checkpoint's weights, from its shards when it has them
        lo.init_random = lo.device_init = 0;
        lo.shards_init = zero_checkpoint_has_shards(dir);
    }
    const char *shards_dir = dir ? dir : a->resume_from_checkpoint;
    // weights from a file are read while the device opens (every input check has passed by now);
    // a random init is made by zero_init_random where the weights live
    lo.job = r->weights_job ? r->weights_job : model_weights_begin(model_arg, &p->model_cfg, has_weights, lo);
    r->weights_job = NULL;
    if (!be)
        be = device_backend(a->device, r->comm.local_rank, p->precision == PRECISION_BF16,
                            p->precision == PRECISION_FP16, a->max_gpu_memory, a->tf32);
    model_load_resolved(&r->m, model_arg, &p->model_cfg, has_weights, be, lo);
    if (a->dropout_rate >= 0) r->m.cfg.dropout_rate = r->m.dropout_p = (float)a->dropout_rate;
    if (a->freeze_embeds || a->freeze_encoder) apply_freeze(&r->m, a->freeze_embeds, a->freeze_encoder);
    AdamWConfig oc = {.lr = (float)p->lr, .beta1 = (float)p->beta1, .beta2 = (float)p->beta2, .eps = (float)p->eps,
                      .weight_decay = (float)p->weight_decay, .max_grad_norm = (float)p->max_grad_norm};
    if (lo.device_init) zero_init_random(&r->zero, &r->m, &r->comm, &p->zopt, a->do_train ? &oc : NULL, lo.seed);
    else if (lo.shards_init)
        zero_init_checkpoint(&r->zero, &r->m, &r->comm, &p->zopt, a->do_train ? &oc : NULL, shards_dir);
    else zero_init(&r->zero, &r->m, &r->comm, &p->zopt, a->do_train ? &oc : NULL, host_weights);
    if (a->deepspeed || r->comm.world > 1) zero_print_memory(&r->zero);
    r->m.gradient_checkpointing = a->gradient_checkpointing;
    r->m.sub_batch = a->checkpoint_sub_batch;
    r->m.inference = p->zopt.inference;  // evaluation only: a forward-only activation plan
    size_t keep = 0;  // the kept sublayer activations' bytes
    if (!r->m.inference) {  // keep what backward would recompute when the plan has room (zero/planner.h)
        keep = t5_keep_bytes(&r->m.cfg, be->act_dtype, B, S, T, a->gradient_checkpointing, a->checkpoint_sub_batch);
        r->m.keep_sublayer_acts = planner_keep_sublayer_acts(be, r->plan_total, keep);
        if (is_main(r))
            planner_print_keep(be, r->m.keep_sublayer_acts, r->plan_total, keep, a->gradient_checkpointing,
                               a->checkpoint_sub_batch);
    }
    if (a->fp8 && !r->m.inference) {
        t5_fp8_init(&r->m, a->fp8_keep, a->fp8_amax_history, a->fp8_margin);
        // the forward's rounded inputs kept for the backward, then the step's weight codes, when the plan has room
        // (as the sublayer activations)
        const PlannerFp8Keep k = planner_keep_fp8(be, &r->m, r->plan_total + (r->m.keep_sublayer_acts ? keep : 0), B, S, T);
        if (is_main(r)) {
            char kept[128];
            t5_fp8_describe_keep(a->fp8_keep, kept, sizeof kept);
            printf("fp8: the blocks' linear GEMMs of training steps in fp8 (%d linear groups: e4m3 inputs and weights, e5m2 "
                   "gradients; delayed scaling over %d steps, margin %d; the first step scaled from its own tensors)%s; "
                   "bf16: %s; evaluation and generation in %s; the rounded inputs %s (%.2f GiB); the weights %s "
                   "(%.2f GiB)\n", r->m.fp8->n_slots,
                   a->fp8_amax_history, a->fp8_margin,
                   be->act_dtype == DTYPE_F32 ? " emulated on the CPU reference (operands rounded to the fp8 grids, fp32 "
                                                "products)" : "",
                   kept, be->act_dtype == DTYPE_F32 ? "fp32" : "bf16",
                   k.inputs ? "kept for the backward" : "rounded again in the backward: the plan has no room to keep them",
                   k.input_bytes / 1073741824.0,
                   k.weights ? "rounded once a step, kept" : "rounded by every call: the plan has no room to keep them",
                   k.weight_bytes / 1073741824.0);
            // each operand's rounding pass costs about what its fp8 GEMM saves at small row counts
            if (be->act_dtype != DTYPE_F32 && (long)r->p.micro_batch * S < FP8_PAYS_ROWS)
                printf("NOTICE: --fp8 with %d x %d source tokens a micro-batch: fp8 pays for large micro-batches (one "
                       "H200, t5-large: 64 x 128 1.17x bf16, 16 x 128 1.01x; docs/CUDA.md \"fp8\"); `train_t5 bench "
                       "--fp8` measures this shape\n", r->p.micro_batch, S);
        }
    }
    t5_plan_activations(&r->m, B, S, T);
    if (is_main(r)) planner_print_fp8_h_unkept(&r->m);
}

static void load_model(Run *r, int B, int S, int T) {
    r->plan_B = B;  // the activation plan's shapes, again for --load_best_model_at_end
    r->plan_S = S;
    r->plan_T = T;
    trainer_load_model_from(r, NULL, NULL);
}

// --do_train, --do_eval, --do_predict in HF's order.
static void run_tasks(Run *r, const Dataset *const used[SPLIT_COUNT]) {
    const TrainArgs *a = &r->a;
    if (a->do_train && train_loop_run(r, used[SPLIT_TRAIN], used[SPLIT_VAL])) return;  // stopped by a signal
    if (a->do_eval) {
        cJSON *met = trainer_evaluate(r, used[SPLIT_VAL], "eval", NULL);
        run_log_after_training(r, met);
        cJSON_AddNumberToObject(met, "epoch", r->epoch);
        cJSON_AddNumberToObject(met, "eval_samples", (double)used[SPLIT_VAL]->count);
        run_log_save_metrics(r, "eval", met);
        cJSON_Delete(met);
    }
    if (a->do_predict) {
        char *pred_path = a->predict_with_generate ? path_join(a->output_dir, "generated_predictions.txt") : NULL;
        cJSON *met = trainer_evaluate(r, used[SPLIT_TEST], "predict", pred_path);
        free(pred_path);
        cJSON_AddNumberToObject(met, "predict_samples", (double)used[SPLIT_TEST]->count);
        run_log_save_metrics(r, "predict", met);
        cJSON_Delete(met);
    }
}

// --explain: the GPU the plan is for, and the checks it allows: the visible GPU of this rank when
// there is one (the binary's targets, bf16, TF32), else the test hook's compute capability
// (T5_TEST_COMPUTE_CAPABILITY, checked as a GPU of it would be), else nothing to check: the line
// says which, and where the memory figure comes from.
static void explain_print_gpu(const Run *r) {
    const TrainArgs *a = &r->a;
    const int world = r->comm.world;
    char cap[128] = "", what[256];
    if (a->max_gpu_memory > 0) snprintf(cap, sizeof cap, "%g GiB each (--max_gpu_memory)", a->max_gpu_memory);
    else snprintf(cap, sizeof cap, "memory not given, so not checked (--max_gpu_memory G)");
    if (strcmp(a->device, "cuda") != 0) {
        printf("--explain: planned for %d CPU rank%s\n", world, world > 1 ? "s" : "");
        return;
    }
    GpuInfo g;
    int fake = gpu_arch_fake_cc();
    if (device_gpu_info(r->comm.local_rank, &g)) {
        gpu_arch_require_targets(&g);
        train_args_check_gpu(a, &g);
        printf("--explain: planned for %d GPU rank%s, each on a GPU like GPU %d here: %s (compute capability %d.%d%s, "
               "%.2f GiB), %s\n", world, world > 1 ? "s" : "", g.index, g.name, g.cc / 10, g.cc % 10,
               g.cc != g.cc_real ? " by T5_TEST_COMPUTE_CAPABILITY" : "", g.mem_total / 1073741824.0, cap);
    } else if (fake) {
        g = (GpuInfo){.index = -1, .cc = fake, .cc_real = fake};
        snprintf(g.name, sizeof g.name, "T5_TEST_COMPUTE_CAPABILITY; no GPU here");
        gpu_arch_require_targets(&g);
        train_args_check_gpu(a, &g);
        printf("--explain: planned for %d GPU rank%s of compute capability %d.%d (T5_TEST_COMPUTE_CAPABILITY; no GPU "
               "here), %s\n", world, world > 1 ? "s" : "", fake / 10, fake % 10, cap);
    } else {
        gpu_arch_describe(gpu_arch_cubins(), gpu_arch_ptx(), what, sizeof what);
        printf("--explain: planned for %d GPU rank%s, %s; no GPU here, so its compute capability is not checked "
               "(bf16 and --tf32 need %d.%d, Ampere, or newer; the CUDA code of %s: %s)\n", world,
               world > 1 ? "s" : "", cap, GPU_CC_BF16 / 10, GPU_CC_BF16 % 10,
               device_cuda_built() ? "this binary" : "a CUDA build of this tree", what);
    }
}

// Everything between the ranks' start and the model's load, on every rank (rank 0 prints):
// the DeepSpeed config against the world size, the start-up lines, --output_dir's check, the
// tokenizer, the data (tokenized once), the step counts, and the memory plan, checked against
// --max_gpu_memory (with --explain: the table of stages 0-3 first, and --find_max_batch).
// *B, *S, *T: the activation plan's shapes. Nothing is written.
static void run_prepare(Run *r, Dataset sets[SPLIT_COUNT], const Dataset *used[SPLIT_COUNT], int *B, int *S, int *T) {
    TrainArgs *a = &r->a;
    if (a->deepspeed) run_plan_check_deepspeed(&r->p, a, r->comm.world);  // before the data and the output dir
    if (is_main(r)) {
        printf("device: %s (%s)\n", a->device, a->device_from);
        if (a->explain) explain_print_gpu(r);  // the GPU the dry run plans for, checked where it can be
        if (a->notices) printf("%s", a->notices);
        fflush(stdout);
        r->results = output_dir_check(a, r->p.node_local);  // and the all_results.json there, to merge into
    }
    if (!r->results) r->results = cJSON_CreateObject();
    r->spm = spm_load(r->spm_path);
    r->log_history = cJSON_CreateArray();
    open_data(r, sets, used);
    if (a->deepspeed) run_plan_apply_deepspeed(&r->p, a, a->do_train ? (long)sets[SPLIT_TRAIN].count : 0, r->comm.world,
                                               is_main(r));
    check_data(r, used);
    if (a->do_train)  // the step counts, checked to fit, before --output_dir is made
        r->total_steps = run_plan_steps(&r->p, (long)used[SPLIT_TRAIN]->count, r->comm.world, &r->steps_per_epoch,
                                       &r->num_epochs);
    clamp_eval_batch(a, used);
    int plan_B, plan_S, plan_T;
    plan_shapes(r, used, &plan_B, &plan_S, &plan_T);
    *B = plan_B, *S = plan_S, *T = plan_T;
    // the plan of every stage for this run's shapes (the data's longest rows) and offload, ours marked
    const int offload = r->p.zopt.offload_optimizer && !r->p.zopt.inference;
    if (a->explain && is_main(r)) {
        estimate_print_table(a->model, &r->p.model_cfg, run_plan_dtype(&r->p), r->p.micro_batch, plan_S, plan_T,
                             a->gradient_checkpointing, r->comm.world, offload, r->p.zopt.inference, r->p.zopt.stage);
        if (a->explain_png) {  // the same plan as a picture (trainer/estimate_png.c)
            EstimateSetup es = {.model = a->model, .cfg = &r->p.model_cfg, .dt = run_plan_dtype(&r->p),
                                .batch = r->p.micro_batch, .S = plan_S, .T = plan_T,
                                .ckpt = a->gradient_checkpointing, .world = r->comm.world, .offload = offload,
                                .inference = r->p.zopt.inference};
            estimate_draw_png(&es, a->explain_png);
            printf("--explain_png: the plan drawn to %s\n", a->explain_png);
        }
        fflush(stdout);
    }
    if (a->find_max_batch && is_main(r)) {
        const Dataset *rows = used[SPLIT_TRAIN] ? used[SPLIT_TRAIN] : used[SPLIT_VAL] ? used[SPLIT_VAL] : used[SPLIT_TEST];
        long limit = rows ? (long)rows->count / r->comm.world : 1;
        long eval_rows = eval_split_rows(used);  // 0: no evaluation split, nothing cuts the batch
        plan_find_max_batch(r, &r->p.model_cfg, run_plan_dtype(&r->p), plan_S, plan_T, batch_bound(limit),
                            eval_rows ? batch_bound(eval_rows) : BATCH_SEARCH_MAX);
    }
    plan_check(r, &r->p.model_cfg, run_plan_dtype(&r->p), plan_B, plan_S, plan_T);
}

// The dry run (--explain): the ranks the launcher (or --num_gpus) would start, planned without
// starting or connecting any; rank 0 prints the plan for all (every rank's flags were checked).
static int trainer_explain(Run *r) {
    TrainArgs *a = &r->a;
    comm_init_dry(&r->comm, a->num_gpus);
    comm_check_dry(&r->comm, a->device);
    Dataset sets[SPLIT_COUNT] = {{0}};
    const Dataset *used[SPLIT_COUNT] = {NULL};
    if (is_main(r)) {
        int B, S, T;
        run_prepare(r, sets, used, &B, &S, &T);
        printf("--explain: dry run: flags, config and data checked; nothing trained, nothing written to %s\n",
               a->output_dir);
    }
    run_free(r, used);
    return 0;
}

// Every rank was started with the same settings: each rank's resolved flags (but the per-rank
// ones: --local_rank, paths) go to rank 0, which names the first difference; every rank stops
// on it. A launcher passes one command line to all, but hand-made launches (mpirun app
// contexts, per-node scripts) can differ, and ranks with another --learning_rate would train
// "fine" and exit 0. Collective.
static void check_ranks_agree(const Run *r) {
    if (r->comm.world == 1) return;
    char *mine = train_args_fingerprint(&r->a), *all = NULL;
    size_t *counts = is_main(r) ? mallocCheck((size_t)r->comm.world * sizeof(size_t)) : NULL;
    comm_gather_bytes_host(&r->comm, mine, strlen(mine) + 1, &all, counts);
    char msg[1200] = "";
    if (is_main(r)) {
        const char *other = all + counts[0];
        for (int k = 1; k < r->comm.world && !msg[0]; other += counts[k], k++) {
            if (!strcmp(mine, other)) continue;
            const char *a = mine, *b = other;  // the first differing line of each
            while (*a && *a == *b) {
                const char *na = strchr(a, '\n'), *nb = strchr(b, '\n');
                if (!na || !nb || na - a != nb - b || strncmp(a, b, (size_t)(na - a))) break;
                a = na + 1, b = nb + 1;
            }
            char who[96];
            snprintf(msg, sizeof msg, "%s was started with other settings than rank 0: %.*s (rank 0: %.*s); HINT: start "
                     "every rank with the same flags (a launcher passes one command line to all; only --local_rank "
                     "and the paths may differ)", comm_rank_words(&r->comm, k, who, sizeof who),
                     (int)strcspn(b, "\n"), b, (int)strcspn(a, "\n"), a);
        }
    }
    free(mine);
    freeCheck(all);
    freeCheck(counts);
    // rank 0 says which rank and flag, and no rank leaves before it has: a rank gone first would
    // be reported by the heartbeat ("ended unexpectedly") or stop the job under mpirun
    comm_agree_or_fail(&r->comm, msg);
}

// The GPU this rank runs on against what the run asks of it (bf16, TF32), before anything is
// read: one line naming the GPU. cuda_init has checked the binary's targets already.
static void check_rank_gpu(const Run *r) {
    if (strcmp(r->a.device, "cuda") != 0) return;
    GpuInfo g;
    if (device_gpu_info(r->comm.local_rank, &g)) train_args_check_gpu(&r->a, &g);
}

int trainer_main(int argc, char **argv, int start) {
    Run r;
    memset(&r, 0, sizeof r);
    r.argc = argc;  // for the command that continues a run a signal stopped
    r.argv = argv;
    r.arg_start = start;
    // everything that can be checked before the first byte is written, is; --output_dir is
    // created only after the data, the config and the memory plan have passed
    if (!startup_resolve(&r, argc, argv, start)) {
        train_args_print_help(1);
        return 0;
    }
    TrainArgs *a = &r.a;
    if (a->explain) return trainer_explain(&r);  // the dry run: no ranks started, nothing connected
    if (a->num_gpus > 0) return launch_spawn_ranks(a->num_gpus, argc, argv);  // the ranks redo all of this
    double nccl_timeout_s = ddp_timeout_seconds(a);
    // a random init made on the host would run on a helper thread from here, beside the
    // communicator, the data and the plan (load_model waits for it); run_load_options makes
    // it in place instead (device_init: model_weights_begin has nothing to do)
    ModelLoadOptions lo = run_load_options(&r, NULL);
    if (lo.init_random) r.weights_job = model_weights_begin(a->model, &r.p.model_cfg, 0, lo);
    comm_init(&r.comm);
    r.comm.nccl_timeout_s = nccl_timeout_s;
    comm_attach_device(&r.comm, a->device);  // GPU ranks: this rank's GPU (its targets checked) and NCCL
    check_ranks_agree(&r);                   // every rank started with the same settings
    check_rank_gpu(&r);                      // what the run asks of that GPU: bf16, TF32
    // node-local checkpoints: every host's copy completed from the others before anything loads
    if (a->resume_from_checkpoint && r.p.node_local && zero_checkpoint_has_shards(a->resume_from_checkpoint))
        zero_checkpoint_fetch_missing(a->resume_from_checkpoint, &r.comm);
    Dataset sets[SPLIT_COUNT] = {{0}};
    const Dataset *used[SPLIT_COUNT];
    int plan_B, plan_S, plan_T;
    run_prepare(&r, sets, used, &plan_B, &plan_S, &plan_T);
    load_model(&r, plan_B, plan_S, plan_T);
    if (is_main(&r)) output_dir_create(a);  // everything that can fail on the input has passed
    if (is_main(&r) && a->report_tensorboard) run_log_open_tensorboard(&r);
    run_tasks(&r, used);
    run_free(&r, used);
    return 0;
}
