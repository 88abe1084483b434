// trainer/estimate.c: the table of `train_t5 estimate` (cmd/estimate.c) and of --explain:
// per-rank GPU and host bytes for a model, batch, precision, world size and offload, for ZeRO
// stages 0-3 (zero/planner.c, the same arithmetic the allocator follows), with the ZeRO
// paper's model-state formula beside it and the communication volume per step; estimate_png.c
// draws the same plan. Needs no GPU.
#include "estimate.h"

#include <stdio.h>
#include <string.h>

#include "../zero/planner.h"
#include "../zero/zero.h"

double estimate_rows(const EstimateSetup *s, EstimateRow rows[ESTIMATE_STAGES]) {
    ZeroPlan z0 = planner_memory_zero(s->cfg, s->dt, s->batch, s->S, s->T, s->ckpt, 0, 0, 1, 0);
    double psi = (double)z0.gpu.params / (s->dt == DTYPE_F32 ? 4 : 2);
    double p = s->dt == DTYPE_F32 ? 4 : 2, k = s->dt == DTYPE_F32 ? 8 : 12, N = s->world;
    for (int stage = 0; stage < ESTIMATE_STAGES; stage++) {
        ZeroOptions o = zero_options_stage(stage);
        o.offload_optimizer = s->offload && stage >= 1;  // DeepSpeed offloads the optimizer only with ZeRO
        o.inference = s->inference;
        rows[stage].plan = planner_memory_zero_opts(s->cfg, s->dt, s->batch, s->S, s->T, s->ckpt, 0, &o, s->world);
        rows[stage].paper = stage == 0 ? (p + p + k) * psi
                            : stage == 1 ? (p + p) * psi + k * psi / N
                            : stage == 2 ? p * psi + (p + k) * psi / N
                                         : (p + p + k) * psi / N;
    }
    return psi;
}

void estimate_paper_formula(int stage, Dtype dt, int greek, char *buf, size_t n) {
    int p = dt == DTYPE_F32 ? 4 : 2, k = dt == DTYPE_F32 ? 8 : 12;
    const char *P = greek ? "\xce\xa8" : "Psi";
    if (stage == 0) snprintf(buf, n, "(%d+%d+%d)%s", p, p, k, P);
    else if (stage == 1) snprintf(buf, n, "%d%s + %d%s/N", 2 * p, P, k, P);
    else if (stage == 2) snprintf(buf, n, "%d%s + %d%s/N", p, P, p + k, P);
    else snprintf(buf, n, "%d%s/N", 2 * p + k, P);
}

void estimate_print_table(const char *model, const T5Config *cfg, Dtype dt, int batch, int S, int T, int ckpt,
                          int world, int offload, int inference, int mark_stage) {
    const double G = 1073741824.0;
    EstimateSetup su = {model, cfg, dt, batch, S, T, ckpt, world, offload, inference};
    EstimateRow rows[ESTIMATE_STAGES];
    double psi = estimate_rows(&su, rows);
    printf("%s: %.0f parameters (Psi), %s, batch %d x %d+%d tokens per rank, %d rank%s%s%s%s\n", model, psi,
           dt == DTYPE_F32 ? "fp32" : dt == DTYPE_BF16 ? "bf16" : "fp16", batch, S, T, world,
           world > 1 ? "s" : "", offload ? ", optimizer offloaded" : "", ckpt ? ", gradient checkpointing" : "",
           inference ? ", evaluation only (no gradients, no optimizer)" : "");
    printf("per-rank GiB    params   grads  optim(master+m+v)  activations  workspace  zero-bufs |  GPU total   host | "
           "paper model states | comm/step GB\n");
    double p = dt == DTYPE_F32 ? 4 : 2;
    for (int stage = 0; stage < ESTIMATE_STAGES; stage++) {
        const ZeroPlan z = rows[stage].plan;
        double paper = rows[stage].paper;
        double optim = (double)(z.gpu.master + z.gpu.moments) + (double)z.host;
        printf("%sstage %d    %8.2f %7.2f %18.2f %12.2f %10.2f %10.2f | %10.2f %6.2f | %18.2f | %8.2f\n",
               stage == mark_stage ? "->" : "  ", stage, z.gpu.params / G, z.gpu.grads / G, optim / G,
               z.gpu.activations / G, z.gpu.workspace / G, z.gpu.zero_work / G, z.gpu.total / G, z.host / G,
               paper / G, z.comm_elems * p / 1e9);
        if (offload && stage == 0) printf("         (stage 0 cannot offload the optimizer: shown on the GPU)\n");
    }
    printf("(model states = params + grads + optimizer states; partitions are ceil(Psi/N) elements; zero-bufs = "
           "stage 2-3 work buffers: the unit in flight, the embedding's gradient, stage 3's gathered unit; comm = "
           "per step without accumulation, docs/ZERO.md)\n");
}
