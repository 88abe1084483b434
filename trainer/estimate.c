// trainer/estimate.c: `train_t5 estimate`: per-rank GPU and host bytes for a model, batch,
// precision, world size and offload, for ZeRO stages 0-3 (zero/planner.c, the same
// arithmetic the allocator follows), with the ZeRO paper's model-state formula beside it
// and the communication volume per step. Needs no GPU.
#include "estimate.h"

#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../model/hf_dir.h"
#include "../zero/planner.h"
#include "../zero/zero.h"

int estimate_main(int argc, char **argv, int start) {
    const char *model = "t5-large";
    int batch = 16, seq = 128, world = 1, bf16 = 0, fp16 = 0, offload = 0, ckpt = 0, help = 0;
    FlagSpec specs[] = {
        {"model", FLAG_STRING, &model, "preset or model directory (t5-large)"},
        {"batch", FLAG_INT, &batch, "micro-batch per rank (16)"},
        {"seq", FLAG_INT, &seq, "source = target tokens (128)"},
        {"world_size", FLAG_INT, &world, "ranks (1)"},
        {"bf16", FLAG_BOOL, &bf16, "bf16 mixed precision"},
        {"fp16", FLAG_BOOL, &fp16, "fp16 mixed precision"},
        {"offload_optimizer", FLAG_BOOL, &offload, "optimizer state in host memory"},
        {"gradient_checkpointing", FLAG_BOOL, &ckpt, "recompute block activations"},
        {"help", FLAG_BOOL, &help, "this help"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    flags_parse(argc, argv, start, specs, n_specs, "estimate");
    if (help) {
        flags_print_help(specs, n_specs);
        return 0;
    }
    if (bf16 && fp16) t5_fail("estimate: --fp16 and --bf16 contradict each other: pick one");
    if (batch < 1 || seq < 2 || world < 1) t5_fail("estimate: --batch, --seq and --world_size must be positive");
    T5Config cfg;
    hf_resolve_model(model, &cfg);
    Dtype dt = bf16 ? DTYPE_BF16 : fp16 ? DTYPE_F16 : DTYPE_F32;
    estimate_print_table(model, &cfg, dt, batch, seq, seq, ckpt, world, offload, 0, -1);
    return 0;
}

void estimate_print_table(const char *model, const T5Config *cfg, Dtype dt, int batch, int S, int T, int ckpt,
                          int world, int offload, int inference, int mark_stage) {
    const double G = 1073741824.0;
    ZeroPlan z0 = planner_memory_zero(cfg, dt, batch, S, T, ckpt, 0, 1, 0);
    double psi = (double)z0.gpu.params / (dt == DTYPE_F32 ? 4 : 2);
    printf("%s: %.0f parameters (Psi), %s, batch %d x %d+%d tokens per rank, %d rank%s%s%s%s\n", model, psi,
           dt == DTYPE_F32 ? "fp32" : dt == DTYPE_BF16 ? "bf16" : "fp16", batch, S, T, world,
           world > 1 ? "s" : "", offload ? ", optimizer offloaded" : "", ckpt ? ", gradient checkpointing" : "",
           inference ? ", evaluation only (no gradients, no optimizer)" : "");
    printf("per-rank GiB    params   grads  optim(master+m+v)  activations  workspace  zero-bufs |  GPU total   host | "
           "paper model states | comm/step GB\n");
    for (int stage = 0; stage <= 3; stage++) {
        // DeepSpeed offloads the optimizer only with ZeRO (stage >= 1)
        ZeroOptions o = zero_options_stage(stage);
        o.offload_optimizer = offload && stage >= 1;
        o.inference = inference;
        ZeroPlan z = planner_memory_zero_opts(cfg, dt, batch, S, T, ckpt, &o, world);
        // the paper's formula (mixed precision: 2 + 2 + K with K = 12; fp32: 4 + 4 + 8)
        double p = dt == DTYPE_F32 ? 4 : 2, k = dt == DTYPE_F32 ? 8 : 12, N = world;
        double paper = stage == 0 ? (p + p + k) * psi
                       : stage == 1 ? (p + p) * psi + k * psi / N
                       : stage == 2 ? p * psi + (p + k) * psi / N
                                    : (p + p + k) * psi / N;
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
