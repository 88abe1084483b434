// cmd/estimate.c: `train_t5 estimate`: the per-rank memory table of ZeRO stages 0-3 for a
// model, batch, precision, world size and offload (trainer/estimate.c prints it), and with
// --png its picture (trainer/estimate_png.c). Needs no GPU.
#include "cmd.h"

#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../model/hf_dir.h"
#include "../plot/canvas.h"
#include "../trainer/estimate.h"

int cmd_run_estimate(int argc, char **argv) {
    const char *model = "t5-large";
    const char *png = NULL;
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
        {"png", FLAG_STRING, &png, "also draw what each rank holds at each stage into this PNG"},
        {"help", FLAG_BOOL, &help, "this help"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    flags_parse(argc, argv, 2, specs, n_specs, "estimate");
    if (help) {
        flags_print_help(specs, n_specs);
        return 0;
    }
    if (bf16 && fp16) t5_fail("estimate: --fp16 and --bf16 contradict each other: pick one");
    if (batch < 1 || seq < 2 || world < 1) t5_fail("estimate: --batch, --seq and --world_size must be positive");
    if (png) canvas_check_out_path(png, "--png");  // before the model is resolved or anything printed
    T5Config cfg;
    hf_resolve_model(model, &cfg);
    Dtype dt = bf16 ? DTYPE_BF16 : fp16 ? DTYPE_F16 : DTYPE_F32;
    estimate_print_table(model, &cfg, dt, batch, seq, seq, ckpt, world, offload, 0, -1);
    if (png) {
        EstimateSetup su = {model, &cfg, dt, batch, seq, seq, ckpt, world, offload, 0};
        estimate_draw_png(&su, png);
        printf("wrote %s\n", png);
    }
    return 0;
}
