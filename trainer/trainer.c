// trainer/trainer.c: the HF Trainer loop, evaluation and `train_t5 --do_train ...`'s main
// (see trainer.h and docs/TRAINER.md). The run's state is trainer/run.h; --deepspeed is
// applied in deepspeed.c; models, trainer_state.json and checkpoints are checkpoint.c's.
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
#include "../data/bleu.h"
#include "../data/collate.h"
#include "../data/sampler.h"
#include "../data/splits.h"
#include "../model/hf_dir.h"
#include "../model/generate.h"
#include "../model/load.h"
#include "../zero/checkpoint.h"
#include "../zero/comm.h"
#include "../zero/ds_config.h"
#include "../zero/partition.h"
#include "../zero/planner.h"
#include "../zero/step.h"
#include "args.h"
#include "run.h"
#include "device.h"
#include "estimate.h"
#include "output_dir.h"
#include "progress.h"


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
        if (encoder && !strncmp(p->name, "encoder.", 8)) p->frozen = 1;
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

static void log_entry(Run *r, cJSON *entry, int print) {
    if (strcmp(r->a.include_num_input_tokens_seen, "no") != 0) {  // HF's log(): before "step", keys sorted
        cJSON *step = cJSON_DetachItemFromObjectCaseSensitive(entry, "step");
        cJSON_AddNumberToObject(entry, "num_input_tokens_seen", r->input_tokens_seen);
        if (step) cJSON_AddItemToObject(entry, "step", step);
    }
    cJSON_AddItemToArray(r->log_history, entry);
    if (!print || !is_main(r)) return;
    char *text = cJSON_PrintUnformatted(entry);
    progress_log(&r->prog, text);
    cJSON_free(text);
}

// Write PREFIX_results.json with the metrics object (and merge it into all_results).
static void save_metrics(Run *r, const char *split, cJSON *metrics) {
    if (!is_main(r)) return;
    char name[64];
    snprintf(name, sizeof name, "%s_results.json", split);
    char *path = path_join(r->a.output_dir, name);
    json_save_atomic(metrics, path);
    free(path);
    cJSON *it;
    cJSON_ArrayForEach(it, metrics) {
        cJSON_DeleteItemFromObject(r->results, it->string);
        cJSON_AddItemToObject(r->results, it->string, cJSON_Duplicate(it, 1));
    }
    path = path_join(r->a.output_dir, "all_results.json");
    json_save_atomic(r->results, path);
    free(path);
    printf("***** %s metrics *****\n", split);
    cJSON_ArrayForEach(it, metrics) printf("  %-28s = %.6g\n", it->string, it->valuedouble);
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
    if (sets[SPLIT_TRAIN] && a->per_device_train_batch_size > B) B = a->per_device_train_batch_size;
    if ((sets[SPLIT_VAL] || sets[SPLIT_TEST]) && a->per_device_eval_batch_size > B) B = a->per_device_eval_batch_size;
    *B_out = B;
    *S_out = maxS;
    *T_out = maxT;
}

// This rank's memory plan at the run's ZeRO stage, world size and offload, checked against
// --max_gpu_memory BEFORE the model loads: a run that cannot fit stops with the figures
// and the cheapest change that would fit.
static void plan_check(Run *r, const T5Config *cfg, Dtype dt, int B, int S, int T) {
    const TrainArgs *a = &r->a;
    MemPlan plan = planner_memory_zero_opts(cfg, dt, B, S, T, a->gradient_checkpointing, &r->zopt, r->comm.world).gpu;
    if (is_main(r)) {
        printf("largest batch: %d x (source %d, target %d tokens), ZeRO stage %d over %d rank%s%s; ", B, S, T,
               r->zopt.stage, r->comm.world, r->comm.world > 1 ? "s" : "",
               r->zopt.offload_optimizer ? ", optimizer offloaded" : "");
        planner_print(&plan, a->max_gpu_memory);
    }
    const double G = 1073741824.0, cap = a->max_gpu_memory * G;
    if (a->max_gpu_memory <= 0 || (double)plan.total <= cap || strcmp(a->device, "cuda") != 0) return;
    double states = (double)(plan.params + plan.grads + plan.master + plan.moments);
    const char *hint = states > 0.6 * cap && !r->zopt.offload_optimizer
                           ? "the model states alone take most of it: offload the optimizer to host memory "
                             "(--deepspeed configs/ds_config_zero2_offload.json) or partition over more ranks"
                       : a->gradient_checkpointing
                           ? "lower --per_device_train_batch_size (and raise --gradient_accumulation_steps)"
                           : "add --gradient_checkpointing, or lower --per_device_train_batch_size";
    t5_fail("the run needs %.2f GiB on the GPU (model states %.2f GiB, activations %.2f GiB for batch %d) but "
            "--max_gpu_memory is %.1f GiB; HINT: %s", plan.total / G, states / G, plan.activations / G, B,
            a->max_gpu_memory, hint);
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
    const char *s = r->a.logging_strategy;
    if (!epoch_end && r->global_step == 1 && r->a.logging_first_step) return 1;
    if (!strcmp(s, "steps")) return !epoch_end && r->global_step % r->logging_every == 0;
    if (!strcmp(s, "epoch")) return epoch_end;
    return 0;
}

// As transformers 5.17: "steps" evaluates every eval_steps and at the last step, "epoch" at
// every epoch's end; neither before --eval_delay (a step, or an epoch).
static int should_eval(const Run *r, int epoch_end) {
    const char *s = r->a.eval_strategy;
    if (!strcmp(s, "steps"))
        return !epoch_end && r->a.eval_delay <= r->global_step &&
               (r->global_step % r->eval_every == 0 || r->global_step >= r->total_steps);
    if (!strcmp(s, "epoch")) return epoch_end && r->a.eval_delay <= r->epoch;
    return 0;
}

// As transformers 5.17's DefaultFlowCallback: "steps" saves every save_steps AND at the last
// step; "epoch" at every epoch's end, the last one included.
static int should_save(const Run *r, int epoch_end) {
    const char *s = r->a.save_strategy;
    if (!strcmp(s, "steps"))
        return !epoch_end && (r->global_step % r->save_every == 0 || r->global_step >= r->total_steps);
    if (!strcmp(s, "epoch")) return epoch_end;
    return 0;
}

static void run_eval_during_training(Run *r, const Dataset *val) {
    cJSON *met = trainer_evaluate(r, val, "eval", NULL);
    cJSON_AddNumberToObject(met, "epoch", r->epoch);
    cJSON_AddNumberToObject(met, "step", r->global_step);
    log_entry(r, met, 1);
}

int trainer_plan_steps(const TrainArgs *a, long N, int world, int *steps_per_epoch, int *num_epochs) {
    // every count here comes from user numbers: each is checked to fit before it is used
    long long B = a->per_device_train_batch_size, GA = a->gradient_accumulation_steps, batch;
    if (__builtin_mul_overflow(B * world, GA, &batch) || batch > INT_MAX)
        t5_fail("--per_device_train_batch_size %lld x --gradient_accumulation_steps %lld x %d rank%s is more than %d "
                "samples per optimizer step; HINT: lower --gradient_accumulation_steps", B, GA, world,
                world > 1 ? "s" : "", INT_MAX);
    long long micro = ((long long)N + B * world - 1) / (B * world);
    long long spe = (micro + GA - 1) / GA;
    if (spe < 1) spe = 1;
    if (spe > INT_MAX)
        t5_fail("%ld training examples in batches of %lld make %lld optimizer steps per epoch, more than %d; HINT: "
                "raise --per_device_train_batch_size or --gradient_accumulation_steps, or lower --n_train", N, B * world,
                spe, INT_MAX);
    long long total, epochs;
    if (a->max_steps > 0) {
        total = a->max_steps;
        epochs = (total + spe - 1) / spe;
    } else {
        double t = ceil(a->num_train_epochs * (double)spe);
        if (!(t <= INT_MAX))
            t5_fail("--num_train_epochs %g: %g epochs of %lld optimizer steps is %.4g steps, more than %d; HINT: lower "
                    "--num_train_epochs, or set --max_steps", a->num_train_epochs, a->num_train_epochs, spe, t, INT_MAX);
        total = (long long)t;
        epochs = (long long)ceil(a->num_train_epochs);
    }
    if (total < 1)  // a --do_train run that would train nothing (and save an untrained model) is an error
        t5_fail("--num_train_epochs %g / --max_steps %d make %lld optimizer steps: nothing would be trained; HINT: "
                "raise --num_train_epochs or --max_steps", a->num_train_epochs, a->max_steps, total);
    if (steps_per_epoch) *steps_per_epoch = (int)spe;
    if (num_epochs) *num_epochs = (int)epochs;
    return (int)total;
}

// fp32 and bf16 have no loss scaler to absorb an overflow (fp16 follows DeepSpeed's rules:
// zero/loss_scaler.c). A step whose loss or gradient norm is inf/nan is skipped (zero/step.c:
// no update, the weights stay as they were) and said; NONFINITE_STEPS_MAX of them in a row
// end the run before a model that cannot mean anything is saved. Every rank decides alike
// (the loss and the norm are global).
#define NONFINITE_STEPS_MAX 3
static void check_finite_step(const Run *r, const StepResult *sr, int *in_row) {
    if (r->a.fp16) return;
    if (isfinite(sr->loss) && !sr->skipped) {
        *in_row = 0;
        return;
    }
    const char *prec = r->a.bf16 ? "bf16" : "fp32";
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
            r->global_step, sr->loss, sr->grad_norm, NONFINITE_STEPS_MAX, prec, last, r->a.learning_rate);
}

// Test hook (tests/test_liveness.c): T5_TEST_STALL_RANK=R T5_TEST_STALL_S=S make rank R's
// main thread sleep S seconds after step 2, as a rank busy for minutes would (rank 0 saving
// a checkpoint while the others wait in a collective). The heartbeat must not end it.
static void test_hook_stall(const Run *r) {
    const char *who = getenv("T5_TEST_STALL_RANK"), *secs = getenv("T5_TEST_STALL_S");
    if (!who || !secs || atoi(who) != r->comm.rank) return;
    fflush(stdout);
    fprintf(stderr, "rank %d: T5_TEST_STALL_S: sleeping %s s after step %d\n", r->comm.rank, secs, r->global_step);
    sleep((unsigned)atoi(secs));
}

static void train(Run *r, const Dataset *ds, const Dataset *val) {
    const TrainArgs *a = &r->a;
    T5Model *m = &r->m;
    const int world = r->comm.world, rank = r->comm.rank;
    const int B = a->per_device_train_batch_size, GA = a->gradient_accumulation_steps;
    const long N = (long)ds->count;
    const long micro_per_epoch = (N + (long)B * world - 1) / ((long)B * world);
    // r->total_steps, steps_per_epoch, num_epochs: trainer_plan_steps, before --output_dir was made
    r->logging_every = every_n_steps(a->logging_steps, r->total_steps);
    r->eval_every = every_n_steps(a->eval_steps, r->total_steps);
    r->save_every = every_n_steps(a->save_steps, r->total_steps);
    SamplerType sampler;
    if (!sampler_parse(a->sampler, &sampler))
        t5_fail("--sampler \"%s\": expected random, sequential or sortish", a->sampler);

    LrSchedule sched = {.base_lr = a->learning_rate, .total_steps = r->total_steps};
    if (!lr_schedule_parse(a->lr_scheduler_type, &sched.type))
        t5_fail("--lr_scheduler_type \"%s\": expected linear, constant, constant_with_warmup or cosine",
                a->lr_scheduler_type);
    sched.warmup_steps = lr_schedule_warmup_steps(a->warmup_steps, a->warmup_ratio, r->total_steps);
    if (r->has_ds_sched) sched = r->ds_sched;  // the DeepSpeed config's scheduler
    // fp16: DeepSpeed's dynamic loss scaler with its defaults (initial_scale_power 16,
    // loss_scale_window 1000, hysteresis 2, min_loss_scale 1); others: no scaling
    LossScaler scaler = a->fp16 ? loss_scaler_dynamic(16, 1000, 2, 1.0, 0) : loss_scaler_static(1.0);
    if (a->fp16 && r->has_ds_scaler) scaler = r->ds_scaler;  // the config's fp16 block
    int resume_step = 0;  // steps already taken by the checkpoint: the loop walks past them without computing
    if (a->resume_from_checkpoint) {
        resume_step = trainer_load_state(r, a->resume_from_checkpoint);
        zero_load_optimizer(&r->zero, &scaler, a->resume_from_checkpoint, resume_step);
        r->zero.steps_seen = resume_step;  // the steps the checkpoint took (zero/step.c counts on)
        if (is_main(r)) printf("resuming from %s at step %d\n", a->resume_from_checkpoint, resume_step);
    }

    if (is_main(r)) printf("***** Running training *****  (%d rank%s)\n", world, world > 1 ? "s" : "");
    if (is_main(r)) {
    printf("  Num examples = %ld\n  Num epochs = %d\n  Instantaneous batch size per device = %d\n", N, r->num_epochs, B);
    printf("  Total train batch size (w. parallel & accumulation) = %lld\n", (long long)B * world * GA);
    printf("  Gradient accumulation steps = %d\n  Total optimization steps = %d\n", GA, r->total_steps);
    size_t trainable = 0;  // HF: get_model_param_count(trainable_only=True); --freeze_* leave some out
    for (int i = 0; i < m->lay.count; i++)
        if (!m->lay.specs[i].frozen) trainable += m->lay.specs[i].numel;
    printf("  Number of trainable parameters = %zu\n", trainable);
    fflush(stdout);
    }

    // HF's floating_point_ops counts parameters outside nn.Embedding modules: not
    // shared.weight (nor a tied head) and not the relative attention bias tables
    size_t nonembed = 0;
    for (int i = 0; i < m->lay.count; i++)
        if (m->lay.specs[i].kind != PARAM_EMBEDDING && m->lay.specs[i].kind != PARAM_RELBIAS)
            nonembed += m->lay.specs[i].numel;
    uint64_t *order = mallocCheck((size_t)N * sizeof(uint64_t));
    // a step holds at most GA micro-batches, and never more than an epoch has
    const int n_coll = (long)GA < micro_per_epoch ? GA : (int)micro_per_epoch;
    Collated *coll = callocCheck((size_t)n_coll, sizeof(Collated));
    T5Batch *micro = callocCheck((size_t)n_coll, sizeof(T5Batch));
    uint64_t *idx = mallocCheck((size_t)B * sizeof(uint64_t));
    progress_init(&r->prog, r->total_steps);
    if (!is_main(r) || a->disable_tqdm) r->prog.is_tty = 0;  // --disable_tqdm: the log lines, no bar
    int started = 0;  // --eval_on_start ran (before the first step this invocation computes)
    const uint64_t data_seed = (uint64_t)(a->data_seed >= 0 ? a->data_seed : a->seed);
    double t0 = now_seconds(), loss_since_log = 0, loss_total = 0;
    int steps_since_log = 0, nonfinite_in_row = 0;
    long samples = 0;
    for (int epoch = 0; epoch < r->num_epochs && r->global_step < r->total_steps; epoch++) {
        sampler_epoch_order(sampler, ds, data_seed, epoch, B * world, order);
        long k = 0;  // micro-batch index in the epoch
        while (k < micro_per_epoch && r->global_step < r->total_steps) {
            int n_micro = 0;
            if (r->global_step < resume_step) {  // resuming: this step is in the checkpoint already
                for (; n_micro < GA && k < micro_per_epoch; n_micro++) k++;
                r->global_step++;
                r->epoch = epoch + (double)k / (double)micro_per_epoch;
                continue;
            }
            if (!started && a->eval_on_start && val) run_eval_during_training(r, val);
            started = 1;
            for (; n_micro < GA && k < micro_per_epoch; n_micro++, k++) {
                long g0 = k * B * world, start = g0 + (long)rank * B;
                long g1 = g0 + (long)B * world < N ? g0 + (long)B * world : N;
                int nb = start < N ? (int)(N - start < B ? N - start : B) : 0;
                // the epoch's last global micro-batch may not reach this rank: it still runs
                // forward and backward (the ZeRO collectives need every rank) on one example
                // whose labels are all ignored, so it adds nothing to the loss or gradients
                int empty = nb == 0;
                if (empty) idx[0] = order[g0];
                for (int i = 0; i < nb; i++) idx[i] = order[start + i];
                collate_batch(&coll[n_micro], ds, idx, empty ? 1 : nb, a->max_source_length, a->max_target_length,
                              m->cfg.eos_token_id, m->cfg.pad_token_id, m->cfg.decoder_start_token_id);
                if (empty) {
                    T5Batch *eb = &coll[n_micro].batch;
                    for (int t = 0; t < eb->T; t++) coll[n_micro].labels[t] = -100;
                    t5_shift_right(coll[n_micro].labels, coll[n_micro].decoder_input_ids, 1, eb->T,
                                   m->cfg.decoder_start_token_id, m->cfg.pad_token_id);
                }
                micro[n_micro] = coll[n_micro].batch;
                samples += g1 - g0;  // the global micro-batch (every rank's slice)
                r->current_flos += 6.0 * nb * micro[n_micro].S * (double)nonembed;
            }
            // the step's global label tokens, counted by every rank from the global order (no
            // collective before the step): micro-batches k - n_micro .. k - 1, all ranks' slices
            long global_tokens = 0;
            for (long q = k - n_micro; q < k; q++) {
                long g0 = q * B * world, g1 = g0 + (long)B * world < N ? g0 + (long)B * world : N;
                global_tokens += collate_label_count(ds, order + g0, g1 - g0, a->max_target_length);
                // HF gathers every rank's count each step; each rank's slice is known here alike
                if (strcmp(a->include_num_input_tokens_seen, "no") != 0)
                    for (long s0 = g0; s0 < g1; s0 += B)
                        r->input_tokens_seen += (double)collate_source_count(
                            ds, order + s0, g1 - s0 < B ? g1 - s0 : B, a->max_source_length,
                            !strcmp(a->include_num_input_tokens_seen, "all"));
            }
            m->dropout_seed = (uint64_t)a->seed * 0x100000001B3ULL + (uint64_t)r->global_step;
            StepResult sr = zero_train_step_tokens(&r->zero, &sched, &scaler, micro, n_micro,
                                                   (float)a->label_smoothing_factor, global_tokens);
            r->global_step++;
            check_finite_step(r, &sr, &nonfinite_in_row);
            if (r->global_step == 2) test_hook_stall(r);
            r->epoch = epoch + (double)k / (double)micro_per_epoch;
            loss_since_log += sr.loss;
            loss_total += sr.loss;
            steps_since_log++;
            if (is_main(r)) progress_step(&r->prog, r->global_step, sr.loss, samples);
            int epoch_end = k == micro_per_epoch;
            if (should_log(r, 0) || (epoch_end && should_log(r, 1))) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "epoch", r->epoch);
                cJSON_AddNumberToObject(e, "grad_norm", sr.grad_norm);
                cJSON_AddNumberToObject(e, "learning_rate", sr.lr);  // the lr this update used, as HF 5.17 logs
                cJSON_AddNumberToObject(e, "loss", loss_since_log / steps_since_log);
                cJSON_AddNumberToObject(e, "step", r->global_step);
                if (a->fp16) {
                    cJSON_AddNumberToObject(e, "loss_scale", sr.loss_scale);
                    cJSON_AddNumberToObject(e, "skipped_steps", (double)scaler.skipped_steps);
                }
                log_entry(r, e, 1);
                loss_since_log = 0;
                steps_since_log = 0;
            }
            if (val && (should_eval(r, 0) || (epoch_end && should_eval(r, 1)))) run_eval_during_training(r, val);
            if (should_save(r, 0) || (epoch_end && should_save(r, 1))) trainer_save_checkpoint(r, &scaler);
        }
    }
    progress_done(&r->prog);
    if (is_main(r)) zero_stage3_print_stats(&r->zero);
    double rt = now_seconds() - t0;
    trainer_store_flos(r);  // collective: every rank's flos summed, as HF's store_flos
    // HF: samples = max_steps * total batch when max_steps is set, else epochs * N
    double n_samples = a->max_steps > 0 ? (double)r->total_steps * B * world * GA : a->num_train_epochs * N;
    cJSON *met = cJSON_CreateObject();
    cJSON_AddNumberToObject(met, "epoch", r->epoch);
    cJSON_AddNumberToObject(met, "total_flos", r->total_flos);
    cJSON_AddNumberToObject(met, "train_loss", loss_total / (r->global_step ? r->global_step : 1));
    cJSON_AddNumberToObject(met, "train_runtime", rt);
    cJSON_AddNumberToObject(met, "train_samples_per_second", rt > 0 ? n_samples / rt : 0);
    cJSON_AddNumberToObject(met, "train_steps_per_second", rt > 0 ? r->global_step / rt : 0);
    if (strncmp(m->be->name, "cuda", 4) == 0)
        cJSON_AddNumberToObject(met, "train_peak_gpu_memory_gib", m->be->mem_peak() / 1073741824.0);
    cJSON *entry = cJSON_Duplicate(met, 1);
    cJSON_AddNumberToObject(entry, "step", r->global_step);
    log_entry(r, entry, 0);
    trainer_save_model(r, r->a.output_dir);
    save_metrics(r, "train", met);
    cJSON_Delete(met);
    trainer_save_state(r, r->a.output_dir);
    for (int i = 0; i < n_coll; i++) collate_free(&coll[i]);
    free(coll);
    free(micro);
    free(idx);
    free(order);
}

// ---------------------------------------------------------------------------------

// --ddp_timeout: the NCCL watchdog's limit (zero/comm_nccl.cu reads T5_NCCL_TIMEOUT); the
// variable and a flag that disagree are an error naming both.
static void apply_ddp_timeout(const TrainArgs *a) {
    char want[32];
    snprintf(want, sizeof want, "%d", a->ddp_timeout);
    const char *env = getenv("T5_NCCL_TIMEOUT");
    if (env && atof(env) != (double)a->ddp_timeout) {
        if (a->ddp_timeout == 1800) return;  // the flag left at HF's default: the variable decides
        t5_fail("--ddp_timeout %d and T5_NCCL_TIMEOUT=%s contradict each other: drop one", a->ddp_timeout, env);
    }
    setenv("T5_NCCL_TIMEOUT", want, 1);
}

int trainer_main(int argc, char **argv, int start) {
    Run r;
    memset(&r, 0, sizeof r);
    r.a = train_args_default();
    train_args_parse(&r.a, argc, argv, start);
    TrainArgs *a = &r.a;
    if (a->help) {
        train_args_print_help(1);
        return 0;
    }
    // everything that can be checked before the first byte is written, is; --output_dir is
    // created only after the data, the config and the memory plan have passed
    if (a->deepspeed) {
        ds_config_load(&r.ds_loaded, a->deepspeed);
        train_args_take_ds_precision(a, &r.ds_loaded);  // fp16/bf16 "enabled": true in the file
    }
    train_args_check_device(a);  // the device, precision and --num_gpus, each named with its source
    r.data = (DataArgs){.data_dir = a->data_dir, .train_file = a->train_file, .validation_file = a->validation_file,
                        .test_file = a->test_file, .source_lang = a->source_lang, .target_lang = a->target_lang,
                        .task = a->task, .source_prefix = a->source_prefix,
                        .n = {a->n_train, a->n_val, a->n_test}};
    (void)data_source_prefix(&r.data);
    r.spm_path = resolve_spm_path(a);
    if (a->num_gpus > 0) return launch_spawn_ranks(a->num_gpus, argc, argv);  // the ranks redo all of this
    apply_ddp_timeout(a);
    comm_init(&r.comm);
    comm_attach_device(&r.comm, a->device);  // GPU ranks: this rank's GPU and the NCCL communicator
    if (is_main(&r)) {
        printf("device: %s (%s)\n", a->device, a->device_from);
        if (a->notices) printf("%s", a->notices);
        fflush(stdout);
        r.results = output_dir_check(a);  // and the all_results.json there, to merge into
    }
    if (!r.results) r.results = cJSON_CreateObject();
    r.spm = spm_load(r.spm_path);
    r.log_history = cJSON_CreateArray();

    Dataset train_ds = {0}, val_ds = {0}, test_ds = {0};
    int has_val = a->do_eval || strcmp(a->eval_strategy, "no") != 0;
    // rank 0 tokenizes into the cache first; the others then map the same files
    for (int pass = 0; pass < 2; pass++) {
        if ((pass == 0) == is_main(&r)) {
            if (a->do_train) data_open_split(&r.data, SPLIT_TRAIN, r.spm, a->cache_dir, &train_ds);
            if (has_val) data_open_split(&r.data, SPLIT_VAL, r.spm, a->cache_dir, &val_ds);
            if (a->do_predict) data_open_split(&r.data, SPLIT_TEST, r.spm, a->cache_dir, &test_ds);
        }
        if (pass == 0) comm_barrier(&r.comm);
    }
    // without --deepspeed: stage 0 with each unit's gradient all-reduced while backward
    // goes on, as PyTorch DDP does; a config says for itself (DeepSpeed's overlap_comm)
    r.zopt.overlap_comm = 1;
    if (a->deepspeed) trainer_apply_deepspeed(&r, a->do_train ? (long)train_ds.count : 0);
    T5Config mc;  // the model's shapes, before its weights load
    if (a->resume_from_checkpoint) trainer_check_resume_model(a);
    hf_resolve_model(a->resume_from_checkpoint ? a->resume_from_checkpoint : a->model, &mc);
    if (a->do_train) {
        check_vocab(&r, &train_ds, mc.vocab_size);
        long global = (long)a->per_device_train_batch_size;
        if ((long)train_ds.count < global)
            t5_fail("%s: %llu training examples, fewer than one batch (%ld); HINT: lower --per_device_train_batch_size",
                    train_ds.path, (unsigned long long)train_ds.count, global);
        // the step counts, checked to fit, before --output_dir is made
        r.total_steps = trainer_plan_steps(a, (long)train_ds.count, r.comm.world, &r.steps_per_epoch, &r.num_epochs);
    }
    // an eval batch larger than the split is the whole split in one batch: the same batches,
    // without sizing buffers for --per_device_eval_batch_size rows that never come
    long eval_rows = 1;
    if (has_val && (long)val_ds.count > eval_rows) eval_rows = (long)val_ds.count;
    if (a->do_predict && (long)test_ds.count > eval_rows) eval_rows = (long)test_ds.count;
    if ((has_val || a->do_predict) && a->per_device_eval_batch_size > eval_rows) a->per_device_eval_batch_size = (int)eval_rows;
    if (has_val) check_vocab(&r, &val_ds, mc.vocab_size);
    if (a->do_predict) check_vocab(&r, &test_ds, mc.vocab_size);
    if (a->explain && is_main(&r)) {  // the plan of every stage for this run's shapes, ours marked
        estimate_print_table(a->model, &mc, a->bf16 ? DTYPE_BF16 : a->fp16 ? DTYPE_F16 : DTYPE_F32,
                             a->per_device_train_batch_size, a->max_source_length, a->max_target_length,
                             a->gradient_checkpointing, r.comm.world, 0, r.zopt.stage);
        fflush(stdout);
    }
    const Dataset *const used[SPLIT_COUNT] = {a->do_train ? &train_ds : NULL, has_val ? &val_ds : NULL,
                                               a->do_predict ? &test_ds : NULL};
    int plan_B, plan_S, plan_T;
    plan_shapes(&r, used, &plan_B, &plan_S, &plan_T);
    plan_check(&r, &mc, a->bf16 ? DTYPE_BF16 : a->fp16 ? DTYPE_F16 : DTYPE_F32, plan_B, plan_S, plan_T);
    if (a->explain) {  // the dry run ends here: nothing loaded, nothing trained, nothing written
        if (is_main(&r))
            printf("--explain: dry run: flags, config and data checked; nothing trained, nothing written to %s\n",
                   a->output_dir);
        if (a->do_train) dataset_close(&train_ds);
        if (has_val) dataset_close(&val_ds);
        if (a->do_predict) dataset_close(&test_ds);
        cJSON_Delete(r.log_history);
        cJSON_Delete(r.results);
        spm_free(r.spm);
        free(r.spm_path);
        free(a->notices);
        comm_finalize(&r.comm);
        return 0;
    }
    // the weights stay on the host until zero_init places what the ZeRO stage keeps
    ModelLoadOptions lo = {.init_random = !strcmp(a->init, "random"), .seed = (unsigned long long)a->seed,
                           .defer_weights = 1};
    const Backend *be = device_backend(a->device, r.comm.local_rank, a->bf16, a->fp16, a->max_gpu_memory);
    if (a->resume_from_checkpoint) lo.init_random = 0;  // the checkpoint's weights (an HF directory)
    model_load(&r.m, a->resume_from_checkpoint ? a->resume_from_checkpoint : a->model, be, lo);
    if (a->dropout_rate >= 0) r.m.cfg.dropout_rate = r.m.dropout_p = (float)a->dropout_rate;
    if (a->freeze_embeds || a->freeze_encoder) apply_freeze(&r.m, a->freeze_embeds, a->freeze_encoder);
    // ZeRO: partition the model states over the ranks (stage 0 without --deepspeed); the
    // optimizer state only when training
    AdamWConfig oc = {.lr = (float)a->learning_rate, .beta1 = (float)a->adam_beta1, .beta2 = (float)a->adam_beta2,
                      .eps = (float)a->adam_epsilon, .weight_decay = (float)a->weight_decay,
                      .max_grad_norm = (float)a->max_grad_norm};
    zero_init(&r.zero, &r.m, &r.comm, &r.zopt, a->do_train ? &oc : NULL);
    if (a->deepspeed || r.comm.world > 1) zero_print_memory(&r.zero);
    r.m.gradient_checkpointing = a->gradient_checkpointing;
    t5_plan_activations(&r.m, plan_B, plan_S, plan_T);
    if (is_main(&r)) output_dir_create(a);  // everything that can fail on the input has passed
    if (a->do_train) train(&r, &train_ds, has_val ? &val_ds : NULL);
    if (a->do_eval) {
        cJSON *met = trainer_evaluate(&r, &val_ds, "eval", NULL);
        cJSON_AddNumberToObject(met, "epoch", r.epoch);
        cJSON_AddNumberToObject(met, "eval_samples", (double)val_ds.count);
        save_metrics(&r, "eval", met);
        cJSON_Delete(met);
    }
    if (a->do_predict) {
        char *pred_path = a->predict_with_generate ? path_join(a->output_dir, "generated_predictions.txt") : NULL;
        cJSON *met = trainer_evaluate(&r, &test_ds, "predict", pred_path);
        free(pred_path);
        cJSON_AddNumberToObject(met, "predict_samples", (double)test_ds.count);
        save_metrics(&r, "predict", met);
        cJSON_Delete(met);
    }
    if (a->do_train) dataset_close(&train_ds);
    if (has_val) dataset_close(&val_ds);
    if (a->do_predict) dataset_close(&test_ds);
    cJSON_Delete(r.log_history);
    cJSON_Delete(r.results);
    spm_free(r.spm);
    free(r.spm_path);
    free(a->notices);
    zero_free(&r.zero);
    t5_free(&r.m);
    comm_finalize(&r.comm);
    return 0;
}
