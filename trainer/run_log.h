// trainer/run_log.h: a run's logging and metrics files (run_log.c), used by the training
// loop (train_loop.c) and by evaluation and prediction after it (trainer.c).
#pragma once

#include <cjson/cJSON.h>

#include "run.h"

// HF's Trainer.log: "epoch" (while training) and the input tokens are added, the callbacks
// see the record (the console line when print, TensorBoard's scalars), and log_history gets
// it with "step". `logs` is built in HF's key order by the caller; taken over.
void run_log_entry(Run *r, cJSON *logs, int print);
// HF's evaluate() after training logs too: TensorBoard, and the console with --disable_tqdm.
void run_log_after_training(Run *r, const cJSON *met);
// --report_to tensorboard: the event file in the logging dir, rank 0.
void run_log_open_tensorboard(Run *r);
// Write SPLIT_results.json with the metrics object (and merge it into all_results.json).
void run_log_save_metrics(Run *r, const char *split, cJSON *metrics);
