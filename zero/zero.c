// zero/zero.c: set-up and tear-down of a rank's ZeRO state, the memory report, and the
// whole-model views (checkpoint weights, evaluation) that every stage needs (zero.h).
#include "zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/half.h"

// Test hook T5_TEST_OVERFLOW_STEP=N[:R]: rank R (default every rank) scales step N's
// backward by infinity, as an fp16 overflow in that rank's backward would; the reduction
// carries the inf/nan to every rank, which must all skip step N (tests of the loss scaler
// across ranks, bench/zero_equivalence.sh). Returns N for this rank, else 0.
static long zero_test_overflow_step(int rank) {
    const char *v = getenv("T5_TEST_OVERFLOW_STEP");
    if (!v || !*v) return 0;
    char *end = NULL;
    long n = strtol(v, &end, 10), r = -1;
    if (*end == ':') r = strtol(end + 1, &end, 10);
    if (*end || n < 1) t5_fail("T5_TEST_OVERFLOW_STEP=\"%s\": expected STEP or STEP:RANK (a test hook)", v);
    return r < 0 || r == rank ? n : 0;
}

// Allocate through the backend and count what the allocator handed out.
static void *counted_alloc(const Backend *be, size_t bytes, size_t *counter) {
    size_t before = be->mem_in_use();
    void *p = be->alloc(bytes);
    *counter += be->mem_in_use() - before;
    return p;
}

// k fp32 host weights into the act-dtype device buffer dst (narrowed chunk by chunk).
static void upload_weights(const Backend *be, void *dst, const float *src, size_t k) {
    if (be->act_dtype == DTYPE_F32) {
        be->to_device(dst, src, k * sizeof(float));
        return;
    }
    const size_t chunk = (size_t)16 << 20;
    uint16_t *tmp = mallocCheck((k < chunk ? (k ? k : 1) : chunk) * sizeof(uint16_t));
    for (size_t off = 0; off < k; off += chunk) {
        size_t c = k - off < chunk ? k - off : chunk;
        half_from_f32_array(tmp, src + off, c, be->act_dtype == DTYPE_BF16);
        be->to_device((char *)dst + off * 2, tmp, c * sizeof(uint16_t));
    }
    free(tmp);
}

static size_t largest_unit(const ParamLayout *L, int skip) {
    size_t best = 0;
    for (int u = 0; u < L->n_units; u++)
        if (u != skip && L->units[u].hi - L->units[u].lo > best) best = L->units[u].hi - L->units[u].lo;
    return best;
}

ZeroOptions zero_options_stage(int stage) {
    // stage 3 without a config: DeepSpeed's defaults for the stage-3 keys
    ZeroOptions o = {.stage = stage, .prefetch = 1, .prefetch_elems = 50000000, .max_live = 1000000000,
                     .persist_threshold = 100000, .max_reuse = 1000000000};
    return o;
}

ZeroOptions zero_options_from_config(const DsConfig *c, const char *path) {
    const DsOffloadOptimizer *oo = &c->zero.offload_optimizer;
    if (c->zero.offload_param.device != OFFLOAD_NONE)
        t5_fail("%s: zero_optimization.offload_param (stage 3 parameter offload) is not built yet; HINT: remove it "
                "(or cpu_offload_param); offload_optimizer to the cpu is built and keeps the optimizer state in host "
                "memory", path);
    if (oo->device == OFFLOAD_NVME)
        t5_fail("%s: zero_optimization.offload_optimizer.device \"nvme\" is not built yet; HINT: \"device\": \"cpu\"", path);
    if (oo->device == OFFLOAD_CPU && oo->ratio.v < 1.0)
        t5_fail("%s: zero_optimization.offload_optimizer.ratio %g: a partial offload is not built yet; HINT: remove "
                "ratio (1: all of the optimizer state in host memory)", path, oo->ratio.v);
    if (oo->device == OFFLOAD_CPU && c->zero.stage < 1)
        t5_fail("%s: zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is %d), as in DeepSpeed", path,
                (int)c->zero.stage);
    ZeroOptions o = {0};
    o.stage = (int)c->zero.stage;
    o.offload_optimizer = oo->device == OFFLOAD_CPU;
    o.pin_memory = oo->pin_memory.v;
    o.reduce_bucket = (size_t)c->zero.reduce_bucket_size.v;
    o.gather_bucket = (size_t)c->zero.allgather_bucket_size.v;
    o.overlap_comm = c->zero.overlap_comm.v;
    o.prefetch = c->zero.stage3_prefetch_bucket_size.v > 0;
    o.prefetch_elems = (size_t)c->zero.stage3_prefetch_bucket_size.v;
    o.max_live = (size_t)c->zero.stage3_max_live_parameters.v;
    o.persist_threshold = (size_t)c->zero.stage3_param_persistence_threshold.v;
    o.max_reuse = (size_t)c->zero.stage3_max_reuse_distance.v;
    return o;
}

void zero_init(ZeroState *z, T5Model *m, const Comm *comm, const ZeroOptions *o, const AdamWConfig *oc) {
    int stage = o->stage;
    if (stage < 0 || stage > 3) t5_fail("ZeRO stage %d: expected 0, 1, 2 or 3", stage);
    memset(z, 0, sizeof *z);
    const Backend *be = m->be;
    const ParamLayout *L = &m->lay;
    size_t n = L->total, e = m->elem;
    z->stage = stage;
    z->comm = comm;
    z->m = m;
    z->reduce_bucket = o->reduce_bucket;
    z->gather_bucket = o->gather_bucket;
    z->overlap_comm = o->overlap_comm;
    z->prefetch = o->prefetch;
    z->offload = o->offload_optimizer && oc;
    if (z->offload && stage < 1)
        t5_fail("offload_optimizer needs ZeRO stage 1, 2 or 3 (DeepSpeed's rule): set zero_optimization.stage");
    z->fetched = z->fetched_buf = -1;
    z->grad_ticket[0] = z->grad_ticket[1] = z->grad_shared_ticket = COMM_TICKET_NONE;
    z->part = stage >= 1 ? partition_range(n, comm->world, comm->rank) : (Range){0, n};
    size_t np = z->part.end - z->part.begin;

    // model_load may have left the fp32 weights on the host (m->host_master): then the
    // partition's master comes from there and no whole fp32 master ever sits on the device
    const float *host_src = m->host_master ? m->host_master + z->part.begin : NULL;
    // model_load deferred everything (defer_weights): allocate the compute weights and the
    // gradients the stage keeps whole, straight from the host copy (stage 3's partition and
    // stage 2-3's gradient partition come below): no whole copy the stage does not keep
    const int deferred = !m->params && m->host_master;
    if (deferred && stage < 3) {
        m->params = counted_alloc(be, n * e, &m->alloc_params);
        upload_weights(be, m->params, m->host_master, n);
    }
    if (deferred && stage < 2) m->grads = counted_alloc(be, n * e, &m->alloc_grads);
    // the fp32 master comes from the host copy only with 16-bit compute (fp32: the weights are it)
    if (be->act_dtype == DTYPE_F32 && !z->offload) host_src = NULL;
    if (z->offload) {  // master and moments of the partition in host memory (fp32 compute too)
        const float *src = host_src                      ? host_src
                           : m->master                   ? m->master + z->part.begin
                                                         : (const float *)m->params + z->part.begin;
        offload_init(&z->off, &z->opt, be, *oc, z->part.begin, z->part.end, src, host_src != NULL, o->pin_memory);
        z->mem.host = z->off.host_bytes;
        if (m->master) {
            be->free(m->master);
            m->master = NULL;
        }
    } else if (stage >= 1 && (m->master || host_src)) {
        // stage >= 1: the fp32 master of the partition only (16-bit compute; fp32 trains the
        // weights in place). Through the host, the whole one freed first: no moment with both.
        float *staged = NULL;
        if (!host_src) {
            staged = mallocCheck((np ? np : 1) * sizeof(float));
            be->to_host(staged, m->master + z->part.begin, np * sizeof(float));
        }
        if (m->master) be->free(m->master);
        m->master = NULL;
        z->master = counted_alloc(be, np * sizeof(float), &z->mem.master);
        be->to_device(z->master, host_src ? host_src : staged, np * sizeof(float));
        free(staged);
    } else if (host_src) {  // stage 0: the whole master on the device
        m->master = counted_alloc(be, m->lay.total * sizeof(float), &m->alloc_master);
        be->to_device(m->master, m->host_master, m->lay.total * sizeof(float));
        z->mem.master = m->alloc_master;
    } else {
        z->mem.master = m->alloc_master;
    }
    // stage >= 2: the gradient of the partition, and work buffers for the units in flight
    if (stage >= 2) {
        if (m->grads) be->free(m->grads);
        m->grads = NULL;
        z->grad_part = counted_alloc(be, np * e, &z->mem.grads);
        const ParamUnit *sh = &L->units[L->unit_shared];
        z->grad_shared = counted_alloc(be, (sh->hi - sh->lo) * e, &z->mem.grad_work);
        for (int k = 0; k < 2; k++)
            z->grad_work[k] = counted_alloc(be, largest_unit(L, L->unit_shared) * e, &z->mem.grad_work);
        z->hooks.begin_grads = zero_stage2_begin_grads;
        z->hooks.end_grads = zero_stage2_end_grads;
    } else {
        z->mem.grads = m->alloc_grads;
    }
    // stage 3: the partition of the compute weights; units are gathered on use
    if (stage == 3) {
        if (m->params) {
            void *host = mallocCheck(np ? np * e : 1);  // the whole copy freed before the partition is taken
            be->to_host(host, (char *)m->params + z->part.begin * e, np * e);
            be->free(m->params);
            m->params = NULL;
            z->param_part = counted_alloc(be, np * e, &z->mem.params);
            be->to_device(z->param_part, host, np * e);
            free(host);
        } else {  // deferred: the partition straight from the host copy
            z->param_part = counted_alloc(be, np * e, &z->mem.params);
            upload_weights(be, z->param_part, m->host_master + z->part.begin, np);
        }
        z->hooks.fetch_params = zero_stage3_fetch_params;
        z->hooks.release_params = zero_stage3_release_params;
        z->hooks.all_finished = zero_stage3_all_finished;
    } else {
        z->mem.params = m->alloc_params;
    }
    free(m->host_master);  // everything is placed
    m->host_master = NULL;
    t5_bind_flat(m);
    // stage 0-1: reduce each unit's gradient as backward finishes it; stage 1-2: wait for a
    // unit's all-gathered weights only when forward reaches it; stage 3: the gather pool
    z->unit_ticket = mallocCheck((size_t)L->n_units * sizeof(CommTicket));
    for (int u = 0; u < L->n_units; u++) z->unit_ticket[u] = COMM_TICKET_NONE;
    if (stage == 3) zero_stage3_init(z, o);
    z->inject_step = zero_test_overflow_step(comm->rank);
    // Debug hook T5_DUMP_GRAD_NORMS=FILE: rank 0 appends, per optimizer step, every tensor's
    // pre-clip gradient norm (zero/step.c), to set beside the norms torch's clip_grad_norm_
    // stacks (tools/make_exact_fixture.py records HF's; tests/test_exact.c compares them)
    const char *dump = getenv("T5_DUMP_GRAD_NORMS");
    z->dump_grad_norms = comm->rank == 0 && dump && *dump ? dump : NULL;
    if (stage <= 1) z->hooks.end_grads = zero_stage0_end_grads;
    if (stage == 1 || stage == 2) z->hooks.fetch_params = zero_stage1_fetch_params;
    z->hooks.ctx = z;
    m->hooks = &z->hooks;
    if (oc && !z->offload) {
        size_t before = be->mem_in_use();
        adamw_init(&z->opt, be, *oc, z->part.begin, z->part.end);
        z->mem.moments = be->mem_in_use() - before;
    }
}

void zero_free(ZeroState *z) {
    if (!z->m) return;  // never set up
    const Backend *be = z->m->be;
    comm_wait_all(z->comm);  // no collective still reading or writing a buffer freed below
    if (z->offload) offload_free(&z->off, &z->opt, be);
    else if (z->opt.m) adamw_free(&z->opt, be);
    void *bufs[] = {z->master, z->grad_part, z->param_part, z->grad_work[0], z->grad_work[1], z->grad_shared};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(bufs[i]);
    if (z->stage == 3) zero_stage3_free(z);
    free(z->unit_ticket);
    if (z->m->hooks == &z->hooks) z->m->hooks = NULL;
    memset(z, 0, sizeof *z);
}

void zero_print_memory(const ZeroState *z) {
    const ZeroMem *k = &z->mem;
    printf("ZeRO stage %d, rank %d of %d: allocated params %zu B, grads %zu B, master %zu B, moments %zu B "
           "(partition [%zu, %zu) of %zu); work buffers %zu B; allocator in use %zu B; host optimizer state %zu B",
           z->stage, z->comm->rank, z->comm->world, k->params, k->grads, k->master, k->moments, z->part.begin,
           z->part.end, z->m->lay.total, k->grad_work + k->param_work, z->m->be->mem_in_use(), k->host);
    if (z->offload) printf(" (offloaded%s; + %zu B staging)", z->off.pinned ? ", pinned" : "", z->off.stage_bytes);
    printf("; device peak so far %zu B\n", z->m->be->mem_peak());
    fflush(stdout);
}

// The compute stream waits for every collective issued so far (the weights' all-gather
// of stages 1-2 may still be in flight after a step) and the units stop waiting for them.
static void zero_settle(ZeroState *z) {
    comm_wait_all(z->comm);
    for (int u = 0; u < z->m->lay.n_units; u++) z->unit_ticket[u] = COMM_TICKET_NONE;
}

void zero_params_to_host(ZeroState *z, float *host) {
    T5Model *m = z->m;
    zero_settle(z);
    if (z->stage == 0) {  // every rank holds the same whole model
        if (z->comm->rank == 0) t5_params_to_host(m, host);
        return;
    }
    // the fp32 weights of this rank's partition, then every partition to rank 0
    size_t np = z->part.end - z->part.begin;
    const float *src = z->master ? z->master
                       : z->stage == 3 ? (const float *)z->param_part
                                       : (const float *)m->params + z->part.begin;
    float *mine = mallocCheck((np ? np : 1) * sizeof(float));
    if (z->offload) memcpy(mine, z->off.master, np * sizeof(float));  // already in host memory
    else m->be->to_host(mine, src, np * sizeof(float));
    comm_gather_partitions_host_f32(z->comm, mine, host, m->lay.total);
    free(mine);
}

// Evaluation and generation read the weights through the same hooks as training: stages
// 0-2 hold them whole (after the last all-gather lands); stage 3 keeps gathering unit by
// unit (never the whole model on one rank), and generation steps in lock-step across
// ranks (T5UnitHooks.all_finished). The learned fetch order adapts to generation's.
void zero_eval_begin(ZeroState *z) {
    if (z) zero_settle(z);
}

void zero_eval_end(ZeroState *z) {
    (void)z;
}
