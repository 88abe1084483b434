// zero/comm.h: communication between ranks, one interface over MPI (CPU ranks, and the
// bootstrap of multi-node runs) and NCCL (GPU ranks, the next step). ZeRO's stages only
// call these collectives; nothing else in the code knows how ranks talk.
//
// Start-up: under mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set) MPI is initialized and
// every rank learns (rank, world). Without a launcher the run is one rank and no MPI call
// is made. torchrun/deepspeed-style env vars (RANK, WORLD_SIZE) with WORLD_SIZE > 1 and
// Slurm without mpirun need the TCP/NCCL bootstrap, which is not built yet: an error says
// so instead of training as one rank.
#pragma once
#include <stddef.h>

typedef struct {
    int rank, world;
    int local_rank;   // rank on this host (GPU index)
    int mpi;          // 1: MPI initialized by comm_init
} Comm;

void comm_init(Comm *c);
void comm_finalize(Comm *c);
// In-place sums over all ranks of host buffers. No-ops on one rank.
void comm_allreduce_sum_f32(const Comm *c, float *buf, size_t n);
void comm_allreduce_sum_f64(const Comm *c, double *buf, size_t n);
void comm_allreduce_sum_i64(const Comm *c, long long *buf, size_t n);
void comm_barrier(const Comm *c);
// Every rank holds its partition (zero/partition.h) of buf (n floats) up to date; afterwards
// every rank holds all of it (ZeRO stage 1/2's parameter all-gather after the update).
void comm_allgather_partitions_f32(const Comm *c, float *buf, size_t n);
