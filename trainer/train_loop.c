// trainer/train_loop.c: the HF Trainer training loop (see train_loop.h): the step schedule,
// micro-batches collated and counted, one optimizer step (zero/step.c), when to log,
// evaluate and save, non-finite losses, a stop signal's checkpoint and the command that
// continues it, the best model at the end.
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
#include "train_loop.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/t5_env.h"
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
    run_log_entry(r, met, 1);
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
        zero_resume_at_step(&r->zero, L->resume_step);  // the steps the checkpoint took
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
        run_log_entry(r, e, 1);
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
    trainer_load_model_from(r, r->best_model_checkpoint, be);
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
    run_log_entry(r, entry, 1);
    retention_after_training(r);  // --save_total_limit 1: the best checkpoint alone stays
    trainer_save_final(r, &L->scaler);
    run_log_save_metrics(r, "train", met);
    cJSON_Delete(met);
    trainer_save_state(r, r->a.output_dir, 0);
    train_free(L);
}

// Returns 1 when a stop signal ended it (checkpoint saved, nothing else to do), else 0.
int train_loop_run(Run *r, const Dataset *ds, const Dataset *val) {
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
