// dist/comm.c: rank start-up and the MPI side of dist/comm.h; GPU ranks are dispatched to
// dist/comm_nccl.cu.
#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "launch.h"
#include "liveness.h"
#include "comm_nccl.h"  // declarations only; the NCCL side is built with CUDA
#ifdef T5_HAVE_CUDA
#include "../kernels/cuda/cuda_ops.h"
#endif
#include "../zero/partition.h"

#define mpiCheck(call)                                                                                  \
    do {                                                                                                \
        int rc_ = (call);                                                                               \
        if (rc_ != MPI_SUCCESS) {                                                                       \
            char msg_[MPI_MAX_ERROR_STRING + 64];                                                      \
            int len_ = 0;                                                                               \
            MPI_Error_string(rc_, msg_, &len_);                                                         \
            t5_die(__FILE__, __LINE__, msg_, "an MPI rank failed or the launcher lost a process; check " \
                                              "the other ranks' output");                               \
        }                                                                                               \
    } while (0)

void comm_init(Comm *c) {
    memset(c, 0, sizeof *c);
    c->world = 1;
    c->launcher = "none";
    if (launch_under_mpirun()) {
        mpiCheck(MPI_Init(NULL, NULL));
        c->mpi = 1;
        c->launcher = "mpirun";
        mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
        mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
        const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        if (!lr || !*lr) lr = getenv("MPI_LOCALRANKID");  // MPICH / Hydra
        c->local_rank = lr && *lr ? atoi(lr) : c->rank;
        if (c->world > 1) {  // the heartbeat (dist/liveness.h): rank 0's host and port travel over MPI
            LaunchRank0 at;
            int ls = c->rank == 0 ? launch_tcp_listen_any(&at) : -1;
            mpiCheck(MPI_Bcast(&at, (int)sizeof at, MPI_BYTE, 0, MPI_COMM_WORLD));
            launch_tcp_watch(&at, ls, c->rank, c->world);
        }
        return;
    }
    // torchrun-style variables or Slurm: no MPI; GPU ranks meet over TCP + NCCL
    // (comm_attach_device), CPU ranks are refused there
    LaunchEnv e;
    int launched = launch_env_read(&e);
    c->local_rank = e.local_rank;  // one rank alone too: LOCAL_RANK (--local_rank) picks its GPU
    if (launched) {
        c->rank = e.rank;
        c->world = e.world;
        c->local_rank = e.local_rank;
        c->launcher = e.launcher;
    }
}

void comm_attach_device(Comm *c, const char *device) {
    if (strcmp(device, "cuda") != 0) {  // CPU ranks: MPI carries host buffers
        if (c->world > 1 && !c->mpi)
            t5_fail("%d ranks started by %s with --device %s: CPU ranks exchange data over MPI, so several of them "
                    "run only under mpirun; HINT: mpirun -np %d ./train_t5 ..., or --device cuda for GPU ranks",
                    c->world, c->launcher, device, c->world);
        return;
    }
#ifdef T5_HAVE_CUDA
    cuda_init(c->local_rank);  // this rank's GPU, before NCCL binds to it
    comm_nccl_init(c);
#else
    t5_fail("--device cuda needs NCCL for its ranks, and this build has no CUDA (nvcc not found at build time)");
#endif
}

void comm_finalize(Comm *c) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) comm_nccl_finalize(c);
#endif
    if (c->mpi) MPI_Finalize();
    c->mpi = 0;
    liveness_stop();  // last: the peers stop watching this rank, which has finished
}

// Several ranks without MPI reach the MPI path when they are CPU ranks, or GPU ranks
// before comm_attach_device: refuse instead of calling MPI uninitialized.
static void require_mpi(const Comm *c) {
    if (!c->mpi)
        t5_fail("%d ranks started by %s without mpirun: CPU ranks run several only under mpirun (MPI is their "
                "transport); GPU ranks (--device cuda) talk over NCCL once comm_attach_device has run",
                c->world, c->launcher);
}

static MPI_Datatype mpi_type(Dtype t) {
    if (t != DTYPE_F32)
        t5_fail("MPI collectives carry fp32 host buffers (CPU ranks); 16-bit buffers are GPU ranks' and go "
                "through NCCL");
    return MPI_FLOAT;
}

// MPI counts are int: large buffers go in chunks
static void allreduce(const Comm *c, void *buf, size_t n, MPI_Datatype type, size_t elem) {
    if (c->world == 1 || n == 0) return;
    require_mpi(c);
    char *p = buf;
    while (n > 0) {
        int k = n > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)n;
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, p, k, type, MPI_SUM, MPI_COMM_WORLD));
        p += (size_t)k * elem;
        n -= (size_t)k;
    }
}

Range comm_piece_of(const Comm *c, int r, size_t lo, size_t hi, size_t n_total) {
    Range p = partition_range(n_total, c->world, r);
    size_t b = p.begin > lo ? p.begin : lo, e = p.end < hi ? p.end : hi;
    if (b > e) b = e;
    if (b < lo) b = e = lo;
    Range out = {b - lo, e - lo};
    return out;
}

// counts[r] / displs[r] of the per-rank pieces of [lo, hi) (int, as MPI wants them), in one
// allocation: displs = counts + world. Free the returned counts.
static int *piece_counts(const Comm *c, size_t lo, size_t hi, size_t n_total) {
    require_mpi(c);
    if (hi - lo > (size_t)INT_MAX)
        t5_fail("a collective over %zu elements: MPI counts are int; lower the bucket size", hi - lo);
    int *counts = mallocCheck(2 * (size_t)c->world * sizeof(int)), *displs = counts + c->world;
    for (int r = 0; r < c->world; r++) {
        Range p = comm_piece_of(c, r, lo, hi, n_total);
        counts[r] = (int)(p.end - p.begin);
        displs[r] = (int)p.begin;
    }
    return counts;
}

void comm_allreduce_sum(const Comm *c, void *buf, size_t n, Dtype t) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) return comm_nccl_allreduce_sum(c, buf, n, t);
#endif
    allreduce(c, buf, n, mpi_type(t), comm_dtype_size(t));
}

void comm_allgather_range(const Comm *c, const void *mine, void *out, size_t lo, size_t hi, size_t n_total, Dtype t) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) {
        comm_nccl_allgather_range(c, mine, out, lo, hi, n_total, t, 0);
        return;
    }
#endif
    size_t es = comm_dtype_size(t);
    Range p = comm_piece_of(c, c->rank, lo, hi, n_total);
    char *dst = (char *)out + p.begin * es;
    if (c->world == 1) {
        if (mine != dst) memmove(dst, mine, (p.end - p.begin) * es);
        return;
    }
    int *counts = piece_counts(c, lo, hi, n_total), *displs = counts + c->world;
    MPI_Datatype type = mpi_type(t);
    if (mine == dst)
        mpiCheck(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, counts, displs, type, MPI_COMM_WORLD));
    else
        mpiCheck(MPI_Allgatherv(mine, counts[c->rank], type, out, counts, displs, type, MPI_COMM_WORLD));
    free(counts);
}

void comm_reduce_scatter_range(const Comm *c, const void *send, void *recv, size_t lo, size_t hi, size_t n_total,
                               Dtype t) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) {
        comm_nccl_reduce_scatter_range(c, send, recv, lo, hi, n_total, t, 0);
        return;
    }
#endif
    size_t es = comm_dtype_size(t);
    if (c->world == 1) {
        Range p = comm_piece_of(c, 0, lo, hi, n_total);
        memcpy(recv, (const char *)send + p.begin * es, (p.end - p.begin) * es);
        return;
    }
    int *counts = piece_counts(c, lo, hi, n_total);  // counts[world..] (displs) unused: pieces are in order
    // the pieces are contiguous and in rank order, which is MPI_Reduce_scatter's layout
    mpiCheck(MPI_Reduce_scatter(send, recv, counts, mpi_type(t), MPI_SUM, MPI_COMM_WORLD));
    free(counts);
}

CommTicket comm_allgather_range_async(const Comm *c, const void *mine, void *out, size_t lo, size_t hi,
                                      size_t n_total, Dtype t) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) return (CommTicket){comm_nccl_allgather_range(c, mine, out, lo, hi, n_total, t, 1)};
#endif
    comm_allgather_range(c, mine, out, lo, hi, n_total, t);
    return COMM_TICKET_NONE;
}

CommTicket comm_reduce_scatter_range_async(const Comm *c, const void *send, void *recv, size_t lo, size_t hi,
                                           size_t n_total, Dtype t) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) return (CommTicket){comm_nccl_reduce_scatter_range(c, send, recv, lo, hi, n_total, t, 1)};
#endif
    comm_reduce_scatter_range(c, send, recv, lo, hi, n_total, t);
    return COMM_TICKET_NONE;
}

void comm_wait(const Comm *c, CommTicket t) {
#ifdef T5_HAVE_CUDA
    if (c->nccl && t.slot >= 0) comm_nccl_wait(c, t.slot);
#endif
    (void)c;
    (void)t;
}

void comm_wait_all(const Comm *c) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) comm_nccl_wait(c, -1);
#endif
    (void)c;
}

void comm_allreduce_sum_f64(const Comm *c, double *buf, size_t n) {
#ifdef T5_HAVE_CUDA
    if (c->nccl && !c->mpi) return comm_nccl_allreduce_host(c, buf, n, 1);
#endif
    allreduce(c, buf, n, MPI_DOUBLE, sizeof(double));
}

void comm_allreduce_sum_i64(const Comm *c, long long *buf, size_t n) {
#ifdef T5_HAVE_CUDA
    if (c->nccl && !c->mpi) return comm_nccl_allreduce_host(c, buf, n, 0);
#endif
    allreduce(c, buf, n, MPI_LONG_LONG, sizeof(long long));
}

void comm_gather_partitions_host_f32(const Comm *c, const float *mine, float *all, size_t n_total) {
#ifdef T5_HAVE_CUDA
    if (c->nccl && !c->mpi) return comm_nccl_gather_partitions_host_f32(c, mine, all, n_total);
#endif
    if (c->world == 1) {
        if (all != mine) memcpy(all, mine, n_total * sizeof(float));
        return;
    }
    int *counts = piece_counts(c, 0, n_total, n_total), *displs = counts + c->world;
    mpiCheck(MPI_Gatherv(mine, counts[c->rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD));
    free(counts);
}

void comm_barrier(const Comm *c) {
#ifdef T5_HAVE_CUDA
    if (c->nccl && !c->mpi) return comm_nccl_barrier(c);
#endif
    if (c->world == 1) return;
    require_mpi(c);
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
}

CommTicket comm_allreduce_sum_async(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) return (CommTicket){comm_nccl_allreduce_sum_buckets(c, buf, n, bucket, t, 1)};
#endif
    size_t step = bucket ? bucket : n, es = comm_dtype_size(t);
    for (size_t lo = 0; lo < n; lo += step)
        comm_allreduce_sum(c, (char *)buf + lo * es, n - lo < step ? n - lo : step, t);
    return COMM_TICKET_NONE;
}

void comm_gather_bytes_host(const Comm *c, const void *mine, size_t n, char **all, size_t *counts) {
    *all = NULL;
#ifdef T5_HAVE_CUDA
    if (c->nccl && !c->mpi) return comm_nccl_gather_bytes_host(c, mine, n, all, counts);
#endif
    if (c->world == 1) {
        *all = mallocCheck(n ? n : 1);
        if (n) memcpy(*all, mine, n);
        counts[0] = n;
        return;
    }
    require_mpi(c);
    long long me = (long long)n, *sizes = c->rank == 0 ? mallocCheck((size_t)c->world * sizeof(long long)) : NULL;
    mpiCheck(MPI_Gather(&me, 1, MPI_LONG_LONG, sizes, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
    if (n > (size_t)INT_MAX) t5_fail("gathering %zu bytes from one rank: MPI counts are int", n);
    int *cnt = NULL, *dsp = NULL;
    if (c->rank == 0) {
        cnt = mallocCheck(2 * (size_t)c->world * sizeof(int));
        dsp = cnt + c->world;
        size_t total = 0;
        for (int r = 0; r < c->world; r++) {
            if (total + (size_t)sizes[r] > (size_t)INT_MAX) t5_fail("gathering %zu bytes: MPI counts are int", total);
            cnt[r] = (int)sizes[r];
            dsp[r] = (int)total;
            counts[r] = (size_t)sizes[r];
            total += (size_t)sizes[r];
        }
        *all = mallocCheck(total ? total : 1);
    }
    mpiCheck(MPI_Gatherv(mine, (int)n, MPI_BYTE, *all, cnt, dsp, MPI_BYTE, 0, MPI_COMM_WORLD));
    free(cnt);
    free(sizes);
}

void comm_timing(const Comm *c, int on) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) comm_nccl_timing(c, on);
#endif
    (void)c;
    (void)on;
}

double comm_busy_ms(const Comm *c) {
#ifdef T5_HAVE_CUDA
    if (c->nccl) return comm_nccl_busy_ms(c);
#endif
    (void)c;
    return -1.0;
}
