// zero/grads_reduce_scatter.h: the gradient buffers of ZeRO stages 2-3 as one object
// (ZeroGradBuffers, owned by ZeroState as z->grads): the rank's gradient partition, the
// work buffers backward writes a unit's gradient into, and the tickets of the
// reduce-scatters reading them. zero/zero.c allocates them (place_grads);
// zero/grads_reduce_scatter.c (open, unit_grads, wait_host) uses them, called by zero/step.c.
#pragma once
#include "../comm/comm.h"  // CommTicket

typedef struct {
    void *part;         // (partition) act dtype: the reduced gradient of the rank's partition
    // two work buffers (largest unit but the embedding) taking turns, so backward writes one
    // unit's gradient while the previous unit's reduce-scatter reads the other; the shared
    // embedding's gradient has its own (open for all of backward)
    void *work[2];
    CommTicket work_ticket[2];  // the reduce-scatter that last read each buffer
    int next;                   // the buffer the next unit takes
    void *shared;
    CommTicket shared_ticket;
    // offload_optimizer: part is page-locked HOST memory (on_host), and no gradient partition
    // sits on the device. Each unit's piece is reduced in place in its work buffer and goes
    // down from there on the copy engine (slot ZERO_SLOT_GRAD_DOWN + the buffer's index, 2 =
    // the embedding's) while backward goes on; a micro-batch after the step's first brings the
    // piece's running sum up into the work buffer first (ZERO_SLOT_GRAD_UP), so backward adds
    // onto it. On the step's last micro-batch each piece's per-tensor norms are taken on the
    // device as it is reduced (sq), so the step needs no pass over the host copy.
    int on_host;
    int started;        // part holds this step's earlier micro-batches (0: stale, overwritten
                        // rather than added to)
    double *sq;         // (lay.count) on_host: per-tensor sums of squares of this rank's pieces
                        // (optimizer_tensor_norms_sq), filled during the last backward
} ZeroGradBuffers;

// Copy slots (kernels/backend.h) of the gradient stream above; zero/offload.c's step uses 0-3.
enum { ZERO_SLOT_GRAD_DOWN = 4, ZERO_SLOT_GRAD_UP = 7 };
