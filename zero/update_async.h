// zero/update_async.h: the state of the update that overlaps the next forward (ZeroUpdateAsync,
// owned by ZeroState as z->upd): the offloaded CPU update on its own thread at stages 1-2, or
// the device update on the backend's side stream at stages 0-2 (zero/update_async.c says how;
// its functions are declared in zero.h, as they work on the whole ZeroState).
#pragma once
#include <pthread.h>
#include <stddef.h>

typedef struct {
    int on;                     // this run's offloaded update has its own thread (zero_update_overlaps)
    int side;                   // this run's device update goes on the side stream (zero_update_side_overlaps)
    int running;                // an update is in flight (zero_update_join ends it): the thread's
                                // when on, else the side stream's (its points: unit u is mark u,
                                // the cleared gradients mark n_units)
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t done;                // elements of the owned range whose new weights are on the device
    float lr, scale;
    double t0, seconds, waited; // step_times: the thread's start, its run, forward's waits
    unsigned char *unit_stale;  // (lay.n_units) 1: the unit's new weights are not published yet
} ZeroUpdateAsync;
