// zero/planner.h: the memory plan. Every byte train_t5 allocates on the device is
// predicted here before the first step, so a run that cannot fit stops with the figures
// and the cheapest change that would fit, instead of failing halfway (DESIGN.md: "memory
// is a plan"). `train_t5 estimate` (ZeRO issue) will print the same table per stage,
// world size and offload (planner_memory_zero).
#pragma once
#include <stddef.h>

#include "../kernels/backend.h"
#include "../model/config.h"

struct T5Model;  // model/t5.h

typedef struct {
    size_t params;       // compute copy (act dtype)
    size_t grads;        // act dtype
    size_t master;       // fp32 master weights (16-bit training only)
    size_t moments;      // AdamW m and v, fp32
    size_t activations;  // the activation arena (model/t5.c plan)
    size_t workspace;    // kernel scratch (attention permutes, GEMM workspace, sort buffers)
    size_t zero_work;    // ZeRO stage 2-3 work buffers (zero/zero.h): the gradient of the unit in
                         // flight + the embedding's; stage 3 also the gathered weights of one unit
    size_t generation;   // evaluation with generation: the incremental decoder's KV caches, beam
                         // tables, step activations and logits (model/kv_decoder.c); 0 otherwise
    size_t total;
} MemPlan;

// B: micro-batch, S/T: source/target lengths; act_bytes: 4 (fp32) or 2 (bf16/fp16).
// window: with gradient checkpointing, the rows each block runs at a time (T5Model.sub_batch,
// --checkpoint_sub_batch; 0: the whole batch).
MemPlan planner_memory(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, int gradient_checkpointing, int window);
// Add generation's decoder for batches of B x beams rows, sources up to S, max_length
// (counting the start token) to the plan (p->generation, p->total).
void planner_add_generation(MemPlan *p, const T5Config *cfg, Dtype act_dtype, int B, int beams, int S,
                            int max_length);
// Add --fp8's training scratch (the rounded copies of the largest linear call) and scaling
// state (model/fp8.h) to the workspace (p->workspace, p->total). The window's rows (gradient
// checkpointing in sub-batches) are B at most: B bounds it.
void planner_add_fp8(MemPlan *p, const T5Config *cfg, int B, int S, int T, int hist_len);
// What --fp8 keeps on the device beyond the plan, and what each would take (kept or not).
typedef struct {
    int inputs, weights;
    size_t input_bytes, weight_bytes;
} PlannerFp8Keep;
// --fp8's kept rounded inputs (model/fp8.h t5_fp8_keep_inputs) for batches up to (B, S, T), then
// the step's weight codes (t5_fp8_keep_weights: each weight rounded once a step instead of once a
// call), each taken on m when it fits beside plan_total (the plan and whatever else it keeps) and
// what was taken before it, as the sublayer activations are (planner_keep_sublayer_acts).
PlannerFp8Keep planner_keep_fp8(const Backend *be, struct T5Model *m, size_t plan_total, int B, int S, int T);
// The start-up line when --fp8's kept inputs left the FFN hidden states out of the activations
// (model/t5.h T5Acts.h_unkept_bytes); nothing otherwise.
void planner_print_fp8_h_unkept(const struct T5Model *m);
// The same plan for one rank of a ZeRO run: stage 0-3 over `world` ranks, optimizer state
// (fp32 master + moments) on the GPU or offloaded to host memory. What each stage
// partitions (ZeRO paper, Rajbhandari et al. 2020, Figure 1, with K = 12 bytes of fp32
// optimizer state per parameter in mixed precision, Psi = parameters, N = ranks):
//   stage 0: 2Psi + 2Psi + K Psi            stage 1: 2Psi + 2Psi + K Psi / N
//   stage 2: 2Psi + (2 + K) Psi / N         stage 3: (2 + 2 + K) Psi / N
// Partitions are contiguous ranges of the flat parameter space, ceil(Psi / N) elements each.
typedef struct {
    MemPlan gpu;          // per rank, on the GPU (activations and workspace included)
    size_t host;          // per rank, in host memory (offloaded optimizer state)
    size_t nvme;          // per rank, in the NVMe file (optimizer state offloaded to "nvme")
    double comm_elems;    // elements each rank sends per step (2 Psi for stages 0-2, 3 Psi for stage 3)
} ZeroPlan;
ZeroPlan planner_memory_zero(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, int gradient_checkpointing,
                             int window, int stage, int world, int offload_optimizer);
// The same with the run's ZeRO options (stage, offload, and the stage-3 keys that size the
// gather pool and the persistent units: zero_stage3_buffers); planner_memory_zero uses
// zero_options_stage(stage) (DeepSpeed's defaults).
ZeroPlan planner_memory_zero_opts(const T5Config *cfg, Dtype act_dtype, int B, int S, int T,
                                  int gradient_checkpointing, int window, const void *zero_options, int world);
// `train_t5 estimate` and `--explain`: the table for stages 0-3 (trainer/estimate.c prints it).

// The offloaded state of plan z (per rank) against this host, before anything is allocated:
// ranks_here x z->host against the host memory available now (/proc/meminfo MemAvailable),
// ranks_here x z->nvme against the free space of o->nvme_path (statvfs). Dies with the
// figures and the next setting to try (config_path names the config in the message); dry (the
// --explain run): prints a verdict line about this machine instead, and returns.
// Test hooks: T5_TEST_HOST_AVAILABLE=bytes and T5_TEST_NVME_FREE=bytes replace the measured
// figures (tests/test_data_parallel.c).
void planner_check_offload(const ZeroPlan *z, const void *zero_options, int ranks_here, const char *config_path,
                           int dry);

// T5Model.keep_sublayer_acts for a run whose plan (planned without them) totals
// plan_total bytes and whose kept norms and FFN hidden state take keep_bytes
// (t5_keep_bytes): 1 when both fit the budget: --max_gpu_memory when set (be->mem_cap),
// else 90% of the device's memory (be->mem_capacity; the rest is for the CUDA context,
// cuBLAS and NCCL, which the plan does not count). Keeping them skips their recompute in
// backward (the RMS norms and the FFN activation: about 3.5% of a t5-large step) and
// changes no result: the recompute gives the same bits.
int planner_keep_sublayer_acts(const Backend *be, size_t plan_total, size_t keep_bytes);
// Bytes of host memory available now (/proc/meminfo MemAvailable), -1 when unknown: what a CPU
// run's plan is checked against (T5_TEST_HOST_AVAILABLE stands in for it in the offload check only).
double planner_host_available(void);
// What was chosen and why (GiB): one line; with gradient checkpointing two (what checkpointing
// keeps, then what a block's recompute keeps).
void planner_print_keep(const Backend *be, int kept, size_t plan_total, size_t keep_bytes, int checkpointing,
                        int sub_batch);

// Print the plan as a table (GiB), with the cap if any.
void planner_print(const MemPlan *p, double cap_gib);
// Model FLOPs per training sample (DESIGN.md formula: 3 x forward).
double planner_flops_per_sample(const T5Config *cfg, int S, int T);
