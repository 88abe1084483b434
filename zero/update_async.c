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
// T5_SYNC_UPDATE=1 (a test hook) runs the update on the calling thread instead, then
// publishes as without offload: the same bits, for the CPU tests' comparison.
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
// one's piece to land, then all-gather it (several ranks).
static void publish_through(ZeroState *z, int unit) {
    for (int u = 0; u <= unit; u++) {
        if (!z->upd.unit_stale[u]) continue;
        size_t need = unit_owned_end(z, u);
        double t0 = clock_seconds();
        pthread_mutex_lock(&z->upd.mu);
        while (z->upd.done < need) pthread_cond_wait(&z->upd.cv, &z->upd.mu);
        pthread_mutex_unlock(&z->upd.mu);
        double waited = clock_seconds() - t0;
        z->upd.waited += waited;
        z->phases.fwd_wait_s += waited;
        zero_allgather_unit(z, u);
        z->upd.unit_stale[u] = 0;
    }
}

void zero_update_publish_unit(ZeroState *z, int unit) {
    if (z->upd.unit_stale[unit]) publish_through(z, unit);
}

void zero_update_join(ZeroState *z) {
    if (!z->upd.running) return;
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
