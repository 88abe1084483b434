// comm/comm_mpi.c: the MPI table of comm/comm.h: CPU ranks (host buffers, fp32
// collectives) under mpirun. MPI counts are int: large buffers go in chunks. Several
// ranks without MPI (torchrun/Slurm CPU ranks) reach this table and are refused with a hint.
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "comm.h"
#include "comm_mpi.h"

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

static void mpi_finalize(Comm *c) { (void)c; }  // MPI_Finalize is comm_finalize's (comm.c)

static void mpi_allreduce_sum(const Comm *c, void *buf, size_t n, Dtype t) {
    allreduce(c, buf, n, mpi_type(t), comm_dtype_size(t));
}

static void mpi_allreduce_max_f32(const Comm *c, float *buf, size_t n) {
    if (c->world == 1 || n == 0) return;
    if (n > (size_t)INT_MAX) t5_fail("comm (mpi): a max all-reduce of %zu floats exceeds MPI's int count", n);
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD));
}

static int mpi_allgather_range(const Comm *c, const void *mine, void *out, size_t lo, size_t hi, size_t n_total,
                               Dtype t, int async) {
    (void)async;  // MPI finishes before returning
    if (c->world == 1) return comm_single_ops.allgather_range(c, mine, out, lo, hi, n_total, t, 0);
    size_t es = comm_dtype_size(t);
    Range p = comm_piece_of(c, c->rank, lo, hi, n_total);
    char *dst = (char *)out + p.begin * es;
    int *counts = piece_counts(c, lo, hi, n_total), *displs = counts + c->world;
    MPI_Datatype type = mpi_type(t);
    if (mine == dst)
        mpiCheck(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, counts, displs, type, MPI_COMM_WORLD));
    else
        mpiCheck(MPI_Allgatherv(mine, counts[c->rank], type, out, counts, displs, type, MPI_COMM_WORLD));
    free(counts);
    return -1;
}

static int mpi_reduce_scatter_range(const Comm *c, const void *send, void *recv, size_t lo, size_t hi,
                                    size_t n_total, Dtype t, int async) {
    (void)async;
    if (c->world == 1) return comm_single_ops.reduce_scatter_range(c, send, recv, lo, hi, n_total, t, 0);
    int *counts = piece_counts(c, lo, hi, n_total);  // counts[world..] (displs) unused: pieces are in order
    // the pieces are contiguous and in rank order, which is MPI_Reduce_scatter's layout
    Range p = comm_piece_of(c, c->rank, lo, hi, n_total);
    size_t es = comm_dtype_size(t), bytes = (p.end - p.begin) * es;
    const int in_place = recv == (const char *)send + p.begin * es;  // MPI forbids aliased buffers: a bounce
    void *out = in_place ? mallocCheck(bytes ? bytes : 1) : recv;
    mpiCheck(MPI_Reduce_scatter(send, out, counts, mpi_type(t), MPI_SUM, MPI_COMM_WORLD));
    if (in_place) {
        memcpy(recv, out, bytes);
        free(out);
    }
    free(counts);
    return -1;
}

static int mpi_allreduce_sum_buckets(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t, int async) {
    (void)async;
    size_t step = bucket ? bucket : n, es = comm_dtype_size(t);
    for (size_t lo = 0; lo < n; lo += step)
        mpi_allreduce_sum(c, (char *)buf + lo * es, n - lo < step ? n - lo : step, t);
    return -1;
}

static void mpi_wait(const Comm *c, int slot) { (void)c, (void)slot; }

static void mpi_allreduce_host(const Comm *c, void *buf, size_t n, int is_f64) {
    if (is_f64) allreduce(c, buf, n, MPI_DOUBLE, sizeof(double));
    else allreduce(c, buf, n, MPI_LONG_LONG, sizeof(long long));
}

static void mpi_gather_partitions_host_f32(const Comm *c, const float *mine, float *all, size_t n_total) {
    if (c->world == 1) return comm_single_ops.gather_partitions_host_f32(c, mine, all, n_total);
    int *counts = piece_counts(c, 0, n_total, n_total), *displs = counts + c->world;
    mpiCheck(MPI_Gatherv(mine, counts[c->rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD));
    free(counts);
}

static void mpi_barrier(const Comm *c) {
    if (c->world == 1) return;
    require_mpi(c);
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
}

static void mpi_gather_bytes_host(const Comm *c, const void *mine, size_t n, char **all, size_t *counts) {
    *all = NULL;
    if (c->world == 1) return comm_single_ops.gather_bytes_host(c, mine, n, all, counts);
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

static void mpi_timing(const Comm *c, int on) { (void)c, (void)on; }

static double mpi_busy_ms(const Comm *c) {
    (void)c;
    return -1.0;  // no communication stream: MPI calls are timed as part of the step
}

const CommOps comm_mpi_ops = {
    .name = "mpi",
    .finalize = mpi_finalize,
    .allreduce_sum = mpi_allreduce_sum,
    .allreduce_max_f32 = mpi_allreduce_max_f32,
    .allgather_range = mpi_allgather_range,
    .reduce_scatter_range = mpi_reduce_scatter_range,
    .allreduce_sum_buckets = mpi_allreduce_sum_buckets,
    .wait = mpi_wait,
    .allreduce_host = mpi_allreduce_host,
    .gather_partitions_host_f32 = mpi_gather_partitions_host_f32,
    .barrier = mpi_barrier,
    .gather_bytes_host = mpi_gather_bytes_host,
    .timing = mpi_timing,
    .busy_ms = mpi_busy_ms,
};
