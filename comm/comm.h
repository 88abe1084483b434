// comm/comm.h: communication between ranks: one object, Comm, whose `ops` is a table of
// functions with three implementations, chosen once at start-up:
//   single rank (comm/comm_single.c): copies only, never a call into MPI or NCCL;
//   MPI         (comm/comm_mpi.c): CPU ranks, host buffers, fp32 collectives;
//   NCCL        (comm/comm_nccl.cu): GPU ranks, device buffers on the backend's stream,
//               any Dtype; host scalars go over MPI when it is up, else through NCCL.
// ZeRO's stages and the trainer only call the comm_* wrappers below, which call through
// c->ops; nothing else in the code knows how ranks talk, and no caller tests for CUDA.
// A build without nvcc links comm/comm_nccl_absent.c instead of the NCCL table: asking for
// it (--device cuda) is then an error naming the build, never a fall-back.
//
// Start-up (comm_init): under mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set) MPI is
// initialized and every rank learns (rank, world). torchrun/deepspeed-style variables
// (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Slurm's (SLURM_NTASKS,
// SLURM_PROCID, SLURM_LOCALID + MASTER_ADDR/PORT) and --num_gpus (which sets the torchrun
// ones for the ranks it spawns) give (rank, world, local_rank) without MPI: comm/launch.h.
// Without a launcher the run is one rank and no MPI call is made. comm_init picks the
// single-rank table for one rank and the MPI table for several; comm_attach_device then
// swaps in the NCCL table for GPU ranks (it selects device local_rank and creates the
// communicator; the unique id goes from rank 0 to the others over MPI, or over TCP to
// MASTER_ADDR:MASTER_PORT), and refuses several CPU ranks without mpirun (MPI is their
// only transport).
//
// Partitions: the ranged collectives below split the flat space [0, n_total) as ZeRO's
// partitions do (common/range.h: rank r owns range_split_ceil(n_total, world, r)); a range
// [lo, hi) of it is then cut into per-rank pieces [lo, hi) ∩ partition(r), in rank order.
#pragma once
#include <stddef.h>

#include "../kernels/backend.h"
#include "../common/range.h"
#include "hosts.h"   // which ranks share a host (Comm.hosts)
#include "launch.h"  // the launchers (--num_gpus: launch_spawn_ranks)

typedef struct CommOps CommOps;

typedef struct Comm {
    int rank, world;
    int local_rank;       // rank on this host (GPU index)
    int mpi;              // 1: MPI initialized by comm_init
    const char *launcher; // "none", "mpirun", "torchrun", "slurm", "num_gpus"
    const CommOps *ops;   // the implementation (see the top of this file); set by comm_init
    void *nccl;           // NCCL communicator state (comm/comm_nccl.cu) for GPU ranks, else NULL
    HostLayout hosts;     // every rank's host (comm/hosts.h), gathered by comm_attach_device
    double nccl_timeout_s; // GPU ranks: seconds a collective may take (--ddp_timeout); 0: T5_NCCL_TIMEOUT or 1800
} Comm;

// The table every implementation fills; the comm_* functions below document each entry.
// Ranged and bucketed collectives take `async`: 0 = finished (GPU ranks: the compute
// stream waits for it) on return; 1 = return a ticket slot for wait (GPU ranks only; the
// others finish every collective before returning and give -1).
struct CommOps {
    const char *name;  // "single", "mpi", "nccl"
    void (*finalize)(Comm *c);  // the implementation's own state (not MPI, not the heartbeat)
    void (*allreduce_sum)(const Comm *c, void *buf, size_t n, Dtype t);
    void (*allreduce_max_f32)(const Comm *c, float *buf, size_t n);
    int (*allgather_range)(const Comm *c, const void *mine, void *out, size_t lo, size_t hi, size_t n_total,
                           Dtype t, int async);
    int (*reduce_scatter_range)(const Comm *c, const void *send, void *recv, size_t lo, size_t hi, size_t n_total,
                                Dtype t, int async);
    int (*allreduce_sum_buckets)(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t, int async);
    void (*wait)(const Comm *c, int slot);  // slot < 0: everything issued so far
    void (*allreduce_host)(const Comm *c, void *buf, size_t n, int is_f64);  // double or long long
    void (*gather_partitions_host_f32)(const Comm *c, const float *mine, float *all, size_t n_total);
    void (*barrier)(const Comm *c);
    void (*gather_bytes_host)(const Comm *c, const void *mine, size_t n, char **all, size_t *counts);
    void (*timing)(const Comm *c, int on);
    double (*busy_ms)(const Comm *c);
};

// The three tables. comm_nccl_ops exists in every build; without CUDA, attaching it
// fails naming the build (comm/comm_nccl_absent.c).
extern const CommOps comm_single_ops, comm_mpi_ops;
const CommOps *comm_nccl_ops(void);
// The NCCL table's attach step (comm/comm_nccl.cu): select GPU local_rank, create the
// communicator, set c->nccl. Called by comm_attach_device.
void comm_nccl_attach(Comm *c);

void comm_init(Comm *c);
// device: "cpu" or "cuda" (--device). GPU ranks: select the GPU of local_rank and create
// the NCCL communicator over every rank (also with one rank: the same code path). CPU
// ranks: nothing (MPI carries host buffers); several CPU ranks without MPI are an error.
// Call right after comm_init: the barriers of start-up go through NCCL when there is no MPI.
// Then every rank's host record is exchanged (c->hosts) and the heartbeat learns the names.
void comm_attach_device(Comm *c, const char *device);
void comm_finalize(Comm *c);
// A refusal every rank has reached from the same data (a collective decision): rank 0 prints
// `msg` as the one error line; no rank leaves before it has (a barrier), and each says goodbye
// to the heartbeat first, so no peer reports its exit as a failure of its own; exit 1.
void comm_fail_agreed(const Comm *c, const char *msg) __attribute__((noreturn));
// The same when some ranks found a problem and others did not (collective: every rank calls it;
// msg NULL or "" where this rank found nothing): returns when no rank found anything; else the
// lowest rank that did prints its msg, and every rank exits 1 as above.
void comm_agree_or_fail(const Comm *c, const char *msg);
// --explain's ranks: (rank, world, launcher) as the launcher's variables give them, or
// --num_gpus N's N ranks (this process is rank 0), with no transport at all: MPI is not
// started, nothing connects, no GPU is touched (c->ops is the single-rank table; a dry run
// exchanges nothing). So a GPU command line plans on any machine, for any number of ranks.
void comm_init_dry(Comm *c, int num_gpus);
// The refusal comm_attach_device would give for these ranks on `device` (several CPU ranks
// without mpirun), for a dry run.
void comm_check_dry(const Comm *c, const char *device);

// ---- collectives on compute buffers: host memory for CPU ranks (MPI, fp32 only), device
// memory for GPU ranks (NCCL, any Dtype). One rank: copies only, never a call into MPI.

// buf (n) summed over ranks, in place.
static inline void comm_allreduce_sum(const Comm *c, void *buf, size_t n, Dtype t) { c->ops->allreduce_sum(c, buf, n, t); }
// buf (n fp32) the element-wise max over ranks, in place (--fp8's amaxes: model/fp8.h). Values
// >= 0 or NaN; where a rank holds NaN the result is NaN or the others' max (NCCL and MPI do not
// say which), and a NaN amax keeps its scale either way.
static inline void comm_allreduce_max_f32(const Comm *c, float *buf, size_t n) { c->ops->allreduce_max_f32(c, buf, n); }
// Gather the range [lo, hi) of a partitioned flat buffer: `mine` is this rank's piece
// ((lo, hi) ∩ its partition, possibly empty), out (hi - lo) receives every rank's piece
// in place. `mine` may point into `out` at its own position (in-place gather).
static inline void comm_allgather_range(const Comm *c, const void *mine, void *out, size_t lo, size_t hi,
                                        size_t n_total, Dtype t) {
    (void)c->ops->allgather_range(c, mine, out, lo, hi, n_total, t, 0);
}
// Reduce-scatter of the range [lo, hi): every rank has `send` (hi - lo) elements; the sum
// over ranks of this rank's piece ((lo, hi) ∩ its partition) is written to `recv`
// (the piece's length). recv must not overlap send, except as this rank's own piece of it
// (recv == send + the piece's offset in [lo, hi): in place, what ZeRO-Offload's gradient
// stream uses to send the reduced piece down from where backward wrote it).
static inline void comm_reduce_scatter_range(const Comm *c, const void *send, void *recv, size_t lo, size_t hi,
                                             size_t n_total, Dtype t) {
    (void)c->ops->reduce_scatter_range(c, send, recv, lo, hi, n_total, t, 0);
}

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
static inline CommTicket comm_allgather_range_async(const Comm *c, const void *mine, void *out, size_t lo,
                                                    size_t hi, size_t n_total, Dtype t) {
    CommTicket k = {c->ops->allgather_range(c, mine, out, lo, hi, n_total, t, 1)};
    return k;
}
static inline CommTicket comm_reduce_scatter_range_async(const Comm *c, const void *send, void *recv, size_t lo,
                                                         size_t hi, size_t n_total, Dtype t) {
    CommTicket k = {c->ops->reduce_scatter_range(c, send, recv, lo, hi, n_total, t, 1)};
    return k;
}
// buf (n) summed over ranks in place, as one group of all-reduces of at most `bucket`
// elements each (0: one); stages 0-1 reduce a unit's gradient this way during backward.
static inline CommTicket comm_allreduce_sum_async(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t) {
    CommTicket k = {c->ops->allreduce_sum_buckets(c, buf, n, bucket, t, 1)};
    return k;
}
static inline void comm_wait(const Comm *c, CommTicket t) {
    if (t.slot >= 0) c->ops->wait(c, t.slot);
}
// the compute stream waits for every collective issued so far
static inline void comm_wait_all(const Comm *c) { c->ops->wait(c, -1); }

// ---- host scalars and host arrays (token counts, losses, norms, checkpoint gathers) ----
static inline void comm_allreduce_sum_f64(const Comm *c, double *buf, size_t n) { c->ops->allreduce_host(c, buf, n, 1); }
static inline void comm_allreduce_sum_i64(const Comm *c, long long *buf, size_t n) {
    c->ops->allreduce_host(c, buf, n, 0);
}
// Every rank's partition of an fp32 flat host array of n_total elements (mine = its
// partition's elements) collected on rank 0 into all (n_total); all is unused elsewhere.
static inline void comm_gather_partitions_host_f32(const Comm *c, const float *mine, float *all, size_t n_total) {
    c->ops->gather_partitions_host_f32(c, mine, all, n_total);
}
static inline void comm_barrier(const Comm *c) { c->ops->barrier(c); }
// Every rank's n bytes, in rank order, on every rank (all: world x n bytes); and rank root's n
// bytes on every rank (buf in place). Both ride on the host all-reduce (each rank's slot filled,
// the rest zero: a sum with one non-zero term is exact), so they run on every transport without
// an entry of their own: for start-up records and files moved at resume, not for tensors.
void comm_allgather_bytes_host(const Comm *c, const void *mine, size_t n, void *all);
void comm_broadcast_bytes_host(const Comm *c, int root, void *buf, size_t n);
// This rank's host in c->hosts: how many ranks it runs (what its memory and disk hold for), and
// whether this rank is its lowest (which writes the host's node-local files). Before the
// layout is gathered (a dry run): the launcher's figure (launch_ranks_on_host), and rank 0.
int comm_ranks_on_my_host(const Comm *c);
int comm_is_host_leader(const Comm *c);
// "rank R (host H)" for messages: the host named when the job spans several.
const char *comm_rank_words(const Comm *c, int rank, char *buf, int n);
// Every rank's n bytes (n may differ, 0 too) concatenated in rank order on rank 0: *all
// (malloc'ed; the caller frees it) and counts[world] there; elsewhere *all = NULL and
// counts is unused (may be NULL). Evaluation gathers each rank's predictions this way.
static inline void comm_gather_bytes_host(const Comm *c, const void *mine, size_t n, char **all, size_t *counts) {
    c->ops->gather_bytes_host(c, mine, n, all, counts);
}

// ---- communication time (GPU ranks) -----------------------------------------------------
// With timing on, every collective on the communication stream is bracketed by timed
// events; comm_busy_ms returns the milliseconds that stream spent in collectives since the
// last call (it waits for them), or -1 where there is no such stream (CPU ranks, MPI).
// The stream runs one collective at a time, so the sum is its busy time; a peer that
// arrives late shows up as busy time too. `train_t5 bench` reports it per step.
static inline void comm_timing(const Comm *c, int on) { c->ops->timing(c, on); }
static inline double comm_busy_ms(const Comm *c) { return c->ops->busy_ms(c); }

// Bytes per element of a Dtype.
static inline size_t comm_dtype_size(Dtype t) { return t == DTYPE_F32 ? 4 : 2; }

// The piece of [lo, hi) that rank r owns ([lo, hi) ∩ range_split_ceil(n_total, world, r)),
// as offsets relative to lo (empty: begin == end). Shared by every implementation (comm.c).
Range comm_piece_of(const Comm *c, int r, size_t lo, size_t hi, size_t n_total);
