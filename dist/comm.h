// dist/comm.h: communication between ranks: one interface over MPI (CPU ranks, host
// buffers) and NCCL (GPU ranks, device buffers, dist/comm_nccl.cu). ZeRO's stages only
// call these collectives; nothing else in the code knows how ranks talk.
//
// Start-up (comm_init): under mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set) MPI is
// initialized and every rank learns (rank, world). torchrun/deepspeed-style variables
// (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Slurm's (SLURM_NTASKS,
// SLURM_PROCID, SLURM_LOCALID + MASTER_ADDR/PORT) and --num_gpus (which sets the torchrun
// ones for the ranks it spawns) give (rank, world, local_rank) without MPI: dist/launch.h.
// Without a launcher the run is one rank and no MPI call is made. comm_attach_device then
// creates the NCCL communicator for GPU ranks on device local_rank (the unique id goes
// from rank 0 to the others over MPI, or over TCP to MASTER_ADDR:MASTER_PORT), and refuses
// several CPU ranks without mpirun (MPI is their only transport).
//
// Partitions: the ranged collectives below split the flat space [0, n_total) as
// zero/partition.h does (rank r owns partition_range(n_total, world, r)); a range
// [lo, hi) of it is then cut into per-rank pieces [lo, hi) ∩ partition(r), in rank order.
#pragma once
#include <stddef.h>

#include "../kernels/backend.h"
#include "launch.h"  // the launchers (--num_gpus: launch_spawn_ranks)

typedef struct {
    int rank, world;
    int local_rank;       // rank on this host (GPU index)
    int mpi;              // 1: MPI initialized by comm_init
    const char *launcher; // "none", "mpirun", "torchrun", "slurm", "num_gpus"
    void *nccl;           // NCCL communicator state (dist/comm_nccl.cu) for GPU ranks, else NULL
} Comm;

void comm_init(Comm *c);
// device: "cpu" or "cuda" (--device). GPU ranks: select the GPU of local_rank and create
// the NCCL communicator over every rank (also with one rank: the same code path). CPU
// ranks: nothing (MPI carries host buffers); several CPU ranks without MPI are an error.
// Call right after comm_init: the barriers of start-up go through NCCL when there is no MPI.
void comm_attach_device(Comm *c, const char *device);
void comm_finalize(Comm *c);

// ---- collectives on compute buffers: host memory for CPU ranks (MPI, fp32 only), device
// memory for GPU ranks (NCCL, any Dtype). One rank: copies only, never a call into MPI.

// buf (n) summed over ranks, in place.
void comm_allreduce_sum(const Comm *c, void *buf, size_t n, Dtype t);
// Gather the range [lo, hi) of a partitioned flat buffer: `mine` is this rank's piece
// ((lo, hi) ∩ its partition, possibly empty), out (hi - lo) receives every rank's piece
// in place. `mine` may point into `out` at its own position (in-place gather).
void comm_allgather_range(const Comm *c, const void *mine, void *out, size_t lo, size_t hi, size_t n_total, Dtype t);
// Reduce-scatter of the range [lo, hi): every rank has `send` (hi - lo) elements; the sum
// over ranks of this rank's piece ((lo, hi) ∩ its partition) is written to `recv`
// (the piece's length). recv must not overlap send.
void comm_reduce_scatter_range(const Comm *c, const void *send, void *recv, size_t lo, size_t hi, size_t n_total,
                               Dtype t);

// ---- asynchronous collectives (overlap_comm, stage 3 prefetch) ---------------------------
// GPU ranks run every collective on a communication stream of their own, after the work
// the compute stream has queued so far (so its inputs are ready). The plain functions above
// then make the compute stream wait for it; the _async ones return a ticket instead, and
// the compute stream waits only at comm_wait(ticket) -- meanwhile backward goes on. CPU
// ranks (MPI) finish every collective before returning: tickets are no-ops there.
typedef struct {
    int slot;  // < 0: nothing to wait for
} CommTicket;
static const CommTicket COMM_TICKET_NONE = {-1};
CommTicket comm_allgather_range_async(const Comm *c, const void *mine, void *out, size_t lo, size_t hi,
                                      size_t n_total, Dtype t);
CommTicket comm_reduce_scatter_range_async(const Comm *c, const void *send, void *recv, size_t lo, size_t hi,
                                           size_t n_total, Dtype t);
// buf (n) summed over ranks in place, as one group of all-reduces of at most `bucket`
// elements each (0: one); stages 0-1 reduce a unit's gradient this way during backward.
CommTicket comm_allreduce_sum_async(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t);
void comm_wait(const Comm *c, CommTicket t);
void comm_wait_all(const Comm *c);  // the compute stream waits for every collective issued so far

// ---- host scalars and host arrays (token counts, losses, norms, checkpoint gathers) ----
void comm_allreduce_sum_f64(const Comm *c, double *buf, size_t n);
void comm_allreduce_sum_i64(const Comm *c, long long *buf, size_t n);
// Every rank's partition of an fp32 flat host array of n_total elements (mine = its
// partition's elements) collected on rank 0 into all (n_total); all is unused elsewhere.
void comm_gather_partitions_host_f32(const Comm *c, const float *mine, float *all, size_t n_total);
void comm_barrier(const Comm *c);
// Every rank's n bytes (n may differ, 0 too) concatenated in rank order on rank 0: *all
// (malloc'ed; the caller frees it) and counts[world] there; elsewhere *all = NULL and
// counts is unused (may be NULL). Evaluation gathers each rank's predictions this way.
void comm_gather_bytes_host(const Comm *c, const void *mine, size_t n, char **all, size_t *counts);

// ---- communication time (GPU ranks) -----------------------------------------------------
// With timing on, every collective on the communication stream is bracketed by timed
// events; comm_busy_ms returns the milliseconds that stream spent in collectives since the
// last call (it waits for them), or -1 where there is no such stream (CPU ranks, MPI).
// The stream runs one collective at a time, so the sum is its busy time; a peer that
// arrives late shows up as busy time too. `train_t5 bench` reports it per step.
void comm_timing(const Comm *c, int on);
double comm_busy_ms(const Comm *c);

// Bytes per element of a Dtype.
static inline size_t comm_dtype_size(Dtype t) { return t == DTYPE_F32 ? 4 : 2; }
