// zero/update_async.c: ZeRO-Offload's CPU update overlapped with the next forward (stages
// 1-2). The step's norm and clip need the whole gradient, so the update cannot start before
// backward ends; but the next forward needs the new weights only unit by unit, in the
// layout's order, which is the order the update goes through the partition. So the update
// runs on its own thread (zero_update_start): offload_adamw_step reports, chunk by chunk,
// how far its new weights have landed on the device, and the next forward
// (zero_update_publish_unit, called by zero/step.c) waits for each unit only when it reaches
// it, then all-gathers
// the unit's partitions (several ranks) as params_allgather.c would have. The forward's
// first units thus run while the CPU still updates the last ones.
//
// Whatever reads the weights or the optimizer state otherwise joins the thread first
// (zero_update_join: backward, whose gradients the update still reads, the next update,
// evaluation, checkpoints, zero_free); joining publishes every unit not yet published, in
// layout order, so every rank issues the same collectives in the same order.
//
// Without offload (stages 0-2, the master on the device) the same overlap needs no thread:
// zero_update_start_side queues the update on the backend's side stream (backend.h
// side_begin), unit by unit in layout order with a point marked after each unit
// (optim/adamw.h adamw_step_range: the same bits as one pass), then the clearing of the
// gradients it read. The host goes straight on to the next forward, whose kernels wait on
// the device for unit u's point (wait_mark) only when it reaches u. On the H200 the forward's
// first units thus run while the update of the last ones uses the memory bandwidth and SMs
// they leave idle. Stage 0 on any number of ranks, stages 1-2 on one (zero_update_side_overlaps
// says why not stages 1-2 over several: their all-gathers).
//
// T5_SYNC_UPDATE=1 (a test hook) runs either update in place instead, within the step, then
// publishes as without overlap: the same bits, for the tests' comparison.
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "zero.h"

// Elements of the owned range a unit's new weights end at (relative to the range's first).
static size_t unit_owned_end(const ZeroState *z, int unit) {
    const ParamUnit *u = &z->m->lay.units[unit];
    size_t hi = u->hi < z->part.end ? u->hi : z->part.end;
    return hi > z->part.begin ? hi - z->part.begin : 0;
}

static void update_progress(void *ctx, size_t done) {
    ZeroState *z = ctx;
    pthread_mutex_lock(&z->upd.mu);
    z->upd.done = done;
    pthread_cond_broadcast(&z->upd.cv);
    pthread_mutex_unlock(&z->upd.mu);
}

static void *update_main(void *arg) {
    ZeroState *z = arg;
    // one core fewer than the host has for the update's OpenMP team: the main thread keeps
    // launching the forward beside it, and a team thread it preempted would hold up every
    // parallel pass (seen on the H200 host: 0.9-1.0 s a t5-3b update against 0.66-0.70 s
    // with idle threads sleeping)
    // (T5_OFFLOAD_THREADS sets another size, to measure this choice on a host)
    int procs = omp_get_num_procs();
    omp_set_num_threads(z->debug.offload_threads > 0 ? z->debug.offload_threads : procs > 1 ? procs - 1 : 1);
    zero_owned_update(&z->own, &z->opt, &z->off, z->m->be, &z->m->lay, z->upd.lr, z->upd.scale,
                      update_progress, z);
    update_progress(z, z->part.end - z->part.begin);
    z->upd.seconds = clock_seconds() - z->upd.t0;
    return NULL;
}

int zero_update_overlaps(const ZeroState *z) {
    return !z->debug.sync_update && z->offload && (z->stage == 1 || z->stage == 2);
}

int zero_update_side_overlaps(const ZeroState *z) {
    // Not at stage 3, which gathers (and prefetches) units from the partitions in its own order;
    // nor at stages 1-2 over several ranks: their all-gather of a unit must follow its update,
    // and the communication layer orders a collective after the compute stream only
    // (comm/comm_nccl.cu), so it would be issued when the forward reaches the unit and waited
    // for at once; in place, the update's all-gathers are all issued at the step's end and hide
    // behind the next forward's first units (params_allgather.c).
    const int gathers = (z->stage == 1 || z->stage == 2) && z->comm->world > 1;
    return !z->debug.sync_update && !z->offload && z->stage <= 2 && !gathers && z->own.master.place == OWNED_DEVICE &&
           z->m->be->side_begin != NULL;
}

void zero_update_start_side(ZeroState *z, float lr, float grad_scale) {
    const Backend *be = z->m->be;
    const ParamLayout *L = &z->m->lay;
    z->opt.step++;
    be->side_begin();
    size_t from = 0;
    for (int u = 0; u < L->n_units; u++) {  // units tile the layout in order (model/params.c)
        zero_owned_update_range(&z->own, &z->opt, be, L, lr, grad_scale, from, L->units[u].hi);
        be->side_mark(u);
        z->upd.unit_stale[u] = 1;
        from = L->units[u].hi;
    }
    if (from != L->total)
        t5_die(__FILE__, __LINE__, "zero_update_start_side: the units end before the layout does",
               "a bug in model/params.c build_units: report it");
    zero_clear_grads(z);  // on the side stream too: after the update has read them
    be->side_mark(L->n_units);
    be->side_end();
    z->upd.running = 1;
}

void zero_update_start(ZeroState *z, float lr, float grad_scale) {
    z->upd.lr = lr;
    z->upd.scale = grad_scale;
    z->upd.done = 0;
    for (int u = 0; u < z->m->lay.n_units; u++) z->upd.unit_stale[u] = 1;
    z->upd.running = 1;
    z->upd.t0 = clock_seconds();
    z->upd.waited = 0;
    int rc = pthread_create(&z->upd.thread, NULL, update_main, z);
    if (rc != 0) t5_die(__FILE__, __LINE__, "cannot start the offloaded update's thread", "raise the process's thread limit");
}

// Units first .. unit (layout order) whose new weights are not yet published: wait for each
// one's piece to land (the side stream's update: the compute stream waits for its point),
// then all-gather it (stages 1-2, several ranks).
static void publish_through(ZeroState *z, int unit) {
    for (int u = 0; u <= unit; u++) {
        if (!z->upd.unit_stale[u]) continue;
        if (!z->upd.on) {  // the side stream's update
            z->m->be->wait_mark(u);
        } else {
            size_t need = unit_owned_end(z, u);
            double t0 = clock_seconds();
            pthread_mutex_lock(&z->upd.mu);
            while (z->upd.done < need) pthread_cond_wait(&z->upd.cv, &z->upd.mu);
            pthread_mutex_unlock(&z->upd.mu);
            double waited = clock_seconds() - t0;
            z->upd.waited += waited;
            z->phases.fwd_wait_s += waited;
        }
        if (z->stage == 1 || z->stage == 2) zero_allgather_unit(z, u);
        z->upd.unit_stale[u] = 0;
    }
}

void zero_update_publish_unit(ZeroState *z, int unit) {
    if (z->upd.unit_stale[unit]) publish_through(z, unit);
}

void zero_update_join(ZeroState *z) {
    if (!z->upd.running) return;
    if (!z->upd.on) {  // the side stream's update
        publish_through(z, z->m->lay.n_units - 1);
        z->m->be->wait_mark(z->m->lay.n_units);  // the gradients are cleared
        z->upd.running = 0;
        return;
    }
    double t0 = clock_seconds();
    int rc = pthread_join(z->upd.thread, NULL);
    if (rc != 0) t5_die(__FILE__, __LINE__, "cannot join the offloaded update's thread", "a bug: report it");
    z->phases.join_wait_s += clock_seconds() - t0;
    z->phases.update_s += z->upd.seconds;
    z->upd.running = 0;
    publish_through(z, z->m->lay.n_units - 1);
    if (z->debug.step_times)
        printf("step %ld update (ms): %.1f on its own thread, %.1f of it waited for by the next forward\n",
               z->steps_seen, 1e3 * z->upd.seconds, 1e3 * z->upd.waited);
    zero_clear_grads(z);  // (stage 1: the update read the device gradient until now)
}
