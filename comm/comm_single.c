// comm/comm_single.c: the single-rank table of comm/comm.h (a CPU run without a launcher,
// or mpirun -np 1): every collective is the identity or a copy; no MPI call is made.
#include <string.h>

#include "../common/check.h"
#include "comm.h"

static void single_finalize(Comm *c) { (void)c; }

static void single_allreduce_sum(const Comm *c, void *buf, size_t n, Dtype t) {
    (void)c, (void)buf, (void)n, (void)t;
}

static void single_allreduce_max_f32(const Comm *c, float *buf, size_t n) { (void)c, (void)buf, (void)n; }

static int single_allgather_range(const Comm *c, const void *mine, void *out, size_t lo, size_t hi, size_t n_total,
                                  Dtype t, int async) {
    size_t es = comm_dtype_size(t);
    Range p = comm_piece_of(c, c->rank, lo, hi, n_total);
    char *dst = (char *)out + p.begin * es;
    if (mine != dst) memmove(dst, mine, (p.end - p.begin) * es);
    (void)async;
    return -1;
}

static int single_reduce_scatter_range(const Comm *c, const void *send, void *recv, size_t lo, size_t hi,
                                       size_t n_total, Dtype t, int async) {
    size_t es = comm_dtype_size(t);
    Range p = comm_piece_of(c, 0, lo, hi, n_total);
    const char *mine = (const char *)send + p.begin * es;
    if (recv != mine) memcpy(recv, mine, (p.end - p.begin) * es);  // in place: nothing to move
    (void)async;
    return -1;
}

static int single_allreduce_sum_buckets(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t, int async) {
    (void)c, (void)buf, (void)n, (void)bucket, (void)t, (void)async;
    return -1;
}

static void single_wait(const Comm *c, int slot) { (void)c, (void)slot; }

static void single_allreduce_host(const Comm *c, void *buf, size_t n, int is_f64) {
    (void)c, (void)buf, (void)n, (void)is_f64;
}

static void single_gather_partitions_host_f32(const Comm *c, const float *mine, float *all, size_t n_total) {
    (void)c;
    if (all != mine) memcpy(all, mine, n_total * sizeof(float));
}

static void single_barrier(const Comm *c) { (void)c; }

static void single_gather_bytes_host(const Comm *c, const void *mine, size_t n, char **all, size_t *counts) {
    (void)c;
    *all = mallocCheck(n ? n : 1);
    if (n) memcpy(*all, mine, n);
    counts[0] = n;
}

static void single_timing(const Comm *c, int on) { (void)c, (void)on; }

static double single_busy_ms(const Comm *c) {
    (void)c;
    return -1.0;  // no communication stream
}

const CommOps comm_single_ops = {
    .name = "single",
    .finalize = single_finalize,
    .allreduce_sum = single_allreduce_sum,
    .allreduce_max_f32 = single_allreduce_max_f32,
    .allgather_range = single_allgather_range,
    .reduce_scatter_range = single_reduce_scatter_range,
    .allreduce_sum_buckets = single_allreduce_sum_buckets,
    .wait = single_wait,
    .allreduce_host = single_allreduce_host,
    .gather_partitions_host_f32 = single_gather_partitions_host_f32,
    .barrier = single_barrier,
    .gather_bytes_host = single_gather_bytes_host,
    .timing = single_timing,
    .busy_ms = single_busy_ms,
};
