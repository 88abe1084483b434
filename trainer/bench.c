// trainer/bench.c: `train_t5 bench`: training throughput of a model on synthetic
// batches (random token ids, src = tgt = --seq tokens, no padding), the same workload as
// bench/hf_baseline.py, for bench/throughput.sh. Prints one machine-readable line:
//   RESULT impl=train_t5 mode=<ckpt|plain> model=M precision=P batch=B seq=S
//          samples_per_s=X tokens_per_s=X tflops=X peak_gib=X status=ok|oom
// A batch the memory plan says cannot fit under --max_gpu_memory reports status=oom
// without running (the plan is the allocator's own arithmetic, zero/planner.c);
// --find_max_batch searches the largest batch (multiples of 8) the plan admits.
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../model/hf_dir.h"
#include "../model/load.h"
#include "../zero/planner.h"
#include "../zero/step.h"
#include "device.h"
#include "progress.h"

typedef struct {
    const char *model, *init, *device;
    int batch, seq, steps, warmup, bf16, fp16, gradient_checkpointing, find_max_batch, seed, help;
    double max_gpu_memory;
} BenchArgs;

static int plan_fits(const T5Config *cfg, Dtype dt, int B, int S, int ckpt, double cap_gib) {
    if (cap_gib <= 0) return 1;
    MemPlan p = planner_memory(cfg, dt, B, S, S, ckpt);
    return p.total <= (size_t)(cap_gib * 1073741824.0);
}

static const char *precision_name(const BenchArgs *a) { return a->bf16 ? "bf16" : a->fp16 ? "fp16" : "fp32"; }

static void print_result(const BenchArgs *a, int B, double sps, double flops, double peak_gib, const char *status) {
    printf("RESULT impl=train_t5 mode=%s model=%s precision=%s batch=%d seq=%d samples_per_s=%.2f tokens_per_s=%.0f "
           "tflops=%.1f peak_gib=%.2f status=%s\n",
           a->gradient_checkpointing ? "ckpt" : "plain", a->model, precision_name(a), B, a->seq, sps,
           sps * 2.0 * a->seq, sps * flops / 1e12, peak_gib, status);
    fflush(stdout);
}

static void synthetic_batch(int B, int S, int V, uint64_t seed, int *ids, int *mask, int *labels, int *dec) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    uint64_t span = (uint64_t)(V < 32000 ? V : 32000) - 2;  // sentencepiece ids, not the padded vocab tail
    for (int i = 0; i < B * S; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = 2 + (int)(x % span);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        labels[i] = 2 + (int)(x % span);
        mask[i] = 1;
    }
    for (int b = 0; b < B; b++) ids[b * S + S - 1] = labels[b * S + S - 1] = 1;  // </s>
    t5_shift_right(labels, dec, B, S, 0, 0);
}

int bench_main(int argc, char **argv, int start) {
    BenchArgs a = {.model = "t5-large", .init = "random", .device = "cuda", .batch = 16, .seq = 128, .steps = 20,
                   .warmup = 5, .seed = 42};
    FlagSpec specs[] = {
        {"model", FLAG_STRING, &a.model, "preset or model directory (t5-large)"},
        {"init", FLAG_STRING, &a.init, "random (default) or pretrained"},
        {"device", FLAG_STRING, &a.device, "cuda (default) or cpu"},
        {"batch", FLAG_INT, &a.batch, "micro-batch (16)"},
        {"seq", FLAG_INT, &a.seq, "source = target tokens (128)"},
        {"steps", FLAG_INT, &a.steps, "timed steps (20)"},
        {"warmup", FLAG_INT, &a.warmup, "untimed steps first (5)"},
        {"bf16", FLAG_BOOL, &a.bf16, "bf16 mixed precision"},
        {"fp16", FLAG_BOOL, &a.fp16, "fp16 mixed precision + dynamic loss scaling"},
        {"gradient_checkpointing", FLAG_BOOL, &a.gradient_checkpointing, "recompute block activations"},
        {"max_gpu_memory", FLAG_FLOAT, &a.max_gpu_memory, "cap on GPU memory, GiB"},
        {"find_max_batch", FLAG_BOOL, &a.find_max_batch, "largest batch (multiple of 8) that fits the cap"},
        {"seed", FLAG_INT, &a.seed, "seed"},
        {"help", FLAG_BOOL, &a.help, "this help"},
    };
    flags_parse(argc, argv, start, specs, (int)(sizeof specs / sizeof specs[0]), "bench");
    if (a.help) {
        flags_print_help(specs, (int)(sizeof specs / sizeof specs[0]));
        return 0;
    }
    if (a.bf16 && a.fp16) t5_fail("bench: --fp16 and --bf16 contradict each other: pick one");
    if (a.batch < 1 || a.seq < 2 || a.steps < 1 || a.warmup < 0) t5_fail("bench: --batch, --seq, --steps must be positive");
    Dtype dt = a.bf16 ? DTYPE_BF16 : a.fp16 ? DTYPE_F16 : DTYPE_F32;
    if (!strcmp(a.device, "cpu")) dt = DTYPE_F32;

    T5Config cfg;
    ModelLoadOptions lo = {.init_random = !strcmp(a.init, "random"), .seed = (unsigned long long)a.seed};
    hf_resolve_model(a.model, &cfg);  // the config only: plan before allocating anything
    if (!lo.init_random) cfg.untied_lm_head = hf_probe_untied(a.model);
    double flops = planner_flops_per_sample(&cfg, a.seq, a.seq);
    int B = a.batch;
    if (a.find_max_batch) {
        if (a.max_gpu_memory <= 0) t5_fail("bench: --find_max_batch needs --max_gpu_memory");
        int lo_b = 0, hi_b = 8;
        while (plan_fits(&cfg, dt, hi_b, a.seq, a.gradient_checkpointing, a.max_gpu_memory) && hi_b < 65536)
            lo_b = hi_b, hi_b *= 2;
        while (hi_b - lo_b > 8) {
            int mid = (lo_b + hi_b) / 2 / 8 * 8;
            if (plan_fits(&cfg, dt, mid, a.seq, a.gradient_checkpointing, a.max_gpu_memory)) lo_b = mid;
            else hi_b = mid;
        }
        if (lo_b == 0) {
            print_result(&a, 8, 0, flops, 0, "oom");
            return 0;
        }
        B = lo_b;
        printf("largest batch under %.1f GiB by the memory plan: %d\n", a.max_gpu_memory, B);
    }
    MemPlan plan = planner_memory(&cfg, dt, B, a.seq, a.seq, a.gradient_checkpointing);
    planner_print(&plan, a.max_gpu_memory);
    if (!plan_fits(&cfg, dt, B, a.seq, a.gradient_checkpointing, a.max_gpu_memory)) {
        print_result(&a, B, 0, flops, plan.total / 1073741824.0, "oom");
        return 0;
    }

    const Backend *be = device_backend(a.device, 0, a.bf16, a.fp16, a.max_gpu_memory);
    T5Model m;
    model_load(&m, a.model, be, lo);
    m.gradient_checkpointing = a.gradient_checkpointing;
    t5_plan_activations(&m, B, a.seq, a.seq);
    AdamWConfig oc = adamw_default_config();
    oc.lr = 1e-4f;
    ZeroState z;
    ZeroOptions zo = zero_options_stage(0);
    zero_init(&z, &m, zero_comm_single(), &zo, &oc);
    LrSchedule sched = {.type = LR_CONSTANT, .base_lr = 1e-4, .total_steps = a.warmup + a.steps};
    LossScaler scaler = a.fp16 ? loss_scaler_dynamic(16, 1000, 2, 1.0, 0) : loss_scaler_static(1.0);
    size_t n = (size_t)B * a.seq;
    int *ids = mallocCheck(n * sizeof(int)), *mask = mallocCheck(n * sizeof(int));
    int *labels = mallocCheck(n * sizeof(int)), *dec = mallocCheck(n * sizeof(int));
    synthetic_batch(B, a.seq, m.cfg.vocab_size, (uint64_t)a.seed, ids, mask, labels, dec);
    T5Batch batch = {.B = B, .S = a.seq, .T = a.seq, .input_ids = ids, .attention_mask = mask,
                     .decoder_input_ids = dec, .labels = labels};
    double t0 = 0, loss = 0;
    int skipped = 0;
    for (int s = 0; s < a.warmup + a.steps; s++) {
        if (s == a.warmup) {
            device_synchronize(be);
            t0 = now_seconds();
        }
        m.dropout_seed = (uint64_t)s;
        StepResult r = zero_train_step(&z, &sched, &scaler, &batch, 1, 0.0f);
        loss = r.loss;
        skipped += r.skipped;
    }
    device_synchronize(be);
    double elapsed = now_seconds() - t0;
    double sps = (double)B * a.steps / elapsed;
    double peak = be->mem_peak() / 1073741824.0;
    printf("last loss %.4f, %d skipped steps (fp16 overflow), %.1f ms/step\n", loss, skipped, 1e3 * elapsed / a.steps);
    print_result(&a, B, sps, flops, peak, "ok");
    free(ids);
    free(mask);
    free(labels);
    free(dec);
    zero_free(&z);
    t5_free(&m);
    return 0;
}
