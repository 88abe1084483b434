// trainer/estimate.h: the per-rank memory table of `train_t5 estimate` (cmd/estimate.c) and
// --explain (estimate.c), and its picture (estimate_png.c).
#pragma once

#include "../kernels/backend.h"
#include "../model/config.h"
#include "../zero/planner.h"

#define ESTIMATE_STAGES 4

// What is estimated: a model, precision and batch on `world` ranks.
typedef struct {
    const char *model;      // as named on the command line
    const T5Config *cfg;
    Dtype dt;
    int batch, S, T;        // micro-batch per rank, source / target tokens
    int ckpt, world, offload, inference;
} EstimateSetup;

// One stage: the per-rank plan (zero/planner.c, the bytes the allocator follows) and the ZeRO
// paper's model-state bytes per rank (Rajbhandari et al. 2020, Figure 1; mixed precision:
// 2 + 2 + K bytes a parameter with K = 12, fp32: 4 + 4 + 8).
typedef struct {
    ZeroPlan plan;
    double paper;
} EstimateRow;

// The rows of stages 0-3 for s; returns Psi (parameters). Optimizer offload applies from
// stage 1 on, as in DeepSpeed.
double estimate_rows(const EstimateSetup *s, EstimateRow rows[ESTIMATE_STAGES]);
// The paper's formula of a stage as text, e.g. "4Ψ + 12Ψ/N" ("Ψ" in UTF-8 when greek, else "Psi").
void estimate_paper_formula(int stage, Dtype dt, int greek, char *buf, size_t n);
// The per-rank table for stages 0-3 (what `estimate` prints and `--explain` prints at
// start-up); mark_stage >= 0 puts an arrow on the run's own stage; inference: an
// evaluation-only run (no gradients, master weights or moments).
void estimate_print_table(const char *model, const T5Config *cfg, Dtype dt, int batch, int S, int T, int ckpt,
                          int world, int offload, int inference, int mark_stage);
// `estimate --png FILE`: what each rank holds at each stage, to scale, beside the paper's
// formula (estimate_png.c). The path is checked before anything is drawn.
void estimate_draw_png(const EstimateSetup *s, const char *path);
