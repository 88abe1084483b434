// zero/zero.c: set-up and tear-down of a rank's ZeRO state, the memory report, and the
// whole-model views (checkpoint weights, evaluation) that every stage needs (zero.h).
#include "zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/half.h"
#include "checkpoint.h"

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

// Where zero_init takes the weights from: the fp32 host copy, the random init made in
// place (zero_init_random), or a checkpoint's shards read by ranges (zero_init_checkpoint).
typedef struct {
    const float *host;  // lay.total floats, or NULL
    int random;         // 1: params_init_random's values (seed), made by the backend
    unsigned long long seed;
    ZeroShardReader *shards;  // non-NULL: the fp32 master of a checkpoint
    size_t chunk;             // shards: elements read at a time (zero_ckpt_chunk_elems)
    size_t read_peak;         // shards, counting mode: the most bytes a read held
} WeightsSrc;

static int src_has(const WeightsSrc *w) { return w->host || w->random || w->shards; }

// Counting mode: what one read of the shards allocates on top of what is there.
static size_t read_begin(void) {
    check_mem_reset_peak();
    return check_mem_current();
}
static void read_end(WeightsSrc *w, size_t base) {
    size_t p = check_mem_peak();
    if (p > base && p - base > w->read_peak) w->read_peak = p - base;
}

// Elements [lo, lo+k) of the checkpoint's master into the backend buffer dst of dtype dt,
// a chunk at a time.
static void shards_put(WeightsSrc *w, const Backend *be, void *dst, Dtype dt, size_t lo, size_t k) {
    size_t base = read_begin();
    float *tmp = mallocCheck((k < w->chunk ? (k ? k : 1) : w->chunk) * sizeof(float));
    for (size_t off = 0; off < k; off += w->chunk) {
        size_t c = k - off < w->chunk ? k - off : w->chunk;
        zero_shards_read_master(w->shards, lo + off, lo + off + c, tmp);
        if (dt == DTYPE_F32) be->to_device((char *)dst + off * sizeof(float), tmp, c * sizeof(float));
        else upload_weights(be, (char *)dst + off * sizeof(uint16_t), tmp, c);
    }
    freeCheck(tmp);
    read_end(w, base);
}

// Elements [lo, lo+k) of the weights into the backend buffer dst of dtype dt.
static void src_put(WeightsSrc *w, const T5Model *m, void *dst, Dtype dt, size_t lo, size_t k) {
    const Backend *be = m->be;
    if (w->shards) {
        shards_put(w, be, dst, dt, lo, k);
    } else if (w->random) {
        params_init_random_backend(be, &m->cfg, &m->lay, w->seed, lo, lo + k, dst, dt);
    } else if (dt == DTYPE_F32) {
        be->to_device(dst, w->host + lo, k * sizeof(float));
    } else {
        upload_weights(be, dst, w->host + lo, k);
    }
}

// Elements [lo, lo+k) of the weights into host memory dst of dtype dt (an offloaded master,
// offload_param's partition).
static void src_put_host(WeightsSrc *w, const T5Model *m, void *dst, Dtype dt, size_t lo, size_t k) {
    size_t base = w->shards ? read_begin() : 0;
    float *f32 = dt == DTYPE_F32 ? dst : mallocCheck(k ? k * sizeof(float) : 1);
    if (w->shards) zero_shards_read_master(w->shards, lo, lo + k, f32);
    else if (w->random) params_init_random_range(&m->cfg, &m->lay, w->seed, lo, lo + k, f32);
    else memcpy(f32, w->host + lo, k * sizeof(float));
    if (dt != DTYPE_F32) {
        half_from_f32_array(dst, f32, k, dt == DTYPE_BF16);
        freeCheck(f32);
    }
    if (w->shards) read_end(w, base);
}

static size_t largest_unit(const ParamLayout *L, int skip) {
    size_t best = 0;
    for (int u = 0; u < L->n_units; u++)
        if (u != skip && L->units[u].hi - L->units[u].lo > best) best = L->units[u].hi - L->units[u].lo;
    return best;
}

ZeroOptions zero_options_stage(int stage) {
    // stage 3 without a config: DeepSpeed's defaults for the stage-3 keys
    ZeroOptions o = {.stage = stage, .nvme_aio = NVME_AIO_DEFAULT, .prefetch = 1, .prefetch_elems = 50000000, .max_live = 1000000000,
                     .persist_threshold = 100000, .max_reuse = 1000000000};
    return o;
}

// model_load deferred everything (defer_weights): allocate the compute weights and the
// gradients the stage keeps whole, straight from the host copy (stage 3's partition and
// stage 2-3's gradient partition come later): no whole copy the stage does not keep. Whole
// buffers t5_init allocated are counted by their size (the backends' allocators count
// exactly the bytes asked for: kernels/backend.h mem_in_use).
static void place_whole(ZeroState *z, WeightsSrc *w, int training) {
    T5Model *m = z->m;
    const Backend *be = m->be;
    size_t n = m->lay.total, e = m->elem;
    const int deferred = !m->params && src_has(w);
    if (z->stage < 3) {
        if (deferred) {
            m->params = counted_alloc(be, n * e, &z->mem.params);
            src_put(w, m, m->params, be->act_dtype, 0, n);
        } else if (m->params) {
            z->mem.params = n * e;
        }
    }
    if (!training && m->grads) {  // evaluation: no gradient (t5_init's whole one freed)
        be->free(m->grads);
        m->grads = NULL;
    }
    if (z->stage < 2 && training) {
        if (deferred) m->grads = counted_alloc(be, n * e, &z->mem.grads);
        else if (m->grads) z->mem.grads = n * e;
    }
}

// The fp32 master of the owned range: in host memory with the moments (offload, fp32
// compute too), on the device from the host copy (16-bit compute), or nowhere: fp32
// compute trains the weights in place.
static void place_master(ZeroState *z, WeightsSrc *w, int pinned, const char *nvme_dir, const NvmeAio *aio,
                         const AdamWConfig *oc) {
    T5Model *m = z->m;
    const Backend *be = m->be;
    size_t b = z->part.begin, np = z->part.end - z->part.begin;
    if (oc && be->act_dtype != DTYPE_F32 && !src_has(w))
        t5_die(__FILE__, __LINE__, "zero_init: 16-bit training without the fp32 weights on the host",
               "a bug in the caller: load with ModelLoadOptions.host_weights and pass them to zero_init");
    if (z->offload) {
        const int on_nvme = nvme_dir && nvme_dir[0];
        if ((w->random || w->shards) && !on_nvme) {  // the random init / checkpoint straight into the host master
            offload_init(&z->off, &z->opt, be, *oc, z->part.begin, z->part.end, NULL, 1, pinned, nvme_dir,
                         aio, z->comm->rank);
            src_put_host(w, m, z->off.master, DTYPE_F32, b, np);
            z->mem.host = z->off.host_bytes;
            return;
        }
        float *made = NULL;  // NVMe: the owned range made (or read) on the host, then written out
        if (w->random || w->shards) {
            made = mallocCheck(np ? np * sizeof(float) : 1);
            src_put_host(w, m, made, DTYPE_F32, b, np);
        }
        const float *src = made ? made : w->host ? w->host + b : (const float *)m->params + b;
        offload_init(&z->off, &z->opt, be, *oc, z->part.begin, z->part.end, src, made || w->host, pinned, nvme_dir,
                     aio, z->comm->rank);
        freeCheck(made);
        z->mem.host = z->off.host_bytes;
    } else if (oc && be->act_dtype != DTYPE_F32 && src_has(w)) {  // evaluation: the compute weights only
        z->master = counted_alloc(be, np * sizeof(float), &z->mem.master);
        src_put(w, m, z->master, DTYPE_F32, b, np);
    }
}

// The most elements of one unit this rank owns (the size of offload_param's upload buffer).
static size_t largest_owned_piece(const ZeroState *z) {
    const ParamLayout *L = &z->m->lay;
    size_t most = 0;
    for (int u = 0; u < L->n_units; u++) {
        size_t lo = L->units[u].lo > z->part.begin ? L->units[u].lo : z->part.begin;
        size_t hi = L->units[u].hi < z->part.end ? L->units[u].hi : z->part.end;
        if (hi > lo && hi - lo > most) most = hi - lo;
    }
    return most;
}

// Stage >= 2: the gradient of the partition, and work buffers for the units in flight.
static void place_grads(ZeroState *z) {
    T5Model *m = z->m;
    const Backend *be = m->be;
    const ParamLayout *L = &m->lay;
    size_t e = m->elem, np = z->part.end - z->part.begin;
    if (m->grads) be->free(m->grads);
    m->grads = NULL;
    const ParamUnit *sh = &L->units[L->unit_shared];
    z->grads.shared = counted_alloc(be, (sh->hi - sh->lo) * e, &z->mem.grad_work);
    for (int k = 0; k < 2; k++)
        z->grads.work[k] = counted_alloc(be, largest_unit(L, L->unit_shared) * e, &z->mem.grad_work);
    if (!z->offload) {
        z->grads.part = counted_alloc(be, np * e, &z->mem.grads);
        return;
    }
    // offload: the partition's gradient in host memory, page-locked (the pieces go down on the
    // copy engine during backward, straight from the work buffers)
    z->grads.on_host = 1;
    z->grads.part = be->host_alloc(np * e, 1);
    z->mem.host_grads = np * e;
    z->grads.sq = calloc((size_t)L->count + 1, sizeof(double));
    if (!z->grads.sq) t5_die(__FILE__, __LINE__, "out of host memory", "free host RAM");
}

// offload_param: the partition in host memory (page-locked with pin_memory), and a device
// buffer for the piece of a unit a gather sends (params_fetch.c gather_unit).
static void place_stage3_params_host(ZeroState *z, WeightsSrc *w, int pinned) {
    T5Model *m = z->m;
    const Backend *be = m->be;
    ZeroFetch *f = &z->fetch;
    size_t e = m->elem, np = z->part.end - z->part.begin;
    f->on_host = 1;
    f->pinned = pinned;
    f->params = be->host_alloc(np * e, pinned);
    z->mem.host += np * e;
    if (m->params) {  // a whole copy on the device: this rank's piece comes down, the copy goes
        be->to_host(f->params, (char *)m->params + z->part.begin * e, np * e);
        be->free(m->params);
        m->params = NULL;
    } else {
        src_put_host(w, m, f->params, be->act_dtype, z->part.begin, np);
    }
    size_t piece = largest_owned_piece(z);
    f->up = counted_alloc(be, (piece ? piece : 1) * e, &z->mem.param_work);
}

// Stage 3: the partition of the compute weights (units are gathered on use: z->fetch), from
// the whole copy (freed before the partition is taken) or straight from the host copy.
static void place_stage3_params(ZeroState *z, WeightsSrc *w, const ZeroOptions *o) {
    T5Model *m = z->m;
    const Backend *be = m->be;
    size_t e = m->elem, np = z->part.end - z->part.begin;
    z->fetch.m = m;
    z->fetch.comm = z->comm;
    z->fetch.part = z->part;
    if (o->offload_param) return place_stage3_params_host(z, w, o->offload_param_pin);
    if (m->params) {
        void *staged = mallocCheck(np ? np * e : 1);
        be->to_host(staged, (char *)m->params + z->part.begin * e, np * e);
        be->free(m->params);
        m->params = NULL;
        z->fetch.params = counted_alloc(be, np * e, &z->mem.params);
        be->to_device(z->fetch.params, staged, np * e);
        free(staged);
    } else {
        z->fetch.params = counted_alloc(be, np * e, &z->mem.params);
        src_put(w, m, z->fetch.params, be->act_dtype, z->part.begin, np);
    }
}

// The record of where the owned range lives (owned.h), from what the place_* above left.
static void owned_build(ZeroState *z) {
    const T5Model *m = z->m;
    const Dtype act = m->be->act_dtype;
    ZeroOwned *w = &z->own;
    memset(w, 0, sizeof *w);
    w->range = z->part;
    w->range_is_partition = z->stage >= 1;
    void *compute = z->stage == 3 ? z->fetch.params : (char *)m->params + z->part.begin * m->elem;
    if (z->offload && z->off.on_nvme) w->master = (OwnedBuf){&z->off.nvme, OWNED_NVME, DTYPE_F32, NVME_MASTER};
    else if (z->offload) w->master = (OwnedBuf){z->off.master, OWNED_HOST, DTYPE_F32, 0};
    else if (z->master) w->master = (OwnedBuf){z->master, OWNED_DEVICE, DTYPE_F32, 0};
    else if (act == DTYPE_F32) w->master = (OwnedBuf){compute, OWNED_DEVICE, DTYPE_F32, 0};
    if (z->offload || z->master) w->params = (OwnedBuf){compute, z->fetch.on_host ? OWNED_HOST : OWNED_DEVICE, act, 0};
    if (z->offload && z->off.on_nvme) {
        w->m = (OwnedBuf){&z->off.nvme, OWNED_NVME, DTYPE_F32, NVME_EXP_AVG};
        w->v = (OwnedBuf){&z->off.nvme, OWNED_NVME, DTYPE_F32, NVME_EXP_AVG_SQ};
    } else if (z->opt.m) {
        OwnedPlace p = z->offload ? OWNED_HOST : OWNED_DEVICE;
        w->m = (OwnedBuf){z->opt.m, p, DTYPE_F32, 0};
        w->v = (OwnedBuf){z->opt.v, p, DTYPE_F32, 0};
    }
    w->grads_partitioned = z->stage >= 2;
    w->grad_range = z->stage >= 2 ? z->part : (Range){0, m->lay.total};
    w->grads = (OwnedBuf){z->stage >= 2 ? z->grads.part : m->grads, z->grads.on_host ? OWNED_HOST : OWNED_DEVICE, act, 0};
}

static void zero_init_from(ZeroState *z, T5Model *m, const Comm *comm, const ZeroOptions *o, const AdamWConfig *oc,
                           WeightsSrc *w) {
    int stage = o->stage;
    if (stage < 0 || stage > 3) t5_fail("ZeRO stage %d: expected 0, 1, 2 or 3", stage);
    memset(z, 0, sizeof *z);
    const Backend *be = m->be;
    z->stage = stage;
    z->comm = comm;
    z->m = m;
    z->reduce_bucket = o->reduce_bucket;
    z->gather_bucket = o->gather_bucket;
    z->overlap_comm = o->overlap_comm;
    z->offload = o->offload_optimizer && oc;
    if (z->offload && stage < 1)
        t5_fail("offload_optimizer needs ZeRO stage 1, 2 or 3 (DeepSpeed's rule): set zero_optimization.stage");
    z->grads.work_ticket[0] = z->grads.work_ticket[1] = z->grads.shared_ticket = COMM_TICKET_NONE;
    z->part = stage >= 1 ? partition_range(m->lay.total, comm->world, comm->rank) : (Range){0, m->lay.total};
    place_whole(z, w, oc != NULL);
    place_master(z, w, o->pin_memory, o->nvme_path, &o->nvme_aio, oc);
    if (stage >= 2 && oc) place_grads(z);
    if (stage == 3) place_stage3_params(z, w, o);
    t5_bind_flat(m);
    z->unit_ticket = mallocCheck((size_t)m->lay.n_units * sizeof(CommTicket));
    for (int u = 0; u < m->lay.n_units; u++) z->unit_ticket[u] = COMM_TICKET_NONE;
    if (stage == 3) zero_fetch_init(&z->fetch, o, &z->mem.param_work);
    z->debug = zero_debug_from_env(comm->rank);  // (a malformed T5_TEST_OVERFLOW_STEP stops here)
    z->upd.unit_stale = callocCheck((size_t)m->lay.n_units, 1);
    z->upd.on = oc && zero_update_overlaps(z);
    if (z->upd.on) {
        pthread_mutex_init(&z->upd.mu, NULL);
        pthread_cond_init(&z->upd.cv, NULL);
    }
    if (oc && !z->offload) {
        size_t before = be->mem_in_use();
        adamw_init(&z->opt, be, *oc, z->part.begin, z->part.end);
        z->mem.moments = be->mem_in_use() - before;
    }
    owned_build(z);
    z->upd.side = oc && !z->upd.on && zero_update_side_overlaps(z);  // (the owned buffers placed)
}

void zero_init(ZeroState *z, T5Model *m, const Comm *comm, const ZeroOptions *o, const AdamWConfig *oc,
               float *host_weights) {
    WeightsSrc w = {.host = host_weights};
    zero_init_from(z, m, comm, o, oc, &w);
    free(host_weights);  // everything is placed
}

void zero_init_random(ZeroState *z, T5Model *m, const Comm *comm, const ZeroOptions *o, const AdamWConfig *oc,
                      unsigned long long seed) {
    if (m->params)
        t5_die(__FILE__, __LINE__, "zero_init_random: the model already has its weights",
               "a bug in the caller: load with defer_weights and device_random_init");
    WeightsSrc w = {.random = 1, .seed = seed};
    zero_init_from(z, m, comm, o, oc, &w);
}

void zero_init_checkpoint(ZeroState *z, T5Model *m, const Comm *comm, const ZeroOptions *o, const AdamWConfig *oc,
                          const char *dir) {
    if (m->params)
        t5_die(__FILE__, __LINE__, "zero_init_checkpoint: the model already has its weights",
               "a bug in the caller: load with defer_weights and shards_init");
    WeightsSrc w = {.shards = zero_shards_open(dir, m->lay.total, 0), .chunk = zero_ckpt_chunk_elems(&m->lay)};
    if (!w.shards)
        t5_die(__FILE__, __LINE__, "zero_init_checkpoint: the checkpoint has no shards",
               "a bug in the caller: shards_init only when zero_checkpoint_has_shards");
    zero_init_from(z, m, comm, o, oc, &w);
    zero_shards_close(w.shards);
    zero_ckpt_mem_print(&m->lay, comm, "weights", w.read_peak);  // what the reads alone held
}

void zero_free(ZeroState *z) {
    if (!z->m) return;  // never set up
    const Backend *be = z->m->be;
    zero_update_join(z);     // no update still reading or writing a buffer freed below
    comm_wait_all(z->comm);  // nor any collective
    if (z->offload) offload_free(&z->off, &z->opt, be);
    else if (z->opt.m) adamw_free(&z->opt, be);
    if (z->grads.on_host) {
        for (int k = 0; k < 3; k++) be->copy_wait(ZERO_SLOT_GRAD_DOWN + k);  // no piece still coming down
        be->host_free(z->grads.part, 1);
        z->grads.part = NULL;
        free(z->grads.sq);
    }
    void *bufs[] = {z->master, z->grads.part, z->grads.work[0], z->grads.work[1], z->grads.shared};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(bufs[i]);
    zero_fetch_free(&z->fetch);  // (stage 3)
    free(z->unit_ticket);
    free(z->upd.unit_stale);
    if (z->upd.on) {
        pthread_mutex_destroy(&z->upd.mu);
        pthread_cond_destroy(&z->upd.cv);
    }
    if (z->m->visitor == &z->visitor) z->m->visitor = NULL;
    memset(z, 0, sizeof *z);
}

void zero_print_memory(const ZeroState *z) {
    const ZeroMem *k = &z->mem;
    printf("ZeRO stage %d, rank %d of %d: allocated params %zu B, grads %zu B, master %zu B, moments %zu B "
           "(partition [%zu, %zu) of %zu); work buffers %zu B; allocator in use %zu B; host optimizer state %zu B",
           z->stage, z->comm->rank, z->comm->world, k->params, k->grads, k->master, k->moments, z->part.begin,
           z->part.end, z->m->lay.total, k->grad_work + k->param_work, z->m->be->mem_in_use(), k->host);
    if (z->offload && z->off.on_nvme)
    {
        char io[256];
        nvme_describe(&z->off.nvme, io, sizeof io);
        printf(" (offloaded to NVMe: %zu B in %s; + %zu B staging; I/O: %s)", z->off.nvme_bytes, z->off.nvme.path,
               z->off.stage_bytes, io);
    }
    else if (z->offload)
        printf(" (offloaded%s; + %zu B staging)", z->off.pinned ? ", pinned" : "", z->off.stage_bytes);
    if (z->grads.on_host) printf("; gradient partition in host memory %zu B (pinned)", k->host_grads);
    if (z->upd.on) printf("; the CPU update overlaps the next forward");
    if (z->upd.side) printf("; the update overlaps the next forward (side stream)");
    printf("; device peak so far %zu B\n", z->m->be->mem_peak());
    fflush(stdout);
}

// The offloaded update has finished, the compute stream waits for every collective issued
// so far (the weights' all-gather of stages 1-2 may still be in flight after a step) and
// the units stop waiting for them.
void zero_sync(ZeroState *z) {
    zero_update_join(z);
    comm_wait_all(z->comm);
    for (int u = 0; u < z->m->lay.n_units; u++) z->unit_ticket[u] = COMM_TICKET_NONE;
    if (z->stage == 3) zero_fetch_collectives_done(&z->fetch);
}

void zero_stage3_print_stats(const ZeroState *z) {
    if (z->stage == 3) zero_fetch_print_stats(&z->fetch);
}

void zero_params_to_host(ZeroState *z, float *host) {
    T5Model *m = z->m;
    const ZeroOwned *w = &z->own;
    zero_sync(z);
    if (w->master.place == OWNED_NONE)
        t5_die(__FILE__, __LINE__, "zero_params_to_host: no fp32 weights (16-bit compute loaded without them)",
               "a bug in the caller: load with ModelLoadOptions.host_weights and pass them to zero_init");
    if (!w->range_is_partition) {  // every rank holds the same whole model
        if (z->comm->rank == 0) zero_owned_f32_to_host(&w->master, m->be, 0, m->lay.total, host);
        return;
    }
    // the fp32 weights of this rank's partition, then every partition to rank 0
    size_t np = w->range.end - w->range.begin;
    float *mine = mallocCheck((np ? np : 1) * sizeof(float));
    zero_owned_f32_to_host(&w->master, m->be, 0, np, mine);
    comm_gather_partitions_host_f32(z->comm, mine, host, m->lay.total);
    free(mine);
}

int zero_has_fp32_weights(const ZeroState *z) {
    return z->own.master.place != OWNED_NONE;
}

int zero_weights_partitioned(const ZeroState *z) {
    return z->own.range_is_partition;
}

Range zero_weights_piece(const ZeroState *z, size_t lo, size_t hi) {
    Range own = z->own.range, none = {0, 0};
    if (!z->own.range_is_partition) return z->comm->rank == 0 ? (Range){lo, hi} : none;
    Range p = {lo > own.begin ? lo : own.begin, hi < own.end ? hi : own.end};
    return p.begin < p.end ? p : none;
}

void zero_weights_piece_to_host(const ZeroState *z, Range p, float *dst) {
    zero_owned_f32_to_host(&z->own.master, z->m->be, p.begin - z->own.range.begin, p.end - p.begin, dst);
}

void zero_resume_at_step(ZeroState *z, long steps) {
    z->steps_seen = steps;
}
