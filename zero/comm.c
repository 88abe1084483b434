// zero/comm.c: the MPI side of zero/comm.h.
#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "partition.h"

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

static int env_int(const char *name) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : -1;
}

void comm_init(Comm *c) {
    memset(c, 0, sizeof *c);
    c->world = 1;
    int mpi_world = env_int("OMPI_COMM_WORLD_SIZE");
    if (mpi_world < 0) mpi_world = env_int("PMI_SIZE");
    if (mpi_world > 0) {
        mpiCheck(MPI_Init(NULL, NULL));
        c->mpi = 1;
        mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
        mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
        int lr = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
        c->local_rank = lr >= 0 ? lr : c->rank;
        return;
    }
    int ws = env_int("WORLD_SIZE");
    if (ws > 1)
        t5_fail("WORLD_SIZE=%d (torchrun/deepspeed-style launch): that bootstrap (TCP + NCCL) is not built yet; "
                "HINT: launch CPU ranks with mpirun -np %d", ws, ws);
    int slurm = env_int("SLURM_NTASKS");
    if (slurm > 1 && env_int("SLURM_PROCID") >= 0)
        t5_fail("Slurm with %d tasks without mpirun: that bootstrap is not built yet; HINT: srun --mpi=pmix or mpirun",
                slurm);
}

void comm_finalize(Comm *c) {
    if (c->mpi) MPI_Finalize();
    c->mpi = 0;
}

// MPI counts are int: large buffers go in chunks
static void allreduce(const Comm *c, void *buf, size_t n, MPI_Datatype type, size_t elem) {
    if (c->world == 1 || n == 0) return;
    char *p = buf;
    while (n > 0) {
        int k = n > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)n;
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, p, k, type, MPI_SUM, MPI_COMM_WORLD));
        p += (size_t)k * elem;
        n -= (size_t)k;
    }
}

void comm_allreduce_sum_f32(const Comm *c, float *buf, size_t n) { allreduce(c, buf, n, MPI_FLOAT, sizeof(float)); }
void comm_allreduce_sum_f64(const Comm *c, double *buf, size_t n) { allreduce(c, buf, n, MPI_DOUBLE, sizeof(double)); }
void comm_allreduce_sum_i64(const Comm *c, long long *buf, size_t n) {
    allreduce(c, buf, n, MPI_LONG_LONG, sizeof(long long));
}

void comm_allgather_partitions_f32(const Comm *c, float *buf, size_t n) {
    if (c->world == 1) return;
    int *counts = mallocCheck((size_t)c->world * sizeof(int)), *displs = mallocCheck((size_t)c->world * sizeof(int));
    for (int r = 0; r < c->world; r++) {
        Range p = partition_range(n, c->world, r);
        if (p.end > (size_t)INT_MAX)
            t5_fail("all-gather of %zu elements: MPI counts are int; more ranks or the NCCL path are needed", n);
        counts[r] = (int)(p.end - p.begin);
        displs[r] = (int)p.begin;
    }
    mpiCheck(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, MPI_COMM_WORLD));
    free(counts);
    free(displs);
}

void comm_barrier(const Comm *c) {
    if (c->world > 1) mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
}
