// cmd/bench.c: `train_t5 bench`: training throughput of a model on synthetic
// batches (random token ids, src = tgt = --seq tokens, no padding), the same workload as
// bench/hf_baseline.py and bench/ds_baseline.py, for bench/throughput.sh and
// bench/zero_scaling.sh. It runs ZeRO like training does: --deepspeed CFG takes the
// config's zero_optimization (stage, buckets, overlap, prefetch, offload), optimizer
// settings and fp16 loss scaler, and the ranks come from any launcher (--num_gpus N,
// mpirun, torchrun-style variables, Slurm: comm/launch.h); each rank trains on its own
// synthetic batch of --batch samples. Rank 0 prints one machine-readable line:
//   RESULT impl=train_t5 mode=<ckpt|plain> model=M precision=P batch=B seq=S
//          samples_per_s=X tokens_per_s=X tflops=X peak_gib=X status=ok|oom
//          stage=K world=N peak_gib_ranks=a,b,... comm_ms_per_step=X step_ms=X
// samples_per_s and tflops count all ranks together; peak_gib is the largest rank's
// allocator peak; comm_ms_per_step is the communication stream's busy time per step
// (comm/comm.h comm_busy_ms; -1 without NCCL). A batch the memory plan says cannot fit
// under --max_gpu_memory reports status=oom without running (the plan is the allocator's
// own arithmetic, zero/planner.c); --find_max_batch searches the largest batch (multiples
// of 8) the plan admits. The config's scheduler is not used: the lr stays at 1e-4 (the
// lr does not change the step's time). With the optimizer offloaded, two more lines after
// RESULT say where the timed steps' time went (zero/phases.h: "offload phases ..." and
// "PHASES key=value ...").
#include "cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../model/fp8.h"
#include "../model/hf_dir.h"
#include "../model/load.h"
#include "../comm/comm.h"
#include "../deepspeed/ds_config.h"
#include "../deepspeed/ds_zero_options.h"
#include "../deepspeed/ds_source.h"
#include "../comm/launch.h"
#include "../kernels/backend_registry.h"
#include "../zero/planner.h"
#include "../zero/step.h"
#include "../trainer/device.h"
#include "../trainer/progress.h"
#include "../common/ticker.h"

typedef struct {
    const char *model, *init, *device, *deepspeed, *fp8_bf16;
    int batch, seq, steps, warmup, bf16, fp16, tf32, fp8, gradient_checkpointing, checkpoint_sub_batch, find_max_batch, seed,
        num_gpus, local_rank,
        profile, recompute, help;
    double max_gpu_memory;
    ZeroOptions zo;  // stage 0 without --deepspeed
    int world, rank;
} BenchArgs;

static int main_rank_of(const BenchArgs *a) { return a->rank == 0; }

static MemPlan plan_of(const BenchArgs *a, const T5Config *cfg, Dtype dt, int B) {
    MemPlan p = planner_memory_zero_opts(cfg, dt, B, a->seq, a->seq, a->gradient_checkpointing, a->checkpoint_sub_batch,
                                         &a->zo, a->world).gpu;
    if (a->fp8) planner_add_fp8(&p, cfg, B, a->seq, a->seq, T5_FP8_HISTORY_DEFAULT);
    return p;
}

static int plan_fits(const BenchArgs *a, const T5Config *cfg, Dtype dt, int B) {
    if (a->max_gpu_memory <= 0) return 1;
    return plan_of(a, cfg, dt, B).total <= (size_t)(a->max_gpu_memory * 1073741824.0);
}

static const char *precision_name(const BenchArgs *a) {
    return a->fp8 ? (a->bf16 ? "fp8-bf16" : "fp8-fp32") : a->bf16 ? "bf16" : a->fp16 ? "fp16" : a->tf32 ? "fp32-tf32" : "fp32";  // one word: RESULT lines are key=value
}

// peaks: (world) GiB per rank, or NULL
static void print_result(const BenchArgs *a, int B, double sps, double flops, const double *peaks, const char *status,
                         double comm_ms, double step_ms) {
    double peak = 0;
    for (int r = 0; peaks && r < a->world; r++) peak = peaks[r] > peak ? peaks[r] : peak;
    printf("RESULT impl=train_t5 mode=%s model=%s precision=%s batch=%d seq=%d samples_per_s=%.2f tokens_per_s=%.0f "
           "tflops=%.1f peak_gib=%.2f status=%s stage=%d world=%d peak_gib_ranks=",
           a->gradient_checkpointing ? "ckpt" : "plain", a->model, precision_name(a), B, a->seq, sps,
           sps * 2.0 * a->seq, sps * flops / 1e12, peak, status, a->zo.stage, a->world);
    for (int r = 0; r < a->world; r++) printf("%s%.2f", r ? "," : "", peaks ? peaks[r] : 0.0);
    printf(" comm_ms_per_step=%.2f step_ms=%.2f\n", comm_ms, step_ms);
    fflush(stdout);
}

// --deepspeed: resolve the config as the trainer does ("auto" from bench's own flags) and
// take its ZeRO options, optimizer settings and fp16 loss scaler.
static void bench_apply_deepspeed(BenchArgs *a, const T5Config *cfg, AdamWConfig *oc, LossScaler *scaler) {
    DsConfig c;
    char *text = NULL;  // --deepspeed as JSON or base64 text, as training takes it
    a->deepspeed = ds_source_resolve(a->deepspeed, &text);
    if (text) ds_config_load_text(&c, a->deepspeed, text);
    else ds_config_load(&c, a->deepspeed);
    freeCheck(text);
    if (main_rank_of(a)) ds_config_print_unacted(&c, a->deepspeed, stdout);
    // the blocks around training: checkpointing as in training; the others act in a training
    // run's loop (trainer/ds_blocks.h), which bench does not run: each key said
    if (c.activation_checkpointing.present) {
        a->gradient_checkpointing = 1;
        if (main_rank_of(a))
            printf("NOTICE: %s: \"activation_checkpointing\": gradient checkpointing is on, as "
                   "--gradient_checkpointing\n", a->deepspeed);
    }
    if (main_rank_of(a)) {
        static const char *const blocks[][2] = {
            {"tensorboard", "bench writes no monitor files (a training run does)"},
            {"csv_monitor", "bench writes no monitor files (a training run does)"},
            {"flops_profiler", "bench profiles its own steps with --profile N"},
            {"comms_logger", "bench reports the collectives' time per step (comm_ms_per_step)"}};
        for (int i = 0; i < 4; i++) ds_config_print_section_unacted(&c, blocks[i][0], a->deepspeed, blocks[i][1], stdout);
        if (c.aio.present && c.zero.offload_optimizer.device != OFFLOAD_NVME)
            ds_config_print_section_unacted(&c, "aio", a->deepspeed, "no NVMe offload in this config", stdout);
    }
    DsResolveArgs ra = ds_resolve_args_default();
    ra.per_device_train_batch_size = a->batch;
    ra.gradient_accumulation_steps = 1;
    ra.world_size = a->world;
    ra.learning_rate = oc->lr;
    ra.max_grad_norm = oc->max_grad_norm;
    ra.fp16 = a->fp16;
    ra.bf16 = a->bf16;
    ra.total_steps = a->warmup + a->steps;
    ra.d_model = cfg->d_model;
    ra.flag_set_mask = DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE | DS_FLAG_GRADIENT_ACCUMULATION_STEPS |
                       (a->bf16 ? DS_FLAG_BF16 : 0) | (a->fp16 ? DS_FLAG_FP16 : 0);
    ds_config_resolve(&c, &ra, a->deepspeed);
    a->zo = zero_options_from_config(&c, a->deepspeed);
    if (a->world > 0 && main_rank_of(a)) {
        ParamLayout lay;
        params_build_layout(cfg, &lay);
        if (a->zo.stage == 3) zero_stage3_describe(&lay, &a->zo, a->deepspeed);
        params_free_layout(&lay);
    }
    if (c.optimizer.present) {
        oc->lr = (float)c.optimizer.lr.v;
        oc->beta1 = (float)c.optimizer.betas[0].v;
        oc->beta2 = (float)c.optimizer.betas[1].v;
        oc->eps = (float)c.optimizer.eps.v;
        oc->weight_decay = (float)c.optimizer.weight_decay.v;
    }
    oc->max_grad_norm = (float)c.gradient_clipping.v;
    if (a->fp16 && c.fp16.loss_scale.v == 0)
        *scaler = loss_scaler_dynamic((int)c.fp16.initial_scale_power.v, (long)c.fp16.loss_scale_window.v,
                                      (int)c.fp16.hysteresis.v, c.fp16.min_loss_scale.v, c.fp16.consecutive_hysteresis.v);
    else if (a->fp16)
        *scaler = loss_scaler_static(c.fp16.loss_scale.v);
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

// The flags; 0 for --help (printed).
static int bench_parse(BenchArgs *a, int argc, char **argv, int start) {
    *a = (BenchArgs){.model = "t5-large", .init = "random", .device = NULL, .batch = 16, .seq = 128, .steps = 20,
                     .warmup = 5, .seed = 42, .local_rank = -1};
    FlagSpec specs[] = {
        {"model", FLAG_STRING, &a->model, "preset or model directory (t5-large)"},
        {"init", FLAG_STRING, &a->init, "random (default) or pretrained"},
        {"device", FLAG_STRING, &a->device, "cuda or cpu (default: cuda when a GPU is visible, else cpu, as training)"},
        {"batch", FLAG_INT, &a->batch, "micro-batch per rank (16)"},
        {"seq", FLAG_INT, &a->seq, "source = target tokens (128)"},
        {"steps", FLAG_INT, &a->steps, "timed steps (20)"},
        {"warmup", FLAG_INT, &a->warmup, "untimed steps first (5)"},
        {"bf16", FLAG_BOOL, &a->bf16, "bf16 mixed precision"},
        {"fp16", FLAG_BOOL, &a->fp16, "fp16 mixed precision + dynamic loss scaling"},
        {"tf32", FLAG_BOOL, &a->tf32, "fp32 GEMMs on TF32 tensor cores (Ampere and newer; as the trainer's --tf32)"},
        {"fp8", FLAG_BOOL, &a->fp8, "the blocks' linear GEMMs in fp8 (as the trainer's --fp8, its defaults; GPU: with --bf16)"},
        {"fp8_bf16", FLAG_STRING, &a->fp8_bf16, "with --fp8, linears kept in bf16 (as the trainer's: attention_output, "
                                                "first_last)"},
        {"gradient_checkpointing", FLAG_BOOL, &a->gradient_checkpointing, "recompute block activations"},
        {"checkpoint_sub_batch", FLAG_INT, &a->checkpoint_sub_batch, "with --gradient_checkpointing: each block runs N "
                                                                     "rows of the batch at a time (its activations planned for N)"},
        {"max_gpu_memory", FLAG_FLOAT, &a->max_gpu_memory, "cap on GPU memory, GiB"},
        {"recompute", FLAG_BOOL, &a->recompute, "recompute the sublayer norms and FFN hidden states in backward even "
                                                "when the memory plan has room to keep them (measures what keeping saves)"},
        {"find_max_batch", FLAG_BOOL, &a->find_max_batch, "largest batch (multiple of 8) that fits the cap"},
        {"deepspeed", FLAG_STRING, &a->deepspeed, "DeepSpeed JSON config: its ZeRO stage, buckets, optimizer, fp16"},
        {"num_gpus", FLAG_INT, &a->num_gpus, "start N GPU ranks on this host (each runs --batch samples)"},
        {"local_rank", FLAG_INT, &a->local_rank, "GPU index; deepspeed/torch.distributed.launch pass it; must equal LOCAL_RANK"},
        {"local-rank", FLAG_INT, &a->local_rank, "alias of --local_rank"},
        {"seed", FLAG_INT, &a->seed, "seed"},
        {"profile", FLAG_INT, &a->profile, "after the timed steps, N more under the op profiler: where a step's time "
                                           "goes, per class and per op and shape (CUDA; docs/CUDA.md)"},
        {"help", FLAG_BOOL, &a->help, "this help"},
    };
    flags_parse(argc, argv, start, specs, (int)(sizeof specs / sizeof specs[0]), "bench");
    if (a->help) {
        flags_print_help(specs, (int)(sizeof specs / sizeof specs[0]));
        return 0;
    }
    if (!a->device) a->device = device_gpu_count() > 0 ? "cuda" : "cpu";  // as the trainer picks it
    if (strcmp(a->device, "cpu") != 0 && strcmp(a->device, "cuda") != 0)
        t5_fail("bench: --device \"%s\": expected cpu or cuda", a->device);
    if (a->bf16 && a->fp16) t5_fail("bench: --fp16 and --bf16 contradict each other: pick one");
    if ((a->bf16 || a->fp16) && !strcmp(a->device, "cpu"))
        t5_fail("bench: --%s needs a GPU (--device cuda): the CPU backend is the fp32 reference%s", a->bf16 ? "bf16" : "fp16",
                device_gpu_count() > 0 ? "" : " (no GPU is visible here)");
    if (a->tf32 && (a->bf16 || a->fp16))
        t5_fail("bench: --tf32 with --%s: TF32 is for fp32 GEMMs, and a 16-bit run has none; HINT: drop one",
                a->bf16 ? "bf16" : "fp16");
    if (a->fp8 && a->fp16) t5_fail("bench: --fp8 with --fp16: fp8 GEMMs run with bf16 activations; HINT: --fp8 --bf16");
    if (a->fp8_bf16 && !a->fp8) t5_fail("bench: --fp8_bf16 is an --fp8 option: add --fp8, or drop it");
    if (a->fp8 && !a->bf16 && !strcmp(a->device, "cuda"))
        t5_fail("bench: --fp8 on the GPU runs bf16 activations around its fp8 GEMMs: add --bf16");
    if (a->batch < 1 || a->seq < 2 || a->steps < 1 || a->warmup < 0) t5_fail("bench: --batch, --seq, --steps must be positive");
    if (a->profile < 0) t5_fail("bench: --profile %d: give the number of profiled steps (>= 1), or leave it out", a->profile);
    if (a->checkpoint_sub_batch < 0 || (a->checkpoint_sub_batch && !a->gradient_checkpointing))
        t5_fail("bench: --checkpoint_sub_batch %d: needs --gradient_checkpointing and a positive number of rows",
                a->checkpoint_sub_batch);
    return 1;
}

// The batch to run: --batch, or with --find_max_batch the largest multiple of 8 the memory
// plan fits under --max_gpu_memory. 0: it does not fit (an "oom" row printed).
static int bench_pick_batch(BenchArgs *a, const T5Config *cfg, Dtype dt, double flops, int main_rank) {
    int B = a->batch;
    if (a->find_max_batch) {
        if (a->max_gpu_memory <= 0) t5_fail("bench: --find_max_batch needs --max_gpu_memory");
        int lo_b = 0, hi_b = 8;
        while (plan_fits(a, cfg, dt, hi_b) && hi_b < 65536) lo_b = hi_b, hi_b *= 2;
        while (hi_b - lo_b > 8) {
            int mid = (lo_b + hi_b) / 2 / 8 * 8;
            if (plan_fits(a, cfg, dt, mid)) lo_b = mid;
            else hi_b = mid;
        }
        if (lo_b == 0) {
            if (main_rank) print_result(a, 8, 0, flops, NULL, "oom", -1, 0);
            return 0;
        }
        B = lo_b;
        if (main_rank) printf("largest batch under %.1f GiB by the memory plan: %d\n", a->max_gpu_memory, B);
    }
    MemPlan plan = plan_of(a, cfg, dt, B);
    if (main_rank) planner_print(&plan, a->max_gpu_memory);
    if (!plan_fits(a, cfg, dt, B)) {
        if (main_rank) print_result(a, B, 0, flops, NULL, "oom", -1, 0);
        return 0;
    }
    return B;
}

// warmup + steps training steps on a synthetic batch; the timed steps' seconds, the
// communication's milliseconds (-1: not timed), the last loss and the skipped steps.
// first_done (may be NULL): when the first step's work ended (now_seconds, after a synchronize).
static double bench_time_steps(const BenchArgs *a, Comm *comm, T5Model *m, ZeroState *z, LossScaler *scaler,
                               float lr, int B, double *comm_ms, double *loss, int *skipped, double *first_done) {
    const Backend *be = m->be;
    LrSchedule sched = {.type = LR_CONSTANT, .base_lr = lr, .total_steps = a->warmup + a->steps};
    size_t n = (size_t)B * a->seq;
    int *ids = mallocCheck(n * sizeof(int)), *mask = mallocCheck(n * sizeof(int));
    int *labels = mallocCheck(n * sizeof(int)), *dec = mallocCheck(n * sizeof(int));
    synthetic_batch(B, a->seq, m->cfg.vocab_size, (uint64_t)a->seed + 7919u * (uint64_t)comm->rank, ids, mask, labels,
                    dec);
    T5Batch batch = {.B = B, .S = a->seq, .T = a->seq, .input_ids = ids, .attention_mask = mask,
                     .decoder_input_ids = dec, .labels = labels};
    double t0 = 0;
    *loss = 0;
    *skipped = 0;
    comm_timing(comm, 1);
    // a person waits on the steps (minutes on the CPU): a line that moves, from rank 0
    Ticker *tick = comm->rank != 0 ? NULL
                   : a->warmup > 0 ? ticker_start("bench: warm-up", "step", a->warmup)
                                   : ticker_start("bench: timed steps", "step", a->steps);
    for (int s = 0; s < a->warmup + a->steps; s++) {
        if (s == a->warmup && s > 0) ticker_phase(tick, "bench: timed steps", a->steps);
        if (s == a->warmup) {
            zero_sync(z);  // stages 1-2: the last step's weight gathers (and offloaded update) are part of the step
            be->synchronize();
            comm_barrier(comm);
            (void)comm_busy_ms(comm);  // the warm-up's communication is not counted
            zero_phases_reset(z);      // nor its offload phases
            t0 = now_seconds();
        }
        m->dropout_seed = (uint64_t)s;
        // every rank's synthetic batch has B x seq labels: the global count needs no collective
        StepResult r = zero_train_step_tokens(z, &sched, scaler, &batch, 1, 0.0f, (long)B * a->seq * a->world);
        *loss = r.loss;
        *skipped += r.skipped;
        if (s == 0 && first_done) {
            be->synchronize();
            *first_done = now_seconds();
        }
        ticker_set(tick, s < a->warmup ? s + 1 : s - a->warmup + 1);
    }
    zero_sync(z);
    be->synchronize();
    double elapsed = now_seconds() - t0;
    ticker_stop(tick);
    *comm_ms = comm_busy_ms(comm);
    comm_timing(comm, 0);
    free(ids);
    free(mask);
    free(labels);
    free(dec);
    return elapsed;
}

// --profile: a.profile more steps, each op bracketed by CUDA events (kernels/cuda/profile.cu);
// rank 0 prints the table.
static void bench_profile_steps(const BenchArgs *a, Comm *comm, T5Model *m, ZeroState *z, LossScaler *scaler,
                                float lr, int B) {
    const Backend *be = m->be;
    BenchArgs pa = *a;
    pa.warmup = 0;
    pa.steps = a->profile;
    double comm_ms, loss;
    int skipped;
    m->be = backend_profile_wrap(be, m->cfg.vocab_size);
    double pe = bench_time_steps(&pa, comm, m, z, scaler, lr, B, &comm_ms, &loss, &skipped, NULL);
    m->be = be;
    if (comm->rank == 0) backend_profile_report(stdout, 1e3 * pe, a->profile, 30);
}

int cmd_run_bench(int argc, char **argv) {
    double t_start = now_seconds();
    BenchArgs a;
    if (!bench_parse(&a, argc, argv, 2)) return 0;
    if (a.num_gpus > 0) {
        if (strcmp(a.device, "cuda") != 0)
            t5_fail("bench: --num_gpus %d with --device %s: several CPU ranks run only under mpirun", a.num_gpus, a.device);
        return launch_spawn_ranks(a.num_gpus, argc, argv);  // each rank runs this again without --num_gpus
    }
    launch_use_local_rank_flag(a.local_rank);  // agrees with LOCAL_RANK, or sets it
    T5Config cfg;
    float *host_weights = NULL;
    ModelLoadOptions lo = {.init_random = !strcmp(a.init, "random"), .seed = (unsigned long long)a.seed,
                           .host_weights = &host_weights, .defer_weights = 1};
    lo.device_init = lo.init_random;  // a random init is made in place by zero_init_random
    int has_weights = hf_resolve_model(a.model, &cfg);  // the config only (once): plan before allocating anything
    if (!lo.init_random) cfg.untied_lm_head = hf_probe_untied(a.model);
    // weights from a file are read on a helper thread while the communicator, the device and
    // the plan open (start-up overlap); model_load_resolved waits for them
    lo.job = model_weights_begin(a.model, &cfg, has_weights, lo);
    Comm comm;
    comm_init(&comm);
    comm_attach_device(&comm, a.device);  // GPU ranks: the binary's targets checked against this rank's GPU
    GpuInfo gpu;
    if (!strcmp(a.device, "cuda") && device_gpu_info(comm.local_rank, &gpu)) {
        if (a.bf16) gpu_arch_require_precision(&gpu, "bf16", "bench --bf16");
        if (a.tf32) gpu_arch_require_precision(&gpu, "tf32", "bench --tf32");
        if (a.fp8) gpu_arch_require_precision(&gpu, "fp8", "bench --fp8");
    }
    if (a.tf32 && strcmp(a.device, "cuda") != 0)
        t5_fail("bench --tf32 requires Ampere or a newer GPU arch (--device cuda): the CPU computes in exact fp32");
    const int main_rank = comm.rank == 0;
    a.world = comm.world;
    a.rank = comm.rank;
    Dtype dt = a.bf16 ? DTYPE_BF16 : a.fp16 ? DTYPE_F16 : DTYPE_F32;

    AdamWConfig oc = adamw_default_config();
    oc.lr = 1e-4f;
    LossScaler scaler = a.fp16 ? loss_scaler_dynamic(16, 1000, 2, 1.0, 0) : loss_scaler_static(1.0);
    a.zo = zero_options_stage(0);
    a.zo.overlap_comm = 1;  // without a config: stage 0 overlapped as DDP (as the trainer)
    if (a.deepspeed) bench_apply_deepspeed(&a, &cfg, &oc, &scaler);
    double flops = planner_flops_per_sample(&cfg, a.seq, a.seq);
    int B = bench_pick_batch(&a, &cfg, dt, flops, main_rank);
    if (B && a.deepspeed) {  // the offloaded state against this host's memory and disk, before allocating
        ZeroPlan zp = planner_memory_zero_opts(&cfg, dt, B, a.seq, a.seq, a.gradient_checkpointing, a.checkpoint_sub_batch, &a.zo,
                                               a.world);
        planner_check_offload(&zp, &a.zo, comm_ranks_on_my_host(&comm), a.deepspeed, 0);
    }
    if (!B) {
        model_weights_discard(lo.job);
        comm_finalize(&comm);
        return 0;
    }
    double t_plan = now_seconds();
    const Backend *be = device_backend(a.device, comm.local_rank, a.bf16, a.fp16, a.max_gpu_memory, a.tf32);
    double t_device = now_seconds();
    T5Model m;
    model_load_resolved(&m, a.model, &cfg, has_weights, be, lo);
    m.gradient_checkpointing = a.gradient_checkpointing;
    m.sub_batch = a.checkpoint_sub_batch;
    double t_weights = now_seconds();
    ZeroState z;
    // the weights and the ZeRO state (a random t5-large on the CPU: half a minute): said while it runs
    Ticker *setup = main_rank ? ticker_start(lo.device_init ? "bench: random init and the ZeRO state"
                                                            : "bench: the weights into the ZeRO state",
                                             NULL, 0)
                              : NULL;
    if (lo.device_init) zero_init_random(&z, &m, &comm, &a.zo, &oc, lo.seed);
    else zero_init(&z, &m, &comm, &a.zo, &oc, host_weights);
    ticker_stop(setup);
    size_t plan_total = plan_of(&a, &cfg, dt, B).total, keep = t5_keep_bytes(&cfg, dt, B, a.seq, a.seq, a.gradient_checkpointing,
                                                                             a.checkpoint_sub_batch);
    m.keep_sublayer_acts = !a.recompute && planner_keep_sublayer_acts(be, plan_total, keep);
    if (main_rank && a.recompute) printf("activations: --recompute: the sublayer norms and FFN hidden states are recomputed in backward\n");
    else if (main_rank)
        planner_print_keep(be, m.keep_sublayer_acts, plan_total, keep, a.gradient_checkpointing, a.checkpoint_sub_batch);
    if (a.fp8) {
        t5_fp8_init(&m, t5_fp8_parse_keep(a.fp8_bf16, "bench --fp8_bf16"), T5_FP8_HISTORY_DEFAULT, 0);
        const PlannerFp8Keep k = planner_keep_fp8(be, &m, plan_total + (m.keep_sublayer_acts ? keep : 0), B, a.seq, a.seq);
        char kept[128];
        t5_fp8_describe_keep(m.fp8->keep, kept, sizeof kept);
        if (main_rank)
            printf("fp8: the blocks' linear GEMMs in fp8 (%d linear groups; e4m3 inputs and weights, e5m2 gradients, "
                   "delayed scaling over %d steps); in %s: %s; the rounded inputs %s (%.2f GiB); the weights "
                   "%s (%.2f GiB)\n",
                   m.fp8->n_slots, T5_FP8_HISTORY_DEFAULT,
                   dt == DTYPE_F32 ? "fp32 (the CPU reference emulates the fp8 rounding)" : "bf16", kept,
                   k.inputs ? "kept for the backward" : "rounded again in the backward (no room to keep them)",
                   k.input_bytes / 1073741824.0, k.weights ? "rounded once a step, kept" : "rounded by every call (no room to keep them)",
                   k.weight_bytes / 1073741824.0);
    }
    t5_plan_activations(&m, B, a.seq, a.seq);
    if (main_rank) planner_print_fp8_h_unkept(&m);
    double t_ready = now_seconds(), t_first = 0, comm_ms, loss;
    int skipped;
    double elapsed = bench_time_steps(&a, &comm, &m, &z, &scaler, oc.lr, B, &comm_ms, &loss, &skipped, &t_first);
    if (main_rank)  // from bench's start (the process's first microseconds before main are not counted)
        printf("start-up: %.2f s to the end of the first step: flags, communicator and plan %.2f, device %.2f, "
               "weights %.2f more (%s), ZeRO state and activations %.2f, "
               "first step %.2f\n", t_first - t_start, t_plan - t_start,
               t_device - t_plan, t_weights - t_device, lo.init_random ? "random init: made on the device with the ZeRO state" : "loaded on a helper thread from the start", t_ready - t_weights,
               t_first - t_ready);
    // samples/s of all ranks together, from rank 0's clock (the step's collectives keep the
    // ranks in step); every rank's allocator peak
    double sps = (double)B * a.world * a.steps / elapsed;
    double *peaks = callocCheck((size_t)a.world, sizeof(double));
    peaks[comm.rank] = be->mem_peak() / 1073741824.0;
    comm_allreduce_sum_f64(&comm, peaks, (size_t)a.world);
    if (main_rank) {
        printf("last loss %.6f, %d skipped steps (fp16 overflow), %.1f ms/step, ZeRO stage %d over %d rank%s\n", loss,
               skipped, 1e3 * elapsed / a.steps, a.zo.stage, a.world, a.world > 1 ? "s" : "");
        zero_stage3_print_stats(&z);
        print_result(&a, B, sps, flops, peaks, "ok", comm_ms >= 0 ? comm_ms / a.steps : -1, 1e3 * elapsed / a.steps);
        zero_phases_print(&z, stdout);  // offload: where the timed steps' time went
    }
    if (a.profile > 0) bench_profile_steps(&a, &comm, &m, &z, &scaler, oc.lr, B);
    free(peaks);
    zero_free(&z);
    t5_free(&m);
    comm_finalize(&comm);
    return 0;
}
