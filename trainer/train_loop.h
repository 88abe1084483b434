// trainer/train_loop.h: the training loop of a run (train_loop.c), called by trainer.c once
// the run is resolved, the data open and the model loaded.
#pragma once

#include "../data/dataset.h"
#include "../kernels/backend.h"
#include "run.h"

// Trains on ds (val: evaluation during training, or NULL) as HF's Trainer.train does.
// Returns 1 when a stop signal ended it (a checkpoint saved, the continuing command
// printed: evaluation and prediction are skipped), else 0.
int train_loop_run(Run *r, const Dataset *ds, const Dataset *val);
// The run's model from dir (the best checkpoint at the end of training): trainer.c's.
void trainer_load_model_from(Run *r, const char *dir, const Backend *be);
