// zero/update_async.h: the state of the offloaded update's own thread at stages 1-2
// (ZeroUpdateAsync, owned by ZeroState as z->upd): the step's CPU update runs on it while the
// next forward starts (zero/update_async.c says how; its functions are declared in zero.h,
// as they work on the whole ZeroState).
#pragma once
#include <pthread.h>
#include <stddef.h>

typedef struct {
    int on;                     // this run does so (zero_update_overlaps)
    int running;                // a thread is updating (zero_update_join ends it)
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t done;                // elements of the owned range whose new weights are on the device
    float lr, scale;
    double t0, seconds, waited; // step_times: the thread's start, its run, forward's waits
    unsigned char *unit_stale;  // (lay.n_units) 1: the unit's new weights are not published yet
} ZeroUpdateAsync;
