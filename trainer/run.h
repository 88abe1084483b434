// trainer/run.h: the state of one `train_t5 --do_train ...` run, shared by the rooms of the
// trainer: trainer.c (the loop, evaluation, main), plan.c and deepspeed.c (the run plan:
// flags and --deepspeed resolved before anything is written), checkpoint.c (model,
// trainer_state.json and resumable checkpoints), retention.c (which checkpoints stay, the best
// model), signals.c (a run stopped by SIGTERM/SIGINT/SIGUSR1 after its step).
#pragma once
#include <cjson/cJSON.h>

#include "../data/splits.h"
#include "../data/tokenize.h"
#include "../model/t5.h"
#include "../comm/comm.h"
#include "../deepspeed/ds_config.h"
#include "../optim/loss_scaler.h"
#include "../optim/lr_schedule.h"
#include "../zero/zero.h"
#include "args.h"
#include "ds_blocks.h"
#include "plan.h"
#include "progress.h"
#include "tensorboard.h"

typedef struct {
    TrainArgs a;         // the flags as given, with HF's defaults (and --deepspeed's fp16/bf16 "enabled": true)
    RunPlan p;           // what the run does: the flags and --deepspeed resolved (plan.h)
    DataArgs data;
    T5Model m;
    Spm *spm;
    char *spm_path;
    cJSON *log_history;  // trainer_state.json's log_history
    cJSON *results;      // all_results.json
    int global_step, total_steps, steps_per_epoch, num_epochs;
    int logging_every, eval_every, save_every;  // --*_steps in steps (a ratio resolved against total_steps)
    double total_flos;   // HF's estimate: 6 * input tokens * non-embedding parameters, all ranks
    double current_flos; // this rank's since the last store (HF's current_flos; trainer_store_flos)
    double input_tokens_seen;  // HF's num_input_tokens_seen, all ranks (--include_num_input_tokens_seen)
    int last_checkpoint_step;  // the step of the last checkpoint-N written (0: none)
    int earlier_cleared;       // --overwrite_output_dir: the earlier run's checkpoints are gone (output_dir.h)
    // HF's TrainerState best-model fields (trainer/retention.c), saved in trainer_state.json
    int has_best_metric;       // best_metric is set (HF: not None)
    double best_metric;
    int best_global_step;      // 0: none
    char *best_model_checkpoint;  // OUT/checkpoint-N (malloc'd), NULL: none
    char *resume_owned;        // --resume_from_checkpoint found in --output_dir (malloc'd; a.resume_from_checkpoint)
    int argc;                  // the command line, for the command that continues a stopped run
    char **argv;
    int arg_start;             // argv[arg_start..] are the trainer's flags
    double epoch;        // fractional epoch of the last step
    Progress prog;
    TbWriter tb;         // --report_to tensorboard: rank 0's event file (tb.f NULL: none)
    DsBlocks dsb;        // --deepspeed's monitors, comms logger and flops profiler in the loop (ds_blocks.h)
    Comm comm;           // ranks (mpirun); rank 0 alone prints and writes files
    ZeroState zero;      // this rank's ZeRO state (zero/zero.h), set up after the model loads
    size_t plan_total;  // this rank's memory plan in bytes (plan_check), for keep_sublayer_acts
    int plan_B, plan_S, plan_T;  // the activation plan's largest batch and lengths (plan_shapes)
    struct HostWeightsJob *weights_job;  // random init under way on a helper thread (model/load.h)
} Run;

static inline int is_main(const Run *r) { return r->comm.rank == 0; }  // rank 0 prints and writes

// trainer/evaluate.c: eval/predict over the ranks (collective); metrics on every rank,
// predictions_path (may be NULL) written by rank 0.
cJSON *trainer_evaluate(Run *r, const Dataset *ds, const char *prefix, const char *predictions_path);

// trainer/checkpoint.c
// trainer_state.json (rank 0); every_host: a checkpoint's, which with node-local storage each host keeps a
// copy of (rank 0's text, written by every host's lowest rank; collective then)
void trainer_save_state(const Run *r, const char *dir, int every_host);
void trainer_save_model(Run *r, const char *dir);        // collective; rank 0 writes the HF directory
void trainer_save_checkpoint(Run *r, const LossScaler *scaler);  // collective: OUT/checkpoint-N
// Collective: the end of training's save into --output_dir: the HF directory, or at stage 3
// with stage3_gather_16bit_weights_on_model_save false the ZeRO shards and `latest` instead.
void trainer_save_final(Run *r, const LossScaler *scaler);
void trainer_store_flos(Run *r);                         // collective: the ranks' flos into total_flos
int trainer_load_state(Run *r, const char *dir);         // --resume_from_checkpoint: returns the step
// A checkpoint's trainer_state.json (path) parsed and held to what a resume needs: global_step
// a whole number in [0, INT_MAX] (*step), log_history a list, total_flos and
// num_input_tokens_seen finite and >= 0 when there; else one line naming the file and key.
// import-deepspeed checks the HF Trainer's file it copies with it. The caller deletes the result.
cJSON *trainer_state_read(const char *path, int *step);
// before anything is written; node_local: a node-local checkpoint (RunPlan.node_local), whose
// host may lack model.safetensors and some shards (fetched at resume)
void trainer_check_resume_dir(const TrainArgs *a, int node_local);
void trainer_check_resume_model(const TrainArgs *a);     // the checkpoint is --model's architecture
