// trainer/trainer.c: the HF Trainer loop, evaluation and `train_t5 --do_train ...`'s main
// (see trainer.h and docs/TRAINER.md). The run's state is trainer/run.h; what it does is
// the run plan (plan.c, --deepspeed's part in deepspeed.c), resolved before anything is
// written; models, trainer_state.json and checkpoints are checkpoint.c's.
//
// Step arithmetic, as transformers' Trainer._inner_training_loop:
//   micro-batches per epoch  M = ceil(N / (B * world))        (no drop_last)
//   steps per epoch          S = ceil(M / GA)                  (the last step of an epoch may
//                                                              hold fewer micro-batches)
//   total steps              max_steps, or ceil(num_train_epochs * S)
//   logged epoch             epoch + (micro-batches done in the epoch) / M
// The sampler's order is global: micro-batch k of an epoch is order[k*B*world ...];
// rank r takes the r-th slice of B examples of it, so a step sees the same examples
// whatever the world size (ZeRO ranks: zero/zero.h).
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
#include "../model/hf_dir.h"
#include "gen_defaults.h"
#include "../model/generate.h"
#include "../model/load.h"
#include "../zero/checkpoint.h"
#include "../dist/comm.h"
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
// logging

// HF's Trainer.log: "epoch" (while training) and the input tokens are added, the callbacks
// see the record (the console line of ProgressCallback, TensorBoard's scalars), and
// log_history gets it with "step". `logs` is built in HF's key order by the caller; taken over.
static void log_entry(Run *r, cJSON *logs, int print) {
    double tokens = r->input_tokens_seen;
    log_record_add_hf_keys(logs, r->a.do_train ? &r->epoch : NULL,
                           strcmp(r->a.include_num_input_tokens_seen, "no") != 0 ? &tokens : NULL);
    if (is_main(r)) {
        if (print) {
            char *line = log_format_line(logs);
            progress_log(&r->prog, line);
            free(line);
        }
        tb_log(&r->tb, logs, r->global_step);
    }
    cJSON_AddNumberToObject(logs, "step", r->global_step);
    cJSON_AddItemToArray(r->log_history, logs);
}

// HF's evaluate() after training (run_translation's --do_eval) logs too: TensorBoard gets it,
// and PrinterCallback (--disable_tqdm) prints it; ProgressCallback does not (its training bar
// is closed). trainer_state.json was written already, as in HF. `met` is left as it was.
static void log_after_training(Run *r, const cJSON *met) {
    if (!is_main(r)) return;
    cJSON *logs = cJSON_Duplicate(met, 1);
    log_record_add_hf_keys(logs, r->a.do_train ? &r->epoch : NULL, NULL);
    if (r->a.disable_tqdm) {
        char *line = log_format_line(logs);
        progress_log(&r->prog, line);
        free(line);
    }
    tb_log(&r->tb, logs, r->global_step);
    cJSON_Delete(logs);
}

// --report_to tensorboard: the event file in the logging dir (trainer/tensorboard.h), rank 0.
static void open_tensorboard(Run *r) {
    char *dir = r->a.logging_dir ? path_join(r->a.logging_dir, "") : tb_default_logdir(r->a.output_dir);
    tb_open(&r->tb, dir);
    printf("TensorBoard: %s (tensorboard --logdir %s)\n", r->tb.path, dir);
    fflush(stdout);
    free(dir);
}

// Write PREFIX_results.json with the metrics object (and merge it into all_results).
static void save_metrics(Run *r, const char *split, cJSON *metrics) {
    if (!is_main(r)) return;
    char name[64];
    snprintf(name, sizeof name, "%s_results.json", split);
    char *path = path_join(r->a.output_dir, name);
    cJSON *sorted = json_sorted_copy(metrics);  // HF's save_metrics: sort_keys=True
    json_save_atomic(sorted, path);
    cJSON_Delete(sorted);
    free(path);
    cJSON *it;
    cJSON_ArrayForEach(it, metrics) {
        cJSON_DeleteItemFromObject(r->results, it->string);
        cJSON_AddItemToObject(r->results, it->string, cJSON_Duplicate(it, 1));
    }
    path = path_join(r->a.output_dir, "all_results.json");
    sorted = json_sorted_copy(r->results);
    json_save_atomic(sorted, path);
    cJSON_Delete(sorted);
    free(path);
    log_format_metrics(stdout, split, metrics);  // run_translation.py's trainer.log_metrics
    fflush(stdout);
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

// --logging_steps/--eval_steps/--save_steps in steps: below 1 a ratio of all steps, as
// transformers 5.17's TrainerState.compute_steps (ceil(total * ratio)).
static int every_n_steps(double v, int total) {
    if (v <= 0) return 1 << 30;  // unused (its strategy is not "steps")
    int n = v < 1 ? (int)ceil(v * total) : (int)v;
    return n < 1 ? 1 : n;
}

// As transformers 5.17's DefaultFlowCallback: step 1 with --logging_first_step, every
// logging_steps ("steps") or at every epoch's end ("epoch").
static int should_log(const Run *r, int epoch_end) {
    if (!epoch_end && r->global_step == 1 && r->a.logging_first_step) return 1;
    switch (r->p.logging) {
    case STRATEGY_STEPS: return !epoch_end && r->global_step % r->logging_every == 0;
    case STRATEGY_EPOCH: return epoch_end;
    default: return 0;
    }
}

// As transformers 5.17: "steps" evaluates every eval_steps and at the last step, "epoch" at
// every epoch's end; neither before --eval_delay (a step, or an epoch).
static int should_eval(const Run *r, int epoch_end) {
    switch (r->p.eval) {
    case STRATEGY_STEPS:
        return !epoch_end && r->a.eval_delay <= r->global_step &&
               (r->global_step % r->eval_every == 0 || r->global_step >= r->total_steps);
    case STRATEGY_EPOCH: return epoch_end && r->a.eval_delay <= r->epoch;
    default: return 0;
    }
}

// As transformers 5.17's DefaultFlowCallback: "steps" saves every save_steps AND at the last
// step; "epoch" at every epoch's end, the last one included.
static int should_save(const Run *r, int epoch_end) {
    switch (r->p.save) {
    case STRATEGY_STEPS: return !epoch_end && (r->global_step % r->save_every == 0 || r->global_step >= r->total_steps);
    case STRATEGY_EPOCH: return epoch_end;
    default: return 0;
    }
}

// An evaluation during training; track_best: it is one of _maybe_log_save_evaluate's, which
// --metric_for_best_model follows (--eval_on_start's is not, as in HF).
static void run_eval_during_training(Run *r, const Dataset *val, int track_best) {
    static int evaluated;
    if (!evaluated++) signals_test_hook("eval", r->comm.rank);
    cJSON *met = trainer_evaluate(r, val, "eval", NULL);
    if (track_best) retention_update_best(r, met);
    log_entry(r, met, 1);
}

// Test hook (tests/test_liveness.c): T5_TEST_STALL_RANK=R T5_TEST_STALL_S=S make rank R's
// main thread sleep S seconds after step 2, as a rank busy for minutes would (rank 0 saving
// a checkpoint while the others wait in a collective). The heartbeat must not end it.
static void test_hook_stall(const Run *r) {
    const char *who = t5_env_get(T5_ENV_TEST_STALL_RANK), *secs = t5_env_get(T5_ENV_TEST_STALL_S);
    if (!who || !secs || atoi(who) != r->comm.rank) return;
    fflush(stdout);
    fprintf(stderr, "rank %d: T5_TEST_STALL_S: sleeping %s s after step %d\n", r->comm.rank, secs, r->global_step);
    sleep((unsigned)atoi(secs));
}

// fp32 and bf16 have no loss scaler to absorb an overflow (fp16 follows DeepSpeed's rules:
// optim/loss_scaler.c). A step whose loss or gradient norm is inf/nan is skipped (zero/step.c:
// no update, the weights stay as they were) and said; NONFINITE_STEPS_MAX of them in a row
// end the run before a model that cannot mean anything is saved. Every rank decides alike
// (the loss and the norm are global).
#define NONFINITE_STEPS_MAX 3
static void check_finite_step(const Run *r, const StepResult *sr, int *in_row) {
    if (r->p.precision == PRECISION_FP16) return;
    if (isfinite(sr->loss) && !sr->skipped) {
        *in_row = 0;
        return;
    }
    const char *prec = r->p.precision == PRECISION_BF16 ? "bf16" : "fp32";
    if (++*in_row < NONFINITE_STEPS_MAX) {
        if (is_main(r))
            printf("WARNING: step %d: loss %g, gradient norm %g (%s has no loss scaler): the update is skipped; %d such "
                   "steps in a row stop the run\n", r->global_step, sr->loss, sr->grad_norm, prec, NONFINITE_STEPS_MAX);
        return;
    }
    char last[600];
    if (r->last_checkpoint_step > 0)
        snprintf(last, sizeof last, "%s/checkpoint-%d is the last checkpoint", r->a.output_dir, r->last_checkpoint_step);
    else
        snprintf(last, sizeof last, "no checkpoint was saved");
    t5_fail("training step %d: the loss (%g) or the gradient norm (%g) was inf/nan in %d steps in a row in %s: the run "
            "stops without saving the model (%s); HINT: lower --learning_rate (%g), and check the weights and the data",
            r->global_step, sr->loss, sr->grad_norm, NONFINITE_STEPS_MAX, prec, last, r->p.lr);
}

// The training loop's state across steps, shared by train()'s pieces.
typedef struct {
    const Dataset *ds, *val;
    int B, GA, world, rank;
    long N, micro_per_epoch;
    LrSchedule sched;
    LossScaler scaler;
    int resume_step;      // steps already taken by the checkpoint: the loop walks past them without computing
    size_t nonembed;      // HF's floating_point_ops: parameters outside nn.Embedding modules
    uint64_t *order;      // (N) this epoch's global order
    Collated *coll;       // (GA) this step's micro-batches
    T5Batch *micro;       // (GA)
    uint64_t *idx;        // (B) this rank's slice of a micro-batch
    uint64_t data_seed;
    int started;          // --eval_on_start ran (before the first step this invocation computes)
    double t0, loss_since_log, loss_total;
    int steps_since_log;
    int n_coll;           // micro-batch buffers: GA, or fewer when an epoch has fewer micro-batches
    int nonfinite_in_row; // fp32/bf16 steps in a row with an inf/nan loss or gradient (check_finite_step)
    long samples;
    int stopped;          // a stop signal ended the loop (trainer/signals.h): checkpoint saved, no train_end
} TrainLoop;

// The schedule (the DeepSpeed config's when it has one) and the loss scaler.
static void train_schedule(const Run *r, TrainLoop *L) {
    const RunPlan *p = &r->p;
    L->sched = (LrSchedule){.type = p->lr_type, .base_lr = p->lr, .total_steps = r->total_steps};
    L->sched.warmup_steps = lr_schedule_warmup_steps(p->warmup_steps, p->warmup_ratio, r->total_steps);
    if (p->has_ds_sched) L->sched = p->ds_sched;  // the DeepSpeed config's scheduler
    // fp16: DeepSpeed's dynamic loss scaler with its defaults (initial_scale_power 16,
    // loss_scale_window 1000, hysteresis 2, min_loss_scale 1); others: no scaling
    int fp16 = p->precision == PRECISION_FP16;
    L->scaler = fp16 ? loss_scaler_dynamic(16, 1000, 2, 1.0, 0) : loss_scaler_static(1.0);
    if (fp16 && p->has_ds_scaler) L->scaler = p->ds_scaler;  // the config's fp16 block
}

static void train_print_header(const Run *r, const TrainLoop *L) {
    if (!is_main(r)) return;
    printf("***** Running training *****  (%d rank%s)\n", L->world, L->world > 1 ? "s" : "");
    printf("  Num examples = %ld\n  Num epochs = %d\n  Instantaneous batch size per device = %d\n", L->N,
           r->num_epochs, L->B);
    printf("  Total train batch size (w. parallel & accumulation) = %lld\n", (long long)L->B * L->world * L->GA);
    printf("  Gradient accumulation steps = %d\n  Total optimization steps = %d\n", L->GA, r->total_steps);
    size_t trainable = 0;  // HF: get_model_param_count(trainable_only=True); --freeze_* leave some out
    for (int i = 0; i < r->m.lay.count; i++)
        if (!r->m.lay.specs[i].frozen) trainable += r->m.lay.specs[i].numel;
    printf("  Number of trainable parameters = %zu\n", trainable);
    fflush(stdout);
}

static void train_begin(Run *r, TrainLoop *L, const Dataset *ds, const Dataset *val) {
    const TrainArgs *a = &r->a;
    memset(L, 0, sizeof *L);
    L->ds = ds;
    L->val = val;
    L->world = r->comm.world;
    L->rank = r->comm.rank;
    L->B = r->p.micro_batch;
    L->GA = r->p.grad_accum;
    L->N = (long)ds->count;
    L->micro_per_epoch = (L->N + (long)L->B * L->world - 1) / ((long)L->B * L->world);
    // r->total_steps, steps_per_epoch, num_epochs: run_plan_steps, before --output_dir was made
    r->logging_every = every_n_steps(a->logging_steps, r->total_steps);
    r->eval_every = every_n_steps(a->eval_steps, r->total_steps);
    r->save_every = every_n_steps(a->save_steps, r->total_steps);
    train_schedule(r, L);
    signals_install();  // SIGTERM, SIGINT, SIGUSR1: finish the step, save checkpoint-N, exit 0
    signals_test_hook("begin", r->comm.rank);
    if (a->resume_from_checkpoint) {
        L->resume_step = trainer_load_state(r, a->resume_from_checkpoint);
        zero_ckpt_mem_begin();
        retention_load_state(r, a->resume_from_checkpoint);  // best_metric, best_global_step, best_model_checkpoint
        zero_load_optimizer(&r->zero, &L->scaler, a->resume_from_checkpoint, L->resume_step);
        zero_ckpt_mem_report(&r->zero, "load");
        r->zero.steps_seen = L->resume_step;  // the steps the checkpoint took (zero/step.c counts on)
        if (is_main(r)) printf("resuming from %s at step %d\n", a->resume_from_checkpoint, L->resume_step);
    }
    train_print_header(r, L);
    // HF's floating_point_ops counts parameters outside nn.Embedding modules: not
    // shared.weight (nor a tied head) and not the relative attention bias tables
    const ParamLayout *lay = &r->m.lay;
    for (int i = 0; i < lay->count; i++)
        if (lay->specs[i].kind != PARAM_EMBEDDING && lay->specs[i].kind != PARAM_RELBIAS)
            L->nonembed += lay->specs[i].numel;
    L->order = mallocCheck((size_t)L->N * sizeof(uint64_t));
    // a step holds at most GA micro-batches, and never more than an epoch has
    L->n_coll = (long)L->GA < L->micro_per_epoch ? L->GA : (int)L->micro_per_epoch;
    L->coll = callocCheck((size_t)L->n_coll, sizeof(Collated));
    L->micro = callocCheck((size_t)L->n_coll, sizeof(T5Batch));
    L->idx = mallocCheck((size_t)L->B * sizeof(uint64_t));
    if (a->deepspeed)  // the monitors, the comms logger, the flops profiler's step (trainer/ds_blocks.h)
        ds_blocks_begin(&r->dsb, &r->p.ds_loaded, &r->comm, r->zero.opt.step);
    progress_init(&r->prog, r->total_steps);
    if (!is_main(r) || a->disable_tqdm) r->prog.is_tty = 0;  // --disable_tqdm: the log lines, no bar
    L->data_seed = (uint64_t)(a->data_seed >= 0 ? a->data_seed : a->seed);
    L->t0 = now_seconds();
}

// Micro-batch k of the epoch, this rank's slice, collated into L->coll[n].
static void train_collate_micro(Run *r, TrainLoop *L, long k, int n) {
    const T5Config *cfg = &r->m.cfg;
    const long B = L->B, N = L->N;
    long g0 = k * B * L->world, start = g0 + (long)L->rank * B;
    long g1 = g0 + B * L->world < N ? g0 + B * L->world : N;
    int nb = start < N ? (int)(N - start < B ? N - start : B) : 0;
    // the epoch's last global micro-batch may not reach this rank: it still runs
    // forward and backward (the ZeRO collectives need every rank) on one example
    // whose labels are all ignored, so it adds nothing to the loss or gradients
    int empty = nb == 0;
    if (empty) L->idx[0] = L->order[g0];
    for (int i = 0; i < nb; i++) L->idx[i] = L->order[start + i];
    collate_batch(&L->coll[n], L->ds, L->idx, empty ? 1 : nb, r->a.max_source_length, r->a.max_target_length,
                  cfg->eos_token_id, cfg->pad_token_id, cfg->decoder_start_token_id);
    if (empty) {
        T5Batch *eb = &L->coll[n].batch;
        for (int t = 0; t < eb->T; t++) L->coll[n].labels[t] = -100;
        t5_shift_right(L->coll[n].labels, L->coll[n].decoder_input_ids, 1, eb->T, cfg->decoder_start_token_id,
                       cfg->pad_token_id);
    }
    L->micro[n] = L->coll[n].batch;
    L->samples += g1 - g0;  // the global micro-batch (every rank's slice)
    r->current_flos += 6.0 * nb * L->micro[n].S * (double)L->nonembed;
}

// The step's global label tokens, counted by every rank from the global order (no
// collective before the step): micro-batches k - n_micro .. k - 1, all ranks' slices.
static long train_global_tokens(const Run *r, const TrainLoop *L, long k, int n_micro) {
    long global_tokens = 0, BW = (long)L->B * L->world;
    for (long q = k - n_micro; q < k; q++) {
        long g0 = q * BW, g1 = g0 + BW < L->N ? g0 + BW : L->N;
        global_tokens += collate_label_count(L->ds, L->order + g0, g1 - g0, r->a.max_target_length);
    }
    return global_tokens;
}

// --include_num_input_tokens_seen all|non_padding: the input tokens of the step's
// micro-batches, all ranks' slices (HF gathers every rank's count each step; each rank's slice
// is known here alike).
static void train_count_input_tokens(Run *r, const TrainLoop *L, long k, int n_micro) {
    const char *how = r->a.include_num_input_tokens_seen;
    if (!strcmp(how, "no")) return;
    long BW = (long)L->B * L->world;
    for (long q = k - n_micro; q < k; q++) {
        long g0 = q * BW, g1 = g0 + BW < L->N ? g0 + BW : L->N;
        for (long s0 = g0; s0 < g1; s0 += L->B)
            r->input_tokens_seen += (double)collate_source_count(L->ds, L->order + s0, g1 - s0 < L->B ? g1 - s0 : L->B,
                                                                 r->a.max_source_length, !strcmp(how, "all"));
    }
}

// checkpoint-N (--save_steps, --save_strategy epoch, a stop signal): best_model_checkpoint is
// named first (it goes into the checkpoint's trainer_state.json), --save_total_limit after.
// --overwrite_output_dir: the earlier run's checkpoints go once this run has its first one
// (keep_step) or ends without any (-1); before, a failing run leaves them as they were.
static void clear_earlier_checkpoints(Run *r, int keep_step) {
    if (r->earlier_cleared) return;
    r->earlier_cleared = 1;
    if (r->p.node_local ? comm_is_host_leader(&r->comm) : is_main(r)) output_dir_clear_checkpoints(&r->a, keep_step);
}

static void train_save_checkpoint(Run *r, TrainLoop *L) {
    retention_before_save(r);
    trainer_save_checkpoint(r, &L->scaler);
    clear_earlier_checkpoints(r, r->global_step);  // before the rotation counts checkpoints
    retention_rotate(r);
}

// After a step: the log entry, evaluation and checkpoint its strategies ask for.
static void train_after_step(Run *r, TrainLoop *L, const StepResult *sr, int epoch_end) {
    L->loss_since_log += sr->loss;
    L->loss_total += sr->loss;
    L->steps_since_log++;
    if (is_main(r)) progress_step(&r->prog, r->global_step, sr->loss, L->samples);
    if (should_log(r, 0) || (epoch_end && should_log(r, 1))) {
        cJSON *e = cJSON_CreateObject();  // HF's order (_maybe_log_save_evaluate); log_entry adds epoch, step
        cJSON_AddNumberToObject(e, "loss", L->loss_since_log / L->steps_since_log);
        cJSON_AddNumberToObject(e, "grad_norm", sr->grad_norm);
        cJSON_AddNumberToObject(e, "learning_rate", sr->lr);  // the lr this update used, as HF 5.17 logs
        if (r->p.precision == PRECISION_FP16) {
            cJSON_AddNumberToObject(e, "loss_scale", sr->loss_scale);
            cJSON_AddNumberToObject(e, "skipped_steps", (double)L->scaler.skipped_steps);
        }
        log_entry(r, e, 1);
        L->loss_since_log = 0;
        L->steps_since_log = 0;
    }
    if (L->val && (should_eval(r, 0) || (epoch_end && should_eval(r, 1)))) run_eval_during_training(r, L->val, 1);
    if (should_save(r, 0) || (epoch_end && should_save(r, 1))) train_save_checkpoint(r, L);
}

// A shell word for the command line that continues a run: quoted when it holds anything
// but [A-Za-z0-9_./=:,+@%-].
static size_t shell_word(char *out, size_t cap, const char *w) {
    int plain = *w != '\0';
    for (const char *p = w; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+@%-", *p)) plain = 0;
    if (plain) return (size_t)snprintf(out, cap, " %s", w);
    size_t n = (size_t)snprintf(out, cap, " '");
    for (const char *p = w; *p && n < cap; p++)
        n += (size_t)(*p == '\'' ? snprintf(out + n, cap - n, "'\\''") : snprintf(out + n, cap - n, "%c", *p));
    return n < cap ? n + (size_t)snprintf(out + n, cap - n, "'") : n;
}

// The command that continues from checkpoint `ckpt`: this one's, with --resume_from_checkpoint
// set to it (and --num_gpus put back: its ranks' command lines lack it). malloc'd.
static char *continue_command(const Run *r, const char *ckpt) {
    size_t cap = 64 + 2 * strlen(ckpt);
    for (int i = 0; i < r->argc; i++) cap += 4 * strlen(r->argv[i]) + 4;
    char *cmd = mallocCheck(cap);
    size_t n = 0;
    cmd[0] = '\0';
    for (int i = 0; i < r->argc && n < cap; i++) {
        const char *w = r->argv[i];
        if (i >= r->arg_start && !strcmp(w, "--resume_from_checkpoint")) {
            i++;  // its value goes too
            continue;
        }
        if (i >= r->arg_start && !strncmp(w, "--resume_from_checkpoint=", 25)) continue;
        n += shell_word(cmd + n, cap - n, w);
    }
    const char *launcher = t5_env_get(T5_ENV_LAUNCHER);
    if (launcher && !strcmp(launcher, "num_gpus") && n < cap) n += (size_t)snprintf(cmd + n, cap - n, " --num_gpus %d", r->comm.world);
    if (n < cap) n += (size_t)snprintf(cmd + n, cap - n, " --resume_from_checkpoint");
    if (n < cap) shell_word(cmd + n, cap - n, ckpt);
    return cmd;
}

// A stop signal reached some rank (signals_agree_stop, every rank alike): checkpoint-N as
// --save_steps writes it (unless this step saved one already), nothing left in flight, and
// how to continue. The loop then ends without train_end; trainer_main exits 0.
static void train_stop(Run *r, TrainLoop *L, const char *what) {
    if (r->last_checkpoint_step != r->global_step) train_save_checkpoint(r, L);
    zero_sync(&r->zero);  // the offloaded update's thread and the collectives have finished
    L->stopped = 1;
    if (!is_main(r)) return;
    progress_done(&r->prog);
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d", r->global_step);
    char *ckpt = path_join(r->a.output_dir, name);
    char *cmd = continue_command(r, ckpt);
    printf("train_t5: stopped by %s after step %d of %d: the checkpoint is %s%s\n", what, r->global_step,
           r->total_steps, ckpt, r->a.save_only_model ? " (--save_only_model: the model only, it cannot be resumed)" : "");
    if (!r->a.save_only_model) {
        printf("To continue:%s\n", cmd);
        if (r->comm.world > 1 && strcmp(r->comm.launcher, "num_gpus") != 0)  // its command line is this rank's
            printf("(started by %s with %d ranks: continue the same way)\n", r->comm.launcher, r->comm.world);
        if (!r->a.overwrite_output_dir)
            printf("(the same command without --resume_from_checkpoint continues too: it resumes from the last "
                   "checkpoint in --output_dir)\n");
    }
    fflush(stdout);
    free(cmd);
    free(ckpt);
}

// One optimizer step from micro-batch *k of `epoch` on (or, resuming, walking past one).
static void train_step(Run *r, TrainLoop *L, int epoch, long *k) {
    int n_micro = 0;
    if (r->global_step < L->resume_step) {  // resuming: this step is in the checkpoint already
        for (; n_micro < L->GA && *k < L->micro_per_epoch; n_micro++) (*k)++;
        r->global_step++;
        r->epoch = epoch + (double)*k / (double)L->micro_per_epoch;
        return;
    }
    if (!L->started && r->a.eval_on_start && L->val) run_eval_during_training(r, L->val, 0);
    L->started = 1;
    for (; n_micro < L->GA && *k < L->micro_per_epoch; n_micro++, (*k)++) train_collate_micro(r, L, *k, n_micro);
    long global_tokens = train_global_tokens(r, L, *k, n_micro);
    train_count_input_tokens(r, L, *k, n_micro);
    r->m.dropout_seed = (uint64_t)r->a.seed * 0x100000001B3ULL + (uint64_t)r->global_step;
    const DsConfig *ds = &r->p.ds_loaded;
    if (r->a.deepspeed) ds_blocks_step_begin(&r->dsb, ds, &r->m, r->p.device == DEVICE_CUDA, r->comm.rank, r->global_step);
    StepResult sr = zero_train_step_tokens(&r->zero, &L->sched, &L->scaler, L->micro, n_micro,
                                           (float)r->a.label_smoothing_factor, global_tokens);
    r->global_step++;
    if (r->a.deepspeed)  // DeepSpeed's global_samples: train_batch_size per step
        ds_blocks_step_end(&r->dsb, ds, &r->m, &r->zero, sr.skipped, &L->sched, r->p.precision == PRECISION_FP16,
                           L->scaler.cur_scale, (long long)r->global_step * L->B * L->world * L->GA);
    check_finite_step(r, &sr, &L->nonfinite_in_row);
    if (r->global_step == 2) test_hook_stall(r);
    char where[32];
    snprintf(where, sizeof where, "step%d", r->global_step);
    signals_test_hook(where, r->comm.rank);
    r->epoch = epoch + (double)*k / (double)L->micro_per_epoch;
    train_after_step(r, L, &sr, *k == L->micro_per_epoch);
    // every step: did a stop signal reach any rank? (one all-reduce of three numbers; the last
    // step needs none: training ends there anyway)
    char what[160];
    if (r->global_step < r->total_steps && signals_agree_stop(&r->comm, what, sizeof what)) train_stop(r, L, what);
}

static void load_model_from(Run *r, const char *dir, const Backend *be);

// --load_best_model_at_end (HF's _load_best_model): the best checkpoint's fp32 weights
// replace the trained ones on every rank, loaded as a resumed run loads them (the ZeRO state
// set up again, with fresh moments that nothing uses any more).
static void load_best_model(Run *r) {
    if (is_main(r)) {
        char line[1200], score[40];
        pyfloat_repr(r->best_metric, score, sizeof score);  // HF's f"{best_metric}"
        snprintf(line, sizeof line, "Loading best model from %s (score: %s).", r->best_model_checkpoint, score);
        progress_log(&r->prog, line);
    }
    const Backend *be = r->m.be;
    zero_free(&r->zero);
    t5_free(&r->m);
    memset(&r->zero, 0, sizeof r->zero);
    memset(&r->m, 0, sizeof r->m);
    load_model_from(r, r->best_model_checkpoint, be);
}

static void train_free(TrainLoop *L) {
    for (int i = 0; i < L->n_coll; i++) collate_free(&L->coll[i]);
    free(L->coll);
    free(L->micro);
    free(L->idx);
    free(L->order);
}

// The train metrics, the model and trainer_state.json; the loop's buffers freed.
static void train_end(Run *r, TrainLoop *L) {
    progress_done(&r->prog);
    clear_earlier_checkpoints(r, -1);
    ds_blocks_end(&r->dsb, &r->comm);
    if (is_main(r)) zero_stage3_print_stats(&r->zero);
    if (r->a.load_best_model_at_end && r->best_model_checkpoint) load_best_model(r);  // before the final save
    double rt = now_seconds() - L->t0;
    trainer_store_flos(r);  // collective: every rank's flos summed, as HF's store_flos
    // HF: samples = max_steps * total batch when max_steps is set, else epochs * N
    double n_samples = r->p.max_steps > 0 ? (double)r->total_steps * L->B * L->world * L->GA
                                          : r->p.num_train_epochs * L->N;
    // HF's order (speed_metrics, rounded as it rounds them; total_flos; train_loss); Trainer.log adds epoch
    cJSON *entry = cJSON_CreateObject();
    cJSON_AddNumberToObject(entry, "train_runtime", pyfloat_round(rt, 4));
    cJSON_AddNumberToObject(entry, "train_samples_per_second", rt > 0 ? pyfloat_round(n_samples / rt, 3) : 0);
    cJSON_AddNumberToObject(entry, "train_steps_per_second", rt > 0 ? pyfloat_round(r->global_step / rt, 3) : 0);
    if (r->p.device == DEVICE_CUDA)
        cJSON_AddNumberToObject(entry, "train_peak_gpu_memory_gib", r->m.be->mem_peak() / 1073741824.0);
    cJSON_AddNumberToObject(entry, "total_flos", r->total_flos);
    cJSON_AddNumberToObject(entry, "train_loss", L->loss_total / (r->global_step ? r->global_step : 1));
    cJSON *met = cJSON_Duplicate(entry, 1);  // train_results.json: the same keys, with epoch
    cJSON_AddNumberToObject(met, "epoch", r->epoch);
    log_entry(r, entry, 1);
    retention_after_training(r);  // --save_total_limit 1: the best checkpoint alone stays
    trainer_save_final(r, &L->scaler);
    save_metrics(r, "train", met);
    cJSON_Delete(met);
    trainer_save_state(r, r->a.output_dir, 0);
    train_free(L);
}

// Returns 1 when a stop signal ended it (checkpoint saved, nothing else to do), else 0.
static int train(Run *r, const Dataset *ds, const Dataset *val) {
    TrainLoop L;
    train_begin(r, &L, ds, val);
    for (int epoch = 0; epoch < r->num_epochs && r->global_step < r->total_steps && !L.stopped; epoch++) {
        sampler_epoch_order(r->p.sampler, ds, L.data_seed, epoch, L.B * L.world, L.order);
        long k = 0;  // micro-batch index in the epoch
        while (k < L.micro_per_epoch && r->global_step < r->total_steps && !L.stopped) train_step(r, &L, epoch, &k);
    }
    if (L.stopped) {
        ds_blocks_end(&r->dsb, &r->comm);
        train_free(&L);
        return 1;
    }
    train_end(r, &L);
    // a signal during the last step or the final save: the model is saved; the evaluations
    // after training are skipped (every rank alike)
    char what[160];
    if (signals_agree_stop(&r->comm, what, sizeof what)) {
        if (is_main(r)) {
            printf("train_t5: stopped by %s after training finished: the model is saved in %s; --do_eval/--do_predict "
                   "are skipped\n", what, r->a.output_dir);
            fflush(stdout);
        }
        return 1;
    }
    signals_uninstall();  // evaluation and prediction end at a signal, as any program does
    return 0;
}
// ---------------------------------------------------------------------------------

// --ddp_timeout: the NCCL watchdog's limit, handed to the communicator (Comm.nccl_timeout_s).
// T5_NCCL_TIMEOUT (a launcher's setting for every rank) decides when the flag is left at HF's
// default; the two set to different values are an error naming both. Returns 0 for "the
// variable decides" (dist/comm_nccl.cu reads it then).
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

// The model's weights stay on the host until zero_init places what the ZeRO stage keeps;
// ZeRO partitions the model states over the ranks (stage 0 without --deepspeed), the
// optimizer state only when training.
// dir NULL: the run's model (--model, or the checkpoint resumed); else the weights of
// checkpoint dir (--load_best_model_at_end), on the backend be that is open already.
static void load_model_from(Run *r, const char *dir, const Backend *be) {
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
    if (!r->m.inference) {  // keep what backward would recompute when the plan has room (zero/planner.h)
        size_t keep = t5_keep_bytes(&r->m.cfg, be->act_dtype, B, S, T, a->gradient_checkpointing, a->checkpoint_sub_batch);
        r->m.keep_sublayer_acts = planner_keep_sublayer_acts(be, r->plan_total, keep);
        if (is_main(r))
            planner_print_keep(be, r->m.keep_sublayer_acts, r->plan_total, keep, a->gradient_checkpointing,
                               a->checkpoint_sub_batch);
    }
    t5_plan_activations(&r->m, B, S, T);
}

static void load_model(Run *r, int B, int S, int T) {
    r->plan_B = B;  // the activation plan's shapes, again for --load_best_model_at_end
    r->plan_S = S;
    r->plan_T = T;
    load_model_from(r, NULL, NULL);
}

// --do_train, --do_eval, --do_predict in HF's order.
static void run_tasks(Run *r, const Dataset *const used[SPLIT_COUNT]) {
    const TrainArgs *a = &r->a;
    if (a->do_train && train(r, used[SPLIT_TRAIN], used[SPLIT_VAL])) return;  // stopped by a signal
    if (a->do_eval) {
        cJSON *met = trainer_evaluate(r, used[SPLIT_VAL], "eval", NULL);
        log_after_training(r, met);
        cJSON_AddNumberToObject(met, "epoch", r->epoch);
        cJSON_AddNumberToObject(met, "eval_samples", (double)used[SPLIT_VAL]->count);
        save_metrics(r, "eval", met);
        cJSON_Delete(met);
    }
    if (a->do_predict) {
        char *pred_path = a->predict_with_generate ? path_join(a->output_dir, "generated_predictions.txt") : NULL;
        cJSON *met = trainer_evaluate(r, used[SPLIT_TEST], "predict", pred_path);
        free(pred_path);
        cJSON_AddNumberToObject(met, "predict_samples", (double)used[SPLIT_TEST]->count);
        save_metrics(r, "predict", met);
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
    if (is_main(&r) && a->report_tensorboard) open_tensorboard(&r);
    run_tasks(&r, used);
    run_free(&r, used);
    return 0;
}
