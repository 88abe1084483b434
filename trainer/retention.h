// trainer/retention.h: which checkpoint-N directories a run keeps and which one is best, as
// transformers 5.17's Trainer does:
//   --metric_for_best_model / --greater_is_better   _determine_best_metric after each
//       evaluation during training: best_metric, best_global_step (save strategy steps or
//       epoch); _save_checkpoint then names best_model_checkpoint (when that checkpoint exists);
//       all three go into trainer_state.json and come back on --resume_from_checkpoint;
//   --save_total_limit N   _rotate_checkpoints after each save: the oldest checkpoint-N go,
//       the best one never (_sorted_checkpoints moves it next to last; with N = 1 and a best
//       that is not the newest, two stay so that the run can still resume); at the end of
//       training, with N = 1, every checkpoint but the best goes;
//   --load_best_model_at_end   at the end of training the best checkpoint's weights are
//       loaded back (trainer.c), so the final model and the evaluations after it are the best's;
//   --save_only_model   checkpoints without the optimizer's state: they cannot be resumed.
// Checkpoints are found as get_last_checkpoint finds them: directories named exactly
// checkpoint-<digits>; a checkpoint-N.tmp being written (or left by a killed run) is never one.
// Rank 0 deletes; every rank keeps the same best-model state (the decisions need no file
// system but for checkpoints older than the current step).
#pragma once
#include <cjson/cJSON.h>

#include "args.h"
#include "run.h"

// The flags, checked as HF's TrainingArguments.__post_init__ does, and their defaults
// (metric_for_best_model "loss" with load_best_model_at_end; greater_is_better from the
// metric's name). deepspeed: --deepspeed is given (HF refuses save_only_model with it and
// load_best_model_at_end).
void retention_check_args(TrainArgs *a);
// get_last_checkpoint: OUT/checkpoint-N with the largest N (malloc'd), or NULL.
char *retention_last_checkpoint(const char *output_dir);
// --resume_from_checkpoint DIR written with --save_only_model (no optimizer state): refused,
// saying so and what to do instead.
void retention_check_resumable(const char *dir);
// After an evaluation during training: the metric compared with the best so far. Every rank.
void retention_update_best(Run *r, const cJSON *metrics);
// Before checkpoint-<global_step> is written: best_model_checkpoint as _save_checkpoint sets it.
void retention_before_save(Run *r);
// After checkpoint-<global_step> is written: --save_total_limit (rank 0 deletes).
void retention_rotate(Run *r);
// At the end of training: --save_total_limit 1 keeps the best checkpoint alone (rank 0).
void retention_after_training(Run *r);
// trainer_state.json's best_global_step, best_metric, best_model_checkpoint (null when unset).
void retention_state_add(const Run *r, cJSON *st);
// --resume_from_checkpoint: the best-model state saved in DIR/trainer_state.json.
void retention_load_state(Run *r, const char *dir);
