// zero/phases.h: where the steps' time goes with the optimizer offloaded (ZeroPhases, in
// ZeroState as z->phases; the update's own split is z->off.times, offload.h). Host wall
// clocks only, read where the main thread already waits, so counting costs nothing and
// changes no timing (T5_STEP_TIMES synchronizes the device at each mark instead). bench
// prints one line of them per run (zero_phases_print, zero/phases.c; declared in zero.h, as it
// reads the whole ZeroState), so a GPU call shows which phase moved.
#pragma once

typedef struct {
    long steps;            // optimizer steps counted (zero_step_apply calls)
    double accumulate_s;   // zero_step_accumulate: forward and backward of the step's micro-batches, on the main thread
    double fwd_wait_s;     //   of it, forward waiting for the update's new weights of a unit (update_async.c)
    double join_wait_s;    //   of it, backward waiting for the update's thread to end (zero_update_join)
    double grads_wait_s;   //   of it, after backward's launches: waiting for its collectives and for the
                           //   gradient pieces to land in host memory (the GPU's backward ends in here)
    double apply_s;        // zero_step_apply: norms, clip, loss scale, starting the update (or all of it, in place)
    double update_s;       // the update itself, wall, on its own thread or in place
} ZeroPhases;
