// zero/params_fetch.c: ZeRO stage 3 = the compute weights are partitioned as well (ZeroFetch,
// params_fetch.h). A rank keeps only its partition of them (zero_init frees the whole copy);
// before forward, backward
// or generation reads a unit (model/params.h: the embedding, one block, a final norm, an
// untied head), fetch all-gathers the unit's pieces from every rank into a buffer of a
// small pool, in buckets of allgather_bucket_size elements, and release marks it no
// longer in use. A buffer remembers its unit until the optimizer changes the weights, so
// a unit used twice in a row (the tied embedding: the head at the end of forward, again
// at the start of backward; or the head of one generation step and the embedding of the
// next) is gathered once. Gradients go as at stage 2 (zero/grads_reduce_scatter.c).
//
// DeepSpeed's stage-3 keys, as they act here (a unit is the smallest piece gathered, so
// sizes are counted in whole units):
//   stage3_prefetch_bucket_size (elements)  how far ahead to gather: after fetching a unit,
//       the coming units are gathered on the communication stream (GPU ranks) while the
//       current one computes, as long as their elements fit in this budget; at least one
//       unit when it is > 0, none when 0.
//   stage3_max_live_parameters (elements)   bounds the pool: buffers = min(1 + the units
//       the prefetch budget can hold, max_live / largest unit), at least one.
//   stage3_max_reuse_distance (elements)    on release, a unit stays in its buffer only
//       when the predicted order needs it again within this many fetched elements.
//   stage3_param_persistence_threshold      units of at most this many elements (final
//       norms at HF's "auto", 10 x d_model) stay gathered on every rank in one small
//       buffer: gathered once after each update, never fetched again.
// Which unit comes next is learned, not declared: succ[(a, b)] remembers the unit fetched
// after a and then b. Two units of history tell forward from backward and training from
// generation; after one pass of any pattern the predictions are right, and a wrong one
// only costs a gather that was not started early. Eviction picks the buffer whose unit the
// predicted order needs last (or never).
#include "params_fetch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

static size_t unit_size(const ParamLayout *L, int u) { return L->units[u].hi - L->units[u].lo; }

static int is_persistent(const ParamLayout *L, const ZeroOptions *o, int u) {
    return o->persist_threshold > 0 && unit_size(L, u) <= o->persist_threshold;
}

Stage3Buffers zero_stage3_buffers(const ParamLayout *L, const ZeroOptions *o) {
    Stage3Buffers b = {0};
    size_t smallest = SIZE_MAX;
    for (int u = 0; u < L->n_units; u++) {
        size_t k = unit_size(L, u);
        if (is_persistent(L, o, u)) {
            b.persist_elems += k;
            continue;
        }
        if (k > b.pool_elems) b.pool_elems = k;
        if (k < smallest) smallest = k;
    }
    if (b.pool_elems == 0) return b;  // every unit persists: no pool
    // one buffer for the unit in use, plus what the prefetch budget holds (>= 1 unit when on)
    size_t ahead = 0;
    if (o->prefetch && o->prefetch_elems > 0) {
        ahead = o->prefetch_elems / smallest;
        if (ahead < 1) ahead = 1;
    }
    size_t n = 1 + ahead;
    if (n < 2) n = 2;  // keep the last unit too: the tied embedding's reuse
    size_t live = o->max_live ? o->max_live / b.pool_elems : n;
    if (live < 2) b.max_live_below_two = 1;
    if (live < n) n = live;
    if (n < 1) n = 1;  // the unit in use is gathered whatever the limit says
    if (n > (size_t)L->n_units) n = (size_t)L->n_units;
    b.n_pool = (int)n;
    return b;
}

void zero_stage3_describe(const ParamLayout *L, const ZeroOptions *o, const char *path) {
    Stage3Buffers b = zero_stage3_buffers(L, o);
    int n_persist = 0;
    for (int u = 0; u < L->n_units; u++) n_persist += is_persistent(L, o, u);
    printf("ZeRO stage 3 (%s): units are gathered whole (largest %zu elements); pool of %d buffer%s; "
           "stage3_prefetch_bucket_size %zu: %s; stage3_max_live_parameters %zu; stage3_max_reuse_distance %zu; "
           "stage3_param_persistence_threshold %zu: %d unit%s (%zu elements) stay gathered\n",
           path, b.pool_elems, b.n_pool, b.n_pool == 1 ? "" : "s", o->prefetch_elems,
           !o->prefetch || o->prefetch_elems == 0 ? "no prefetch"
           : b.n_pool > 2 ? "prefetch as many coming units as fit (at least one)"
                          : "prefetch one unit ahead (a unit is the smallest piece gathered)",
           o->max_live, o->max_reuse, o->persist_threshold, n_persist, n_persist == 1 ? "" : "s", b.persist_elems);
    if (b.max_live_below_two)
        printf("NOTICE: %s: stage3_max_live_parameters %zu holds fewer than two units of %zu elements: %s\n", path,
               o->max_live, b.pool_elems,
               b.n_pool == 1 && o->max_live < b.pool_elems
                   ? "one unit is gathered at a time anyway (the unit in use), no prefetch and no reuse"
                   : "one unit at a time, no prefetch and no reuse");
    fflush(stdout);
}

// Gather unit u into dst (unit_size elements) from every rank's partition; returns the
// ticket of the last bucket (async) or waits (compute stream) for it. offload_param: this
// rank's piece of the unit goes up into f->up first, and the gather waits (the next
// gather's upload reuses that buffer; no prefetch overlaps it yet).
static CommTicket gather_unit(ZeroFetch *f, int u, void *dst, int async) {
    T5Model *m = f->m;
    const ParamUnit *pu = &m->lay.units[u];
    size_t e = m->elem, n = m->lay.total, step = f->gather_bucket ? f->gather_bucket : pu->hi - pu->lo;
    char *part = f->params, *work = dst;
    size_t part_first = f->part.begin;  // the flat index of part's element 0
    if (f->on_host) {
        size_t lo = pu->lo > f->part.begin ? pu->lo : f->part.begin, hi = pu->hi < f->part.end ? pu->hi : f->part.end;
        if (hi > lo) m->be->to_device(f->up, part + (lo - f->part.begin) * e, (hi - lo) * e);
        part = f->up;  // this rank's piece of the unit, element lo first
        part_first = hi > lo ? lo : f->part.end;
        async = 0;
    }
    CommTicket last = COMM_TICKET_NONE;
    for (size_t lo = pu->lo; lo < pu->hi; lo += step) {
        size_t hi = pu->hi - lo < step ? pu->hi : lo + step;
        size_t pb = lo > f->part.begin ? lo : f->part.begin;
        if (pb > f->part.end) pb = f->part.end;
        if (pb < part_first) pb = part_first;  // (offload_param, no piece here: nothing of this rank is read)
        const void *mine = part + (pb - part_first) * e;
        void *out = work + (lo - pu->lo) * e;
        if (async) last = comm_allgather_range_async(f->comm, mine, out, lo, hi, n, m->be->act_dtype);
        else comm_allgather_range(f->comm, mine, out, lo, hi, n, m->be->act_dtype);
    }
    return last;
}

static void gather_persistent(ZeroFetch *f, int async) {
    const ParamLayout *L = &f->m->lay;
    for (int u = 0; u < L->n_units; u++) {
        if (f->persist_off[u] == SIZE_MAX) continue;
        void *dst = (char *)f->persist + f->persist_off[u] * f->m->elem;
        f->persist_ticket[u] = gather_unit(f, u, dst, async);
    }
}

void zero_fetch_init(ZeroFetch *f, const ZeroOptions *o, size_t *param_work) {
    T5Model *m = f->m;
    const ParamLayout *L = &m->lay;
    const Backend *be = m->be;
    Stage3Buffers b = zero_stage3_buffers(L, o);
    f->gather_bucket = o->gather_bucket;
    f->prefetch_elems = o->prefetch ? o->prefetch_elems : 0;
    f->max_reuse = o->max_reuse;
    f->persist_off = mallocCheck((size_t)L->n_units * sizeof(size_t));
    f->persist_ticket = mallocCheck((size_t)L->n_units * sizeof(CommTicket));
    size_t off = 0;
    for (int u = 0; u < L->n_units; u++) {
        f->persist_off[u] = is_persistent(L, o, u) ? off : SIZE_MAX;
        if (f->persist_off[u] != SIZE_MAX) off += unit_size(L, u);
        f->persist_ticket[u] = COMM_TICKET_NONE;
    }
    size_t before = be->mem_in_use();
    if (b.persist_elems) f->persist = be->alloc(b.persist_elems * m->elem);
    f->n_pool = b.n_pool;
    f->pool = callocCheck((size_t)(b.n_pool ? b.n_pool : 1), sizeof(void *));
    f->pool_unit = mallocCheck((size_t)(b.n_pool ? b.n_pool : 1) * sizeof(int));
    f->pool_ticket = mallocCheck((size_t)(b.n_pool ? b.n_pool : 1) * sizeof(CommTicket));
    f->pool_ahead = callocCheck((size_t)(b.n_pool ? b.n_pool : 1), sizeof(int));
    for (int k = 0; k < b.n_pool; k++) {
        f->pool[k] = be->alloc(b.pool_elems * m->elem);
        f->pool_unit[k] = -1;
        f->pool_ticket[k] = COMM_TICKET_NONE;
    }
    *param_work += be->mem_in_use() - before;
    size_t n1 = (size_t)L->n_units + 1;
    f->succ = mallocCheck(n1 * n1 * sizeof(int));
    for (size_t i = 0; i < n1 * n1; i++) f->succ[i] = -1;
    f->hist_a = f->hist_b = -1;
    f->fetched = f->fetched_buf = -1;
    gather_persistent(f, 0);
    zero_fetch_collectives_done(f);
}

void zero_fetch_free(ZeroFetch *f) {
    if (!f->m) return;  // never set up
    const Backend *be = f->m->be;
    if (f->on_host) be->host_free(f->params, f->pinned);
    else if (f->params) be->free(f->params);
    if (f->up) be->free(f->up);
    for (int k = 0; k < f->n_pool; k++)
        if (f->pool[k]) be->free(f->pool[k]);
    if (f->persist) be->free(f->persist);
    free(f->pool);
    free(f->pool_unit);
    free(f->pool_ticket);
    free(f->pool_ahead);
    free(f->persist_off);
    free(f->persist_ticket);
    free(f->succ);
    memset(f, 0, sizeof *f);
}

void zero_fetch_collectives_done(ZeroFetch *f) {
    if (!f->persist_ticket) return;
    for (int u = 0; u < f->m->lay.n_units; u++) f->persist_ticket[u] = COMM_TICKET_NONE;
}

static int *succ_of(ZeroFetch *f, int a, int b) {
    return &f->succ[(size_t)(a + 1) * ((size_t)f->m->lay.n_units + 1) + (size_t)(b + 1)];
}

// The predicted fetch order from now: up to `cap` units after the last two fetched.
static int predict(ZeroFetch *f, int *out, int cap) {
    int a = f->hist_a, b = f->hist_b, n = 0;
    while (n < cap) {
        int c = *succ_of(f, a, b);
        if (c < 0) break;
        out[n++] = c;
        a = b;
        b = c;
    }
    return n;
}

// Position of unit u in the prediction (n entries), or n when it is not there; *elems:
// the non-persistent elements fetched before it.
static int next_use(ZeroFetch *f, const int *pred, int n, int u, size_t *elems) {
    size_t acc = 0;
    for (int i = 0; i < n; i++) {
        if (pred[i] == u) {
            if (elems) *elems = acc;
            return i;
        }
        if (f->persist_off[pred[i]] == SIZE_MAX) acc += unit_size(&f->m->lay, pred[i]);
    }
    if (elems) *elems = SIZE_MAX;
    return n;
}

// A buffer for a unit needed at prediction position `pos` (demand: -1): not in use, and
// the one whose unit is needed last (empty first). A prefetch (pos >= 0) only takes a
// buffer whose unit is needed after pos; -1: none.
static int pick_buffer(ZeroFetch *f, const int *pred, int n, int pos) {
    int best = -1, best_use = -2;
    for (int k = 0; k < f->n_pool; k++) {
        if (k == f->fetched_buf) continue;
        int use;
        if (f->pool_unit[k] < 0) use = n + 1;  // empty: the best choice
        else use = next_use(f, pred, n, f->pool_unit[k], NULL);
        if (pos >= 0 && use <= pos) continue;
        if (use > best_use) {
            best_use = use;
            best = k;
        }
    }
    return best;
}

static int buffer_of(const ZeroFetch *f, int u) {
    for (int k = 0; k < f->n_pool; k++)
        if (f->pool_unit[k] == u) return k;
    return -1;
}

// Gather the coming units into free buffers while the current one computes.
static void prefetch(ZeroFetch *f) {
    if (f->prefetch_elems == 0) return;
    const ParamLayout *L = &f->m->lay;
    int cap = 2 * L->n_units + 2;
    int *pred = mallocCheck((size_t)cap * sizeof(int));
    int n = predict(f, pred, cap);
    size_t budget = f->prefetch_elems;
    int issued = 0;
    for (int i = 0; i < n; i++) {
        int p = pred[i];
        if (f->persist_off[p] != SIZE_MAX || buffer_of(f, p) >= 0) continue;  // persistent or there already
        size_t need = unit_size(L, p);
        if (issued > 0 && need > budget) break;
        int k = pick_buffer(f, pred, n, i);
        if (k < 0) break;
        f->pool_ticket[k] = gather_unit(f, p, f->pool[k], 1);
        f->pool_unit[k] = p;
        f->pool_ahead[k] = 1;
        budget = need > budget ? 0 : budget - need;
        issued++;
    }
    free(pred);
}

void zero_fetch_unit(ZeroFetch *f, int unit) {
    T5Model *m = f->m;
    if (f->fetched >= 0)
        t5_die(__FILE__, __LINE__, "ZeRO stage 3: a unit was fetched while another one is in use",
               "forward/backward must release a unit before fetching the next");
    // learn the order: after (hist_a, hist_b) came this unit
    *succ_of(f, f->hist_a, f->hist_b) = unit;
    f->hist_a = f->hist_b;
    f->hist_b = unit;
    f->fetched = unit;
    if (f->persist_off[unit] != SIZE_MAX) {  // always gathered; wait for the refresh after an update
        comm_wait(f->comm, f->persist_ticket[unit]);
        f->persist_ticket[unit] = COMM_TICKET_NONE;
        m->unit_params[unit] = (char *)f->persist + f->persist_off[unit] * m->elem;
        f->fetched_buf = -1;
        prefetch(f);
        return;
    }
    int k = buffer_of(f, unit);
    if (k < 0) {  // not gathered (or prefetched) yet: into the buffer needed last
        const ParamLayout *L = &m->lay;
        int cap = 2 * L->n_units + 2;
        int *pred = mallocCheck((size_t)cap * sizeof(int));
        int n = predict(f, pred, cap);
        k = pick_buffer(f, pred, n, -1);
        free(pred);
        if (k < 0) t5_die(__FILE__, __LINE__, "ZeRO stage 3: no free gather buffer", "a bug: report it");
        gather_unit(f, unit, f->pool[k], 0);
        f->pool_unit[k] = unit;
        f->pool_ticket[k] = COMM_TICKET_NONE;
        f->n_gathered++;
    } else {
        if (f->pool_ahead[k]) f->n_prefetched++;
        else f->n_reused++;
        comm_wait(f->comm, f->pool_ticket[k]);  // a prefetch: wait for it to land
        f->pool_ticket[k] = COMM_TICKET_NONE;
    }
    f->pool_ahead[k] = 0;
    m->unit_params[unit] = f->pool[k];
    f->fetched_buf = k;
    // prefetch into other buffers; the gathers start after the compute queued so far,
    // which includes every use of those buffers' previous units
    prefetch(f);
}

// stage3_max_reuse_distance, as DeepSpeed reads it: a unit is released (its buffer free for
// anything) unless the predicted order needs it again within that many elements; a kept
// unit stays until the pool needs its buffer (the unit needed last goes first).
void zero_fetch_release(ZeroFetch *f, int unit) {
    T5Model *m = f->m;
    m->unit_params[unit] = NULL;
    int k = f->fetched_buf;
    f->fetched = f->fetched_buf = -1;
    if (k < 0) return;  // a persistent unit
    const ParamLayout *L = &m->lay;
    int cap = 2 * L->n_units + 2;
    int *pred = mallocCheck((size_t)cap * sizeof(int));
    int n = predict(f, pred, cap);
    size_t elems = SIZE_MAX;
    next_use(f, pred, n, unit, &elems);
    free(pred);
    if (elems == SIZE_MAX || elems > f->max_reuse) {
        f->pool_unit[k] = -1;
        f->pool_ahead[k] = 0;
    }
}

void zero_fetch_forget(ZeroFetch *f) {
    comm_wait_all(f->comm);  // no gather still writing into the buffers
    for (int k = 0; k < f->n_pool; k++) {
        f->pool_unit[k] = -1;
        f->pool_ticket[k] = COMM_TICKET_NONE;
        f->pool_ahead[k] = 0;
    }
    f->fetched = f->fetched_buf = -1;
    gather_persistent(f, 1);  // waited for at the next fetch of each
    prefetch(f);              // the next forward's first units, with the updated weights
}

void zero_fetch_print_stats(const ZeroFetch *f) {
    long total = f->n_gathered + f->n_prefetched + f->n_reused;
    printf("ZeRO stage 3, rank %d: %ld fetches: %ld gathered on demand, %ld found gathered ahead (prefetch), %ld "
           "found still gathered (reuse)\n", f->comm->rank, total, f->n_gathered, f->n_prefetched, f->n_reused);
    fflush(stdout);
}
