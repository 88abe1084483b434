// tests/test_planner.c: the memory plan per ZeRO stage (zero/planner.c) against the ZeRO
// paper's model-state formulas (2 + 2 + K bytes per parameter, K = 12, partitioned by
// stage over N ranks), for t5-large and flan-t5-small at world sizes 1, 2, 3; and the
// single-rank plan against what the allocator really takes for a tiny model (the arena is
// the plan's activations, params/grads are the plan's bytes); an evaluation-only zero_init
// (no AdamWConfig) allocates no gradients, master weights or moments, as its plan says.
#include <math.h>
#include <string.h>

#include "../model/hf_dir.h"
#include "../model/load.h"
#include "../zero/planner.h"
#include "../zero/step.h"
#include "test.h"

static void formulas(const char *name) {
    T5Config cfg;
    hf_resolve_model(name, &cfg);
    for (int world = 1; world <= 3; world++) {
        ZeroPlan z0 = planner_memory_zero(&cfg, DTYPE_BF16, 8, 64, 64, 0, 0, 0, 1, 0);
        double psi = (double)z0.gpu.params / 2, N = world;
        for (int stage = 0; stage <= 3; stage++) {
            ZeroPlan z = planner_memory_zero(&cfg, DTYPE_BF16, 8, 64, 64, 0, 0, stage, world, 0);
            double states = (double)(z.gpu.params + z.gpu.grads + z.gpu.master + z.gpu.moments);
            double paper = stage == 0 ? 16 * psi : stage == 1 ? 4 * psi + 12 * psi / N
                         : stage == 2 ? 2 * psi + 14 * psi / N : 16 * psi / N;
            // partitions round up to ceil(psi/N) elements: at most 16 bytes x (N-1) more
            char what[200];
            snprintf(what, sizeof what, "%s stage %d, %d rank(s): model states %.0f B vs paper %.0f B", name, stage,
                     world, states, paper);
            test_check(states >= paper - 0.5 && states <= paper + 16.0 * (N - 1) + 0.5, what);
            ZeroPlan off = planner_memory_zero(&cfg, DTYPE_BF16, 8, 64, 64, 0, 0, stage, world, 1);
            // stage 2-3: the gradient partition streams to the host too (zero/grads_reduce_scatter.c)
            size_t grads_moved = stage >= 2 ? z.gpu.grads : 0;
            snprintf(what, sizeof what, "%s stage %d, %d rank(s): offload moves %.0f B of optimizer state%s to the host",
                     name, stage, world, (double)off.host, stage >= 2 ? " and gradients" : "");
            test_check(off.host == z.gpu.master + z.gpu.moments + grads_moved && off.gpu.master + off.gpu.moments == 0 &&
                           off.gpu.grads == z.gpu.grads - grads_moved, what);
        }
    }
}

static void plan_vs_allocator(void) {
    const Backend *be = backend_cpu();
    size_t before = be->mem_in_use();
    T5Model m;
    ModelLoadOptions lo = {0};
    model_load(&m, "tests/fixtures/relu_tied", be, lo);
    t5_plan_activations(&m, 3, 13, 9);
    size_t used = be->mem_in_use() - before;
    MemPlan p = planner_memory(&m.cfg, DTYPE_F32, 3, 13, 9, 0, 0);
    char what[200];
    snprintf(what, sizeof what, "fp32 plan params+grads+activations %zu B = allocator %zu B", p.params + p.grads +
             p.activations, used);
    test_check(used == p.params + p.grads + p.activations, what);
    t5_free(&m);
    test_check(be->mem_in_use() == before, "allocator back to its start after t5_free");

    // every stage on one rank: what zero_init leaves allocated = the plan's model states +
    // ZeRO work buffers (the plan is what `estimate` and --explain print)
    for (int stage = 0; stage <= 3; stage++) {
        before = be->mem_in_use();
        model_load(&m, "tests/fixtures/relu_tied", be, lo);
        AdamWConfig oc = adamw_default_config();
        ZeroState z;
        ZeroOptions zo = zero_options_stage(stage);
        zero_init(&z, &m, zero_comm_single(), &zo, &oc, NULL);
        used = be->mem_in_use() - before;
        ZeroPlan zp = planner_memory_zero(&m.cfg, DTYPE_F32, 3, 13, 9, 0, 0, stage, 1, 0);
        size_t planned = zp.gpu.params + zp.gpu.grads + zp.gpu.master + zp.gpu.moments + zp.gpu.zero_work;
        snprintf(what, sizeof what, "stage %d: planned model states + ZeRO buffers %zu B = allocator %zu B", stage,
                 planned, used);
        test_check(used == planned, what);
        zero_free(&z);
        t5_free(&m);
        if (stage >= 1) {  // the same with the optimizer offloaded: the plan's host bytes = what it took
            model_load(&m, "tests/fixtures/relu_tied", be, lo);
            ZeroOptions zoff = zo;
            zoff.offload_optimizer = 1;
            zero_init(&z, &m, zero_comm_single(), &zoff, &oc, NULL);
            ZeroPlan zpo = planner_memory_zero(&m.cfg, DTYPE_F32, 3, 13, 9, 0, 0, stage, 1, 1);
            size_t dev = be->mem_in_use() - before;
            size_t planned_dev = zpo.gpu.params + zpo.gpu.grads + zpo.gpu.master + zpo.gpu.moments + zpo.gpu.zero_work;
            snprintf(what, sizeof what, "stage %d + offload: device %zu B = plan %zu B, host %zu B = plan %zu B", stage,
                     dev, planned_dev, z.mem.host + z.mem.host_grads, zpo.host);
            test_check(dev == planned_dev && z.mem.host + z.mem.host_grads == zpo.host && zpo.host > 0 &&
                           (stage < 2) == (z.mem.host_grads == 0), what);
            zero_free(&z);
            t5_free(&m);
        }
        snprintf(what, sizeof what, "stage %d: allocator back to its start after zero_free + t5_free", stage);
        test_check(be->mem_in_use() == before, what);
    }
}

// Evaluation only (zero_init with oc NULL, the plan with ZeroOptions.inference): at every stage,
// with and without offload asked, and from a deferred load (the trainer's path) and a whole one.
static void eval_only_allocates_no_training_state(void) {
    const Backend *be = backend_cpu();
    char what[240];
    for (int stage = 0; stage <= 3; stage++)
        for (int variant = 0; variant < 3; variant++) {  // 0: whole load, 1: deferred, 2: deferred + offload asked
            size_t before = be->mem_in_use();
            T5Model m;
            float *host = NULL;
            ModelLoadOptions lo = {.host_weights = variant ? &host : NULL, .defer_weights = variant != 0};
            model_load(&m, "tests/fixtures/relu_tied", be, lo);
            ZeroState z;
            ZeroOptions zo = zero_options_stage(stage);
            zo.offload_optimizer = variant == 2 && stage >= 1;
            zo.inference = 1;
            zero_init(&z, &m, zero_comm_single(), &zo, NULL, host);
            size_t used = be->mem_in_use() - before;
            ZeroPlan zp = planner_memory_zero_opts(&m.cfg, DTYPE_F32, 3, 13, 9, 0, 0, &zo, 1);
            size_t planned = zp.gpu.params + zp.gpu.grads + zp.gpu.master + zp.gpu.moments + zp.gpu.zero_work;
            snprintf(what, sizeof what, "eval-only stage %d variant %d: ZeroMem grads %zu master %zu moments %zu "
                     "host %zu B; plan grads+master+m+v+host %zu B; allocator %zu B = plan %zu B", stage,
                     variant, z.mem.grads, z.mem.master, z.mem.moments, z.mem.host, zp.gpu.grads + zp.gpu.master + zp.gpu.moments + zp.host, used, planned);
            test_check(z.mem.grads == 0 && z.mem.master == 0 && z.mem.moments == 0 && z.mem.host == 0 &&
                           m.grads == NULL && z.grads.part == NULL && z.opt.m == NULL &&
                           z.own.m.place == OWNED_NONE && zp.gpu.grads + zp.gpu.master + zp.gpu.moments + zp.host == 0 &&
                           used == planned,
                       what);
            zero_free(&z);
            t5_free(&m);
            snprintf(what, sizeof what, "eval-only stage %d variant %d: allocator back to its start", stage, variant);
            test_check(be->mem_in_use() == before, what);
        }
}

// T5Model.keep_sublayer_acts: t5-large bf16 B=64 128/128 keeps 120 norm outputs (+rstd) and
// 48 FFN hidden states, each FFN's with its keep bits in place of its wi output (ReLU:
// model/t5.c), so a hidden state costs its bits over the plan without them, which has one
// (B*T*F/8) scratch of bits instead; the run keeps them on a 141 GB device without a cap, and
// does not under a 24 GiB cap (the plan alone is over 23 GiB there): issue 16's batch 64 must fit.
static size_t fake_cap, fake_capacity;
static size_t fake_mem_cap(void) { return fake_cap; }
static size_t fake_mem_capacity(void) { return fake_capacity; }

static void keep_decision(void) {
    T5Config cfg;
    hf_resolve_model("t5-large", &cfg);
    const size_t nq = 64 * 128, D = 1024, F = 4096;
    size_t want = 120 * (nq * D * 2 + nq * 4) + 47 * nq * F / 8, got = t5_keep_bytes(&cfg, DTYPE_BF16, 64, 128, 128, 0, 0);
    char what[200];
    snprintf(what, sizeof what, "t5-large bf16 B=64: kept norms and hidden states %zu B (120 norms + 48 hidden states' "
             "bits - the scratch bits: %zu B)", got, want);
    test_check(got == want, what);
    size_t ck = t5_keep_bytes(&cfg, DTYPE_BF16, 64, 128, 128, 1, 0);
    // checkpointing: one block's set per stack, and the decoder's set reuses the encoder's
    // bytes (model/t5.c acts_layout): the decoder block's 3 norms, and its hidden state's bits,
    // which the plan without them has once as scratch
    snprintf(what, sizeof what, "with checkpointing one decoder block's set holds them for both stacks: %zu B", ck);
    test_check(ck == 3 * (nq * D * 2 + nq * 4), what);
    Backend fake = *backend_cpu();
    fake.mem_cap = fake_mem_cap;
    fake.mem_capacity = fake_mem_capacity;
    size_t plan = planner_memory(&cfg, DTYPE_BF16, 64, 128, 128, 0, 0).total;
    fake_cap = 0, fake_capacity = (size_t)141e9;
    test_check(planner_keep_sublayer_acts(&fake, plan, got), "no cap, 141 GB device: kept");
    fake_cap = (size_t)24 << 30;
    test_check(!planner_keep_sublayer_acts(&fake, plan, got), "--max_gpu_memory 24: recomputed (B=64 must fit)");
    test_check(plan <= fake_cap, "--max_gpu_memory 24: the plan without them fits");
    fake_cap = 0, fake_capacity = plan + got;  // 90% of it is less than the plan with them
    test_check(!planner_keep_sublayer_acts(&fake, plan, got), "no cap, a device just the plan's size: recomputed");
}

int main(void) {
    formulas("t5-large");
    formulas("google/flan-t5-small");
    plan_vs_allocator();
    eval_only_allocates_no_training_state();
    keep_decision();
    return test_summary();
}
