// trainer/output_dir.h: --output_dir, made safe to write before a run starts:
//   output_dir_check   (before anything loads) the directory, or the nearest existing one
//                      above it, is writable (a read-only file system is found now, not at
//                      the first save); nothing the run writes over is in its way (a
//                      directory named model.safetensors, a checkpoint-N that is a file or
//                      not writable); a non-empty one needs --overwrite_output_dir or
//                      --resume_from_checkpoint (which trainer.c sets to the last checkpoint-N
//                      there, as run_translation.py: retention_last_checkpoint); an existing
//                      all_results.json is read to be merged into (HF's save_metrics). An
//                      existing directory is locked.
//   output_dir_create  (once everything that can fail on the input has passed) mkdir -p
//                      and the lock.
// The lock is an flock'ed OUT/.train_t5.lock holding "pid P on host H": a second run on
// the same directory is refused naming the first one. Only rank 0 writes, so only rank 0
// calls these. At exit the lock file is removed, and a directory this run created and left
// empty too.
#pragma once
#include <cjson/cJSON.h>

#include "args.h"

// Returns the all_results.json found there (a JSON object), or NULL.
// node_local: a node-local checkpoint resumed (RunPlan.node_local: trainer_check_resume_dir).
cJSON *output_dir_check(const TrainArgs *a, int node_local);
void output_dir_create(const TrainArgs *a);
// The same lock for another command writing into a directory (`export` OUT): a directory a
// live run holds is refused, naming it as `what` ("export: OUT"); held until exit.
void output_dir_lock_as(const char *dir, const char *what);
// Training with --overwrite_output_dir (not resuming): the checkpoint-N (and checkpoint-N.tmp)
// directories an earlier run left in --output_dir are removed, with a line naming them, so
// that no step of another run can pass for this run's (--save_total_limit's rotation, the
// automatic resume of a later run). HF leaves them, and then rotates and resumes them as its
// own. The trainer calls it once this run has its own first checkpoint (checkpoint-keep_step,
// which stays), or at the end of training when it saved none (keep_step -1): a run that fails
// before that leaves the earlier run's outputs as they were. With node-local checkpoints every
// host's lowest rank clears its own disk.
void output_dir_clear_checkpoints(const TrainArgs *a, int keep_step);
