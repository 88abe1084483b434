// zero/params_fetch.h: ZeRO stage 3's compute weights, as one object (ZeroFetch, owned by
// ZeroState): the rank's partition of them, and the units gathered from every rank's
// partition when forward, backward or generation reads them, in a small pool of buffers,
// with the persistent units and the learned prefetch (zero/params_fetch.c says how).
// zero/step.c calls fetch and release around each segment of a training step, zero/eval.c
// around evaluation's; zero/zero.c places the partition (ZeroFetch.params).
#pragma once
#include <stddef.h>

#include "../common/range.h"
#include "../comm/comm.h"
#include "../model/t5.h"
#include "options.h"

typedef struct {
    T5Model *m;                 // its unit_params point at the units in use
    const Comm *comm;
    Range part;                 // this rank's partition of [0, lay.total)
    size_t gather_bucket;       // elements per all-gather (allgather_bucket_size; 0 = a whole unit)
    // the partition of the compute weights (part) act dtype: device memory, or host memory
    // with offload_param (on_host; pinned: page-locked), whose pieces go up into `up` (the
    // largest piece of a unit this rank owns, device) to be gathered
    void *params;
    int on_host, pinned;
    void *up;
    // a pool of buffers (largest non-persistent unit each) holding gathered units, each
    // remembering its unit (-1: none) until the weights change
    int n_pool;
    void **pool;                // (n_pool) buffers
    int *pool_unit;             // (n_pool) the unit a buffer holds, or -1
    CommTicket *pool_ticket;    // (n_pool) the gather that last wrote it
    int *pool_ahead;            // (n_pool) 1: filled by a prefetch and not used since
    int fetched, fetched_buf;   // the unit in use and its buffer (-1: none, or a persistent unit)
    // units of at most stage3_param_persistence_threshold elements stay gathered on every rank
    // in one buffer, refreshed after each update (persist_ticket: that gather, waited for at
    // the unit's next fetch)
    void *persist;
    size_t *persist_off;        // (lay.n_units) element offset in persist, or SIZE_MAX
    CommTicket *persist_ticket; // (lay.n_units)
    // the fetch order is learned, not declared: succ[(a, b)] is the unit fetched after a and
    // then b last time (-1: unknown). Two units of history tell forward from backward (enc4,
    // enc5 -> enc6; enc6, enc5 -> enc4) and training from generation.
    int *succ;                  // ((n_units + 1)^2)
    int hist_a, hist_b;         // the two units fetched last (-1: none)
    size_t prefetch_elems;      // stage3_prefetch_bucket_size: elements gathered ahead (0: none)
    size_t max_reuse;           // stage3_max_reuse_distance: a unit needed again within this many
                                // elements is not overwritten by a prefetch
    long n_gathered, n_prefetched, n_reused;  // fetches that waited for a gather / found a prefetch / reused a buffer
} ZeroFetch;

// Set up the pool and the persistent units, once f->params holds the partition (zero_init:
// f->m, comm, part, params, on_host, pinned, up set); the persistent units are gathered now.
// *param_work: the device bytes the pool and the persistent buffer took are added to it.
void zero_fetch_init(ZeroFetch *f, const ZeroOptions *o, size_t *param_work);
// Frees what zero_fetch_init allocated and the partition (params, up).
void zero_fetch_free(ZeroFetch *f);
// Before a unit's weights are read: all-gather the unit into a pool buffer, unless it is
// there already (gathered ahead or still there from its last use), and prefetch the units
// the learned order says come next; m->unit_params[unit] then points at it.
void zero_fetch_unit(ZeroFetch *f, int unit);
// The unit is no longer in use (it stays in its buffer while the order needs it again soon).
void zero_fetch_release(ZeroFetch *f, int unit);
// The weights changed (after an update): the gathered copies are stale; the persistent units
// are gathered again and the next forward's first units prefetched, asynchronously.
void zero_fetch_forget(ZeroFetch *f);
// Every collective issued so far has finished (zero_sync): no ticket needs a wait any more.
void zero_fetch_collectives_done(ZeroFetch *f);
// One line with the fetches so far: gathered on demand, found gathered ahead by a prefetch,
// found still gathered from an earlier use (how well the prefetch predicts).
void zero_fetch_print_stats(const ZeroFetch *f);

// The stage-3 buffers the options give for a layout: pool buffers x elements each, and the
// persistent units' elements (the planner and zero_fetch_init agree through this).
typedef struct {
    int n_pool;
    size_t pool_elems, persist_elems;
    int max_live_below_two;  // stage3_max_live_parameters admits fewer than two units (said at start-up)
} Stage3Buffers;
Stage3Buffers zero_stage3_buffers(const ParamLayout *L, const ZeroOptions *o);
// One line per stage-3 key saying what it does in this run (start-up, rank 0).
void zero_stage3_describe(const ParamLayout *L, const ZeroOptions *o, const char *path);
