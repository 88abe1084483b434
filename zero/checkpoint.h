// zero/checkpoint.h: the optimizer's part of a training checkpoint, so that a run resumes
// exactly where it stopped (HF's --resume_from_checkpoint). The fp32 master weights are the
// checkpoint's model.safetensors (trainer/trainer.c writes them); this file adds
//   optimizer.safetensors  "exp_avg", "exp_avg_sq": the AdamW moments over the whole flat
//                          parameter space (lay.total fp32 each, HF state-dict order);
//   zero_state.json        the optimizer step count and the loss scaler's state.
// Moments are saved whole (every rank's partition gathered to rank 0), so a checkpoint
// resumes at any world size, ZeRO stage and offload setting: each rank reads back the
// range it owns in the new run.
#pragma once
#include "../optim/loss_scaler.h"
#include "zero.h"

// Collective: every rank calls it; rank 0 writes into dir (which exists).
void zero_save_optimizer(ZeroState *z, const LossScaler *scaler, const char *dir);
// Every rank reads its partition of the moments, the step and the scaler from dir. Refused,
// naming the file and key or tensor: a number out of range, inf/nan moments, and an
// optimizer step that with the skipped steps does not make global_step (the checkpoint's,
// from trainer_state.json).
void zero_load_optimizer(ZeroState *z, LossScaler *scaler, const char *dir, int global_step);
