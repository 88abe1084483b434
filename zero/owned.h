// zero/owned.h: where this rank's owned range lives. zero_init (zero/zero.c) decides once, per
// stage and offload, where each state of the range it updates is, and fills a ZeroOwned;
// the step (zero/step.c), the checkpoint (zero/checkpoint.c) and the weights' host copy read
// that record and never decide placement again.
//
//   state of the owned range     stage 0          stage 1-3            offload (stage 1-3)
//   range                        all of [0, Ψ)    the partition        the partition
//   master (fp32)                device, whole*   device, partition*   host (NVMe: a file)
//   moments m, v (fp32)          device           device               host (NVMe: a file)
//   gradient (act dtype)         device, whole (stage 0-1: grad_range [0, Ψ)), the partition (2-3)
//   compute weights (act dtype)  device: m->params (stage 0-2) or the stage-3 partition
//   * fp32 compute without offload: the master IS the compute weights (params.place = OWNED_NONE)
#pragma once
#include <stddef.h>

#include "../kernels/backend.h"
#include "../model/params.h"
#include "../optim/adamw.h"
#include "offload.h"
#include "partition.h"

typedef enum { OWNED_NONE = 0, OWNED_DEVICE, OWNED_HOST, OWNED_NVME } OwnedPlace;

// One state of the owned range: its first element, the memory it is in, its element type.
typedef struct {
    void *ptr;         // NULL when place is OWNED_NONE; OWNED_NVME: the NvmeStore (zero/nvme.h)
    OwnedPlace place;
    Dtype dtype;
    int nvme_array;    // OWNED_NVME: which array of the store (NVME_MASTER, NVME_EXP_AVG, NVME_EXP_AVG_SQ)
} OwnedBuf;

typedef struct {
    Range range;            // the elements this rank updates
    int range_is_partition; // 1: stage >= 1 (every rank a different range); 0: every rank all of it
    OwnedBuf master;        // (range) fp32 master weights
    OwnedBuf m, v;          // (range) fp32 AdamW moments; OWNED_NONE without an optimizer (evaluation)
    Range grad_range;       // the reduced gradient this rank holds (contains range)
    int grads_partitioned;  // 1: grad_range is this rank's piece (stage 2-3): norms are summed over ranks
    OwnedBuf grads;         // (grad_range) act dtype
    OwnedBuf params;        // (range) act dtype: the compute weights the update refreshes; OWNED_NONE
                            // when the master is them
} ZeroOwned;

// One AdamW update of the owned range, wherever it lives: on the device through the backend
// (optim/adamw.c), or on the CPU with the master and moments in host memory (zero/offload.c,
// which needs off). grad_scale multiplies every gradient first (clip, loss-scale unscaling).
// progress (may be NULL): the offloaded update reports, as it goes, how many elements of the
// range (from its first) have their new weights on the device (zero/update_async.c).
void zero_owned_update(const ZeroOwned *w, AdamW *opt, ZeroOffload *off, const Backend *be, const ParamLayout *lay,
                       float lr, float grad_scale, OffloadProgress progress, void *progress_ctx);
// The device update of the flat elements [from, to) of the owned range at opt->step, which
// the caller has advanced (optim/adamw.h adamw_step_range): zero/update_async.c's unit by unit
// update on the side stream. The master must be on the device.
void zero_owned_update_range(const ZeroOwned *w, const AdamW *opt, const Backend *be, const ParamLayout *lay, float lr,
                             float grad_scale, size_t from, size_t to);
// n fp32 elements of an owned fp32 state (master, m or v) from element `from` of the range,
// into host memory dst.
void zero_owned_f32_to_host(const OwnedBuf *b, const Backend *be, size_t from, size_t n, float *dst);
// The same the other way: host src into the owned fp32 state.
void zero_owned_f32_from_host(const OwnedBuf *b, const Backend *be, size_t from, size_t n, const float *src);
