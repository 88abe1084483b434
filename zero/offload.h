// zero/offload.h: ZeRO-Offload of the optimizer ("offload_optimizer": {"device": "cpu"}),
// stages 1-3. The fp32 master weights and the AdamW moments of a rank's partition live in
// host memory (pinned when the config says pin_memory), 12 bytes per element of the
// partition, none of it on the GPU. The update runs on the CPU, chunk by chunk of the
// partition: the chunk's gradient comes down; in one pass it is widened to fp32, AdamW (the
// CPU backend's torch math) updates master and moments, and the new master is narrowed into
// the chunk's compute weights, which go back up into the rank's piece of the weights. The
// copies of chunks k+1 (down) and k-1 (up) overlap chunk k's update (offload.c). Stage 1-2's
// all-gather (or stage 3's gathers) then spread them as without offload.
#pragma once
#include <stddef.h>

#include "../kernels/backend.h"
#include "../model/params.h"
#include "../optim/adamw.h"
#include "nvme.h"

// Where the offloaded updates' time went (wall seconds on the updating thread, summed over
// offload_adamw_step calls since the caller last cleared it): the CPU AdamW passes, waits for
// a chunk's gradient to come down (none when backward streamed them to host memory), for a
// staging buffer's weights to have gone up (and, at the end, all of them), for NVMe reads and
// writes. bench prints them (zero/phases.h).
typedef struct {
    long steps;
    double adam_s, grad_wait_s, param_wait_s, nvme_wait_s;
    int threads;  // OpenMP threads of the last update's passes
} OffloadTimes;

typedef struct {
    int pinned;          // page-locked host buffers (pin_memory)
    float *master;       // (partition) fp32 master weights, host; NULL on NVMe
    int on_nvme;         // 1: master and moments live in nvme (a file), a chunk at a time in host memory
    NvmeStore nvme;      // (on_nvme) the rank's file: master, exp_avg, exp_avg_sq
    float *chunk_state[3][NVME_ARRAYS];  // (on_nvme) three sets of one chunk of each, aligned host
                                         // buffers: chunk k is updated in set k % 3 while k+1 is
                                         // read into the next and k-1 written from the last
    NvmeQueue reader, writer;            // (on_nvme) the I/O threads
    size_t chunk;        // elements per transfer
    void *stage_grad[2];   // (chunk) act dtype, page-locked host: gradients coming down, in turn
    void *stage_param[2];  // (chunk) act dtype, page-locked host: new compute weights going up, in turn
    size_t host_bytes;   // master + moments (12 bytes per element) in host memory, for the memory report
    size_t nvme_bytes;   // the same on NVMe (on_nvme)
    size_t stage_bytes;  // the staging buffers
    OffloadTimes times;
} ZeroOffload;

// Host buffers for a partition [begin, end); AdamW moments go into opt (host memory), or,
// with nvme_dir, master and moments into a file there (nvme.h; opt->m, v stay NULL).
// master_init: the partition's fp32 weights, on the host (init_on_host) or on the device
// (the model's master, or its fp32 params), copied once; NULL (host memory only): the
// caller writes o->master itself. rank names the NVMe file.
void offload_init(ZeroOffload *o, AdamW *opt, const Backend *be, AdamWConfig cfg, size_t begin, size_t end,
                  const float *master_init, int init_on_host, int pinned, const char *nvme_dir, const NvmeAio *aio,
                  int rank);
void offload_free(ZeroOffload *o, AdamW *opt, const Backend *be);
// One AdamW step of the partition: grads (act dtype, element opt->begin first) in device
// memory, or in host memory when grads_on_host (stage 2-3 streamed them down during
// backward: no copy here); params (act dtype, same) receives the updated compute weights:
// device memory, or host memory when params_on_host (stage 3 offload_param).
// progress (may be NULL) is called as chunks' new weights land: done = elements of the
// partition, from its first, that readers of params may now use.
typedef void (*OffloadProgress)(void *ctx, size_t done);
void offload_adamw_step(ZeroOffload *o, AdamW *opt, const Backend *be, const ParamLayout *lay, const void *grads,
                        int grads_on_host, void *params, int params_on_host, float lr, float grad_scale,
                        OffloadProgress progress, void *progress_ctx);
