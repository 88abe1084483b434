// trainer/estimate.h: `train_t5 estimate` (estimate.c).
#pragma once

#include "../kernels/backend.h"
#include "../model/config.h"

int estimate_main(int argc, char **argv, int start);
// The per-rank table for stages 0-3 (what `estimate` prints and `--explain` prints at
// start-up); mark_stage >= 0 puts an arrow on the run's own stage; inference: an
// evaluation-only run (no gradients, master weights or moments).
void estimate_print_table(const char *model, const T5Config *cfg, Dtype dt, int batch, int S, int T, int ckpt,
                          int world, int offload, int inference, int mark_stage);
