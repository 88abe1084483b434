// dist/comm_nccl.h: the NCCL side of dist/comm.h, for GPU ranks (dist/comm_nccl.cu; built
// only with CUDA). comm.c calls these when Comm.nccl is set; buffers are device pointers
// on the backend's stream (kernels/cuda: cuda_stream()), so collectives are ordered with
// the kernels around them.
#pragma once
#include <stddef.h>

#include "comm.h"
#include "../zero/partition.h"

#ifdef __cplusplus
extern "C" {
#endif

// Create the communicator over c->world ranks (rank c->rank) on device c->local_rank.
// The unique id is made by rank 0 and sent to the others over MPI when c->mpi, else over
// TCP to MASTER_ADDR:MASTER_PORT (torchrun/Slurm/--num_gpus); world 1 needs neither.
void comm_nccl_init(Comm *c);
void comm_nccl_finalize(Comm *c);
// Device collectives run on the communication stream after the compute stream's queued
// work; async 0: the compute stream then waits for them; async 1: it does not, and the
// returned ticket slot is what comm_nccl_wait takes.
void comm_nccl_allreduce_sum(const Comm *c, void *buf, size_t n, Dtype t);
int comm_nccl_allgather_range(const Comm *c, const void *mine, void *out, size_t lo, size_t hi, size_t n_total,
                              Dtype t, int async);
int comm_nccl_reduce_scatter_range(const Comm *c, const void *send, void *recv, size_t lo, size_t hi,
                                   size_t n_total, Dtype t, int async);
void comm_nccl_wait(const Comm *c, int slot);  // slot < 0: everything issued so far
// one group of all-reduces of at most `bucket` elements (0: one); returns the ticket slot
int comm_nccl_allreduce_sum_buckets(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t, int async);
// host arrays through a device staging buffer (ranks without MPI)
void comm_nccl_allreduce_host(const Comm *c, void *buf, size_t n, int is_f64);
void comm_nccl_gather_partitions_host_f32(const Comm *c, const float *mine, float *all, size_t n_total);
void comm_nccl_barrier(const Comm *c);
void comm_nccl_gather_bytes_host(const Comm *c, const void *mine, size_t n, char **all, size_t *counts);
void comm_nccl_timing(const Comm *c, int on);
double comm_nccl_busy_ms(const Comm *c);

// The piece of [lo, hi) that rank r owns ([lo, hi) ∩ partition_range(n_total, world, r)),
// as offsets relative to lo (empty: begin == end). Shared by both sides (comm.c).
Range comm_piece_of(const Comm *c, int r, size_t lo, size_t hi, size_t n_total);

#ifdef __cplusplus
}
#endif
