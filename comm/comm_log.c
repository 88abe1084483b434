// comm/comm_log.c: the comms logger (see comm_log.h).
#include "comm_log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/check.h"

const char *const comm_log_op_names[] = {"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "gather",
                                         "barrier", NULL};
enum { OP_ALL_REDUCE = 0, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_GATHER, OP_BARRIER, OP_COUNT };

int comm_log_known_op(const char *name) {
    for (int i = 0; comm_log_op_names[i]; i++)
        if (!strcmp(name, comm_log_op_names[i])) return 1;
    return 0;
}

typedef struct {
    int op;
    size_t bytes;
    float *ms;  // every latency (the trimmed mean needs them all); algbw and busbw follow from it
    long n, cap;
} LogRow;

static struct {
    const CommOps *real;
    CommOps wrapped;
    CommLogOptions o;
    int world;
    int record[OP_COUNT];  // prof_all, or the op is in prof_ops
    int first[OP_COUNT];   // order in which the names first appeared (DeepSpeed's dict order); 0: not yet
    int n_first;
    LogRow *rows;
    int nrows, cap_rows;
} L;

static double wall_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

void comm_log_size_text(double bytes, char *out, size_t cap) {
    static const char *const names[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    if (bytes <= 0) {
        snprintf(out, cap, "0B");
        return;
    }
    int i = 0;
    double p = 1;
    while (i < 8 && bytes >= p * 1024) p *= 1024, i++;
    // str(round(bytes / p, 2)): two decimals, trailing zeros dropped but one
    char num[64];
    snprintf(num, sizeof num, "%.2f", bytes / p);
    size_t k = strlen(num);
    while (k > 0 && num[k - 1] == '0' && num[k - 2] != '.') num[--k] = '\0';
    snprintf(out, cap, "%s %s", num, names[i]);
}

void comm_log_bandwidth(const char *op, double bytes, double ms, int world, double *algbw, double *busbw) {
    double n = world, size = bytes, tput = 0, bus = 0;
    if (ms <= 0) {  // a zero-time op (a copy on one rank): no rate to speak of
        *algbw = *busbw = 0;
        return;
    }
    if (!strcmp(op, "all_gather_into_tensor") || !strcmp(op, "reduce_scatter_tensor")) {
        size *= n;
        tput = size / ms;
        bus = size / ms * ((n - 1) / n);
    } else if (!strcmp(op, "all_reduce")) {
        tput = size * 2 / ms;
        bus = size / ms * (2 * (n - 1) / n);
    } else {  // gather, barrier: point to point
        tput = bus = size / ms;
    }
    *algbw = tput * 8 / 1e6;  // bytes per ms -> Gbps
    *busbw = bus * 8 / 1e6;
}

static void record(const Comm *c, int op, size_t bytes, double ms) {
    if (!L.record[op]) return;
    if (!L.first[op]) L.first[op] = ++L.n_first;
    LogRow *r = NULL;
    for (int i = 0; i < L.nrows && !r; i++)
        if (L.rows[i].op == op && L.rows[i].bytes == bytes) r = &L.rows[i];
    if (!r) {
        if (L.nrows == L.cap_rows) {
            L.cap_rows = L.cap_rows ? 2 * L.cap_rows : 32;
            L.rows = reallocCheck(L.rows, (size_t)L.cap_rows * sizeof *L.rows);
        }
        r = &L.rows[L.nrows++];
        memset(r, 0, sizeof *r);
        r->op = op;
        r->bytes = bytes;
    }
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->ms = reallocCheck(r->ms, (size_t)r->cap * sizeof *r->ms);
    }
    r->ms[r->n++] = (float)ms;
    if (L.o.verbose && c->rank == 0) {  // DeepSpeed's log_dist(..., ranks=[0])
        char size[32];
        double alg, bus;
        comm_log_size_text((double)bytes, size, sizeof size);
        comm_log_bandwidth(comm_log_op_names[op], (double)bytes, ms, c->world, &alg, &bus);
        printf("[Rank 0] comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f | busbw (Gbps): %.2f\n",
               comm_log_op_names[op], ms, size, alg, bus);
        fflush(stdout);
    }
}

// A collective on compute buffers: the communication stream's time for it where there is one
// (GPU ranks; waiting for it), else the wall clock around the blocking call.
static double device_op_ms(const Comm *c, double t0) {
    double ms = L.real->busy_ms(c);
    return ms >= 0 ? ms : wall_ms() - t0;
}

static size_t es_of(Dtype t) { return comm_dtype_size(t); }

static void w_allreduce_sum(const Comm *c, void *buf, size_t n, Dtype t) {
    double t0 = wall_ms();
    L.real->allreduce_sum(c, buf, n, t);
    record(c, OP_ALL_REDUCE, n * es_of(t), device_op_ms(c, t0));
}
static void w_allreduce_max_f32(const Comm *c, float *buf, size_t n) {
    double t0 = wall_ms();
    L.real->allreduce_max_f32(c, buf, n);
    record(c, OP_ALL_REDUCE, n * sizeof(float), device_op_ms(c, t0));
}
static int w_allgather_range(const Comm *c, const void *mine, void *out, size_t lo, size_t hi, size_t n_total, Dtype t,
                             int async) {
    double t0 = wall_ms();
    int k = L.real->allgather_range(c, mine, out, lo, hi, n_total, t, async);
    size_t per = (hi - lo + (size_t)c->world - 1) / (size_t)c->world;  // a rank's (padded) piece, DeepSpeed's input
    record(c, OP_ALL_GATHER, per * es_of(t), device_op_ms(c, t0));
    return k;
}
static int w_reduce_scatter_range(const Comm *c, const void *send, void *recv, size_t lo, size_t hi, size_t n_total,
                                  Dtype t, int async) {
    double t0 = wall_ms();
    int k = L.real->reduce_scatter_range(c, send, recv, lo, hi, n_total, t, async);
    record(c, OP_REDUCE_SCATTER, (hi - lo) * es_of(t), device_op_ms(c, t0));
    return k;
}
static int w_allreduce_sum_buckets(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t, int async) {
    double t0 = wall_ms();
    int k = L.real->allreduce_sum_buckets(c, buf, n, bucket, t, async);
    record(c, OP_ALL_REDUCE, n * es_of(t), device_op_ms(c, t0));
    return k;
}
static void w_allreduce_host(const Comm *c, void *buf, size_t n, int is_f64) {
    double t0 = wall_ms();
    L.real->allreduce_host(c, buf, n, is_f64);
    record(c, OP_ALL_REDUCE, n * 8, wall_ms() - t0);
}
static void w_gather_partitions_host_f32(const Comm *c, const float *mine, float *all, size_t n_total) {
    double t0 = wall_ms();
    L.real->gather_partitions_host_f32(c, mine, all, n_total);
    Range p = range_split_ceil(n_total, c->world, c->rank);  // this rank's piece, as ZeRO partitions
    record(c, OP_GATHER, (p.end - p.begin) * sizeof(float), wall_ms() - t0);
}
static void w_barrier(const Comm *c) {
    double t0 = wall_ms();
    L.real->barrier(c);
    record(c, OP_BARRIER, 0, wall_ms() - t0);
}
static void w_gather_bytes_host(const Comm *c, const void *mine, size_t n, char **all, size_t *counts) {
    double t0 = wall_ms();
    L.real->gather_bytes_host(c, mine, n, all, counts);
    record(c, OP_GATHER, n, wall_ms() - t0);
}

void comm_log_install(Comm *c, const CommLogOptions *o) {
    if (L.real) t5_die(__FILE__, __LINE__, "comm_log_install: the logger is installed already", "a bug: one per process");
    memset(&L, 0, sizeof L);
    L.real = c->ops;
    L.o = *o;
    L.world = c->world;
    for (int op = 0; op < OP_COUNT; op++) {
        L.record[op] = o->prof_all;
        for (int i = 0; i < o->n_ops; i++) L.record[op] |= !strcmp(o->ops[i], comm_log_op_names[op]);
    }
    CommOps w = *c->ops;  // the name, finalize, wait and timing stay the real table's
    w.allreduce_sum = w_allreduce_sum, w.allgather_range = w_allgather_range;
    w.allreduce_max_f32 = w_allreduce_max_f32;
    w.reduce_scatter_range = w_reduce_scatter_range, w.allreduce_sum_buckets = w_allreduce_sum_buckets;
    w.allreduce_host = w_allreduce_host, w.gather_partitions_host_f32 = w_gather_partitions_host_f32;
    w.barrier = w_barrier, w.gather_bytes_host = w_gather_bytes_host;
    L.wrapped = w;
    L.real->timing(c, 1);  // GPU ranks: each collective's own time on the communication stream
    L.real->busy_ms(c);    // from zero
    c->ops = &L.wrapped;
}

static int by_bytes(const void *a, const void *b) {
    size_t x = (*(const LogRow *const *)a)->bytes, y = (*(const LogRow *const *)b)->bytes;
    return (x > y) - (x < y);
}
static int by_value(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// DeepSpeed's trim_mean(data, 0.1) of the latencies, and of algbw/busbw (a rate is size / latency
// times a constant: its trimmed set is the same calls, so it is averaged over those).
static void trimmed(const LogRow *r, int world, double *lat, double *alg, double *bus) {
    float *v = mallocCheck((size_t)r->n * sizeof *v);
    memcpy(v, r->ms, (size_t)r->n * sizeof *v);
    qsort(v, (size_t)r->n, sizeof *v, by_value);
    long k = (long)nearbyint((double)r->n * 0.1);  // Python's round(): half to even
    double sl = 0, sa = 0, sb = 0;
    long m = 0;
    for (long i = k; i < r->n - k; i++, m++) {
        double a, b;
        comm_log_bandwidth(comm_log_op_names[r->op], (double)r->bytes, v[i], world, &a, &b);
        sl += v[i], sa += a, sb += b;
    }
    *lat = m ? sl / (double)m : 0;
    *alg = m ? sa / (double)m : 0;
    *bus = m ? sb / (double)m : 0;
    free(v);
}

void comm_log_summary(FILE *f) {
    if (!L.real) return;
    fprintf(f, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s\n", "Comm. Op", "Message Size", "Count", "Total Latency(ms)",
            "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)");
    for (int order = 1; order <= L.n_first; order++) {
        int op = 0;
        while (op < OP_COUNT && L.first[op] != order) op++;
        fprintf(f, "%s\n", comm_log_op_names[op]);
        const LogRow **rows = mallocCheck((size_t)L.nrows * sizeof *rows);
        int n = 0;
        for (int i = 0; i < L.nrows; i++)
            if (L.rows[i].op == op) rows[n++] = &L.rows[i];
        qsort(rows, (size_t)n, sizeof *rows, by_bytes);
        for (int i = 0; i < n; i++) {
            double total = 0, lat, alg, bus;
            for (long j = 0; j < rows[i]->n; j++) total += rows[i]->ms[j];
            trimmed(rows[i], L.world, &lat, &alg, &bus);
            char size[32];
            comm_log_size_text((double)rows[i]->bytes, size, sizeof size);
            fprintf(f, "%-20s%-20s%-20ld%-20.2f%-20.2f%-20.2f%-20.2f\n", " ", size, rows[i]->n, total, lat, alg, bus);
        }
        free(rows);
    }
    fflush(f);
    for (int i = 0; i < L.nrows; i++) free(L.rows[i].ms);
    L.nrows = 0;
    L.n_first = 0;
    memset(L.first, 0, sizeof L.first);
}

void comm_log_uninstall(Comm *c) {
    if (!L.real) return;
    if (c->ops == &L.wrapped) c->ops = L.real;
    L.real->timing(c, 0);
    for (int i = 0; i < L.nrows; i++) free(L.rows[i].ms);
    free(L.rows);
    memset(&L, 0, sizeof L);
}
