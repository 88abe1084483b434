// comm/comm_nccl.cu: the NCCL table of comm/comm.h, for GPU ranks (comm_nccl_ops,
// attached by comm_attach_device through comm_nccl_attach). Buffers are device pointers
// on the backend's stream; host arrays (token counts, losses, checkpoint and prediction
// gathers) go over MPI when the ranks were started by mpirun, else through a device
// staging buffer and NCCL.
// Every call is on the backend's stream, so collectives are ordered with the kernels
// around them. NCCL has no all-gather-v / reduce-scatter-v: the ranged collectives are one
// group of per-piece broadcasts (all-gather) or reduces (reduce-scatter), root = the
// piece's owner; ranks with an empty piece are left out. World 1 takes the same path.
//
// A rank that dies: NCCL reports network failures (a peer's socket or IB connection
// closing) as an asynchronous error; a peer that dies inside a node (NVLink / shared
// memory) leaves the others' kernels spinning with no error at all. A watchdog thread
// polls ncclCommGetAsyncError every second and notes when the last collective was
// enqueued; an async error, or a collective (or the communicator set-up) not finished
// after T5_NCCL_TIMEOUT seconds (default 1800, as DeepSpeed's 30 minutes), ends the rank
// with an error naming it. The launchers then stop the others: --num_gpus and torchrun
// kill the remaining ranks when one fails; srun does with --kill-on-bad-exit=1.
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>

extern "C" {
#include "../common/check.h"
#include "../common/t5_env.h"
#include "../kernels/backend.h"
#include "comm.h"
#include "launch.h"
#include "../common/range.h"
}
#include "../kernels/cuda/cuda_ops.h"
#include "comm_mpi.h"  // mpirun GPU ranks: host arrays over MPI

#define STAGE_BYTES ((size_t)64 << 20)  // device staging for host arrays, in chunks
#define DEFAULT_TIMEOUT_S 1800.0
// Tickets are events in a ring, recorded after collectives on the communication stream.
// A slot re-recorded by a later collective only makes a wait longer (the stream runs in
// order), never wrong.
#define TICKET_RING 256
#define TIMING_RING 4096  // timed collectives kept before they are folded into the sum

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;  // the backend's compute stream (cuda_stream())
    cudaStream_t cstream; // the communication stream: every NCCL call and staging copy runs here
    cudaEvent_t ev_in;    // recorded on the compute stream before a collective; cstream waits on it
    cudaEvent_t ring[TICKET_RING];  // recorded on cstream after collectives: the tickets
    unsigned next_ticket;
    void *stage;          // STAGE_BYTES of device memory, allocated on first use
    int rank, world, device;
    // watchdog (see the top of this file)
    pthread_t watchdog;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    cudaEvent_t done;     // recorded after the latest collective
    int pending;          // a collective (or set-up) started and not seen finished
    int has_event;        // `done` follows it
    double since;         // when it started
    double timeout_s;
    int stop;
    // comm_timing: a (start, end) event pair per collective on cstream, folded into busy_ms
    int timing;
    cudaEvent_t *t_start, *t_end;  // (TIMING_RING) each
    unsigned t_count;              // pairs recorded since the last fold
    double busy_ms;
} NcclState;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- checked calls ------------------------------------------------------------------------

static const char *nccl_hint(ncclResult_t r) {
    switch (r) {
    case ncclUnhandledCudaError:
        return "a CUDA call inside NCCL failed: an earlier kernel may have faulted (rerun with "
               "CUDA_LAUNCH_BLOCKING=1), or the GPU is out of memory";
    case ncclSystemError:
        return "a system call failed (sockets, shared memory): in containers give /dev/shm room (--shm-size); rerun "
               "with NCCL_DEBUG=INFO for details";
    case ncclRemoteError:
        return "another rank failed or its connection broke: check the other ranks' output";
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return "a bug in train_t5's call (pointers, counts, ranks): rerun with NCCL_DEBUG=WARN and report it";
    case ncclInternalError:
        return "an NCCL internal error: rerun with NCCL_DEBUG=INFO; check that every rank runs the same NCCL version";
    default:
        return "rerun with NCCL_DEBUG=INFO for NCCL's own log";
    }
}

static void nccl_check(ncclResult_t r, ncclComm_t comm, int rank, const char *stmt, const char *file, int line) {
    if (r == ncclSuccess) return;
    const char *last = ncclGetLastError(comm);
    char msg[1024];
    snprintf(msg, sizeof msg, "rank %d: NCCL error %d (%s) in %s%s%s", rank, (int)r, ncclGetErrorString(r), stmt,
             last && *last ? ": " : "", last ? last : "");
    t5_die(file, line, msg, nccl_hint(r));
}

static void cuda_check_call(cudaError_t e, int rank, const char *stmt, const char *file, int line) {
    if (e == cudaSuccess) return;
    char msg[1024];
    snprintf(msg, sizeof msg, "rank %d: CUDA error %s (%s) in %s", rank, cudaGetErrorName(e), cudaGetErrorString(e),
             stmt);
    t5_die(file, line, msg,
           "rerun with CUDA_LAUNCH_BLOCKING=1 (errors of asynchronous work surface at a later call) or under "
           "compute-sanitizer");
}

#define ncclCheck(s, call) nccl_check((call), (s)->comm, (s)->rank, #call, __FILE__, __LINE__)
#define cudaCheckRank(s, call) cuda_check_call((call), (s)->rank, #call, __FILE__, __LINE__)

// ---- watchdog -----------------------------------------------------------------------------

static void watchdog_fail(NcclState *s, const char *what, const char *hint) {
    fflush(stdout);
    fprintf(stderr, "error: rank %d of %d: %s\nHINT: %s\n", s->rank, s->world, what, hint);
    fflush(stderr);
    _exit(1);  // the main thread may be blocked inside CUDA/NCCL: do not wait for it
}

static void *watchdog_main(void *arg) {
    NcclState *s = (NcclState *)arg;
    cudaSetDevice(s->device);
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&s->wake, &s->mu, &ts);
        if (s->stop) break;
        ncclResult_t async = ncclSuccess;
        if (s->comm && ncclCommGetAsyncError(s->comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
            char what[768];
            const char *last = ncclGetLastError(s->comm);
            snprintf(what, sizeof what, "NCCL reported an asynchronous error %d (%s)%s%s", (int)async,
                     ncclGetErrorString(async), last && *last ? ": " : "", last ? last : "");
            watchdog_fail(s, what, nccl_hint(async));
        }
        if (!s->pending) continue;
        if (s->has_event) {
            cudaError_t q = cudaEventQuery(s->done);
            if (q != cudaErrorNotReady) {  // done, or a CUDA error the main thread reports itself
                s->pending = 0;
                continue;
            }
        }
        if (now_s() - s->since > s->timeout_s) {
            char what[512];
            snprintf(what, sizeof what, "%s has not finished after %.0f s (T5_NCCL_TIMEOUT)",
                     s->comm ? "a collective" : "creating the NCCL communicator", s->timeout_s);
            watchdog_fail(s, what,
                          "another rank died or hangs: see the other ranks' output; rerun with NCCL_DEBUG=INFO; raise "
                          "T5_NCCL_TIMEOUT (seconds) if a step legitimately takes longer");
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// Around every collective group: begin before NCCL is called (its first call may block on
// the host while connections are made), end after it is enqueued.
static void watch_begin(NcclState *s) {
    pthread_mutex_lock(&s->mu);
    s->pending = 1;
    s->has_event = 0;
    s->since = now_s();
    pthread_mutex_unlock(&s->mu);
}

static void watch_end(NcclState *s) {
    pthread_mutex_lock(&s->mu);
    cudaError_t e = cudaEventRecord(s->done, s->cstream);
    s->has_event = e == cudaSuccess;
    pthread_mutex_unlock(&s->mu);
    cudaCheckRank(s, e);  // outside the lock: an error exits, and exit joins the watchdog
}

// Stop and join the watchdog (idempotent). Also at exit: an error exit elsewhere must not
// tear the CUDA runtime down under a thread still polling it.
static NcclState *watched;
static void watch_stop(void) {
    NcclState *s = watched;
    if (!s) return;
    watched = NULL;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->watchdog, NULL);
}

// ---- set-up --------------------------------------------------------------------------------

static ncclDataType_t nccl_type(Dtype t) {
    switch (t) {
    case DTYPE_F32: return ncclFloat32;
    case DTYPE_F16: return ncclFloat16;
    case DTYPE_BF16: return ncclBfloat16;
    }
    t5_fail("NCCL: unknown dtype %d", (int)t);
}

static NcclState *state_of(const Comm *c) { return (NcclState *)c->nccl; }

static void nccl_init(Comm *c) {
    if (c->nccl) return;
    NcclState *s = (NcclState *)callocCheck(1, sizeof(NcclState));
    s->rank = c->rank;
    s->world = c->world;
    s->stream = (cudaStream_t)cuda_stream();  // dies with a clear message when cuda_init was not called
    cudaCheckRank(s, cudaGetDevice(&s->device));
    if (s->device != c->local_rank) {
        char msg[256];
        snprintf(msg, sizeof msg, "rank %d runs on CUDA device %d, but its local rank is %d", c->rank, s->device,
                 c->local_rank);
        t5_die(__FILE__, __LINE__, msg, "comm_nccl_attach selects the GPU of the local rank first (a bug in the caller)");
    }
    const char *t = t5_env_get(T5_ENV_NCCL_TIMEOUT);
    s->timeout_s = c->nccl_timeout_s > 0 ? c->nccl_timeout_s : DEFAULT_TIMEOUT_S;  // the caller's (--ddp_timeout) first
    if (!(c->nccl_timeout_s > 0) && t && *t) {
        char *end = NULL;
        s->timeout_s = strtod(t, &end);
        if (*end || !(s->timeout_s > 0)) t5_fail("T5_NCCL_TIMEOUT=\"%s\": expected seconds > 0", t);
    }
    cudaCheckRank(s, cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
    // the communication stream at the highest priority: a collective's blocks are scheduled
    // ahead of the compute kernels queued beside it, so it is not starved behind them
    int least_prio = 0, greatest_prio = 0;
    cudaCheckRank(s, cudaDeviceGetStreamPriorityRange(&least_prio, &greatest_prio));
    cudaCheckRank(s, cudaStreamCreateWithPriority(&s->cstream, cudaStreamNonBlocking, greatest_prio));
    cudaCheckRank(s, cudaEventCreateWithFlags(&s->ev_in, cudaEventDisableTiming));
    for (int i = 0; i < TICKET_RING; i++) cudaCheckRank(s, cudaEventCreateWithFlags(&s->ring[i], cudaEventDisableTiming));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);

    // the unique id: made by rank 0, sent over MPI or the TCP rendezvous
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) ncclCheck(s, ncclGetUniqueId(&id));
    if (c->world > 1) {
        if (c->mpi) {
            int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
            if (rc != MPI_SUCCESS) t5_die(__FILE__, __LINE__, "MPI_Bcast of the NCCL id failed", "check the other ranks' output");
        } else {
            const char *addr;
            int port;
            launch_master_addr(c->launcher, &addr, &port);
            // the connections stay open for the heartbeat (comm/liveness.h)
            launch_tcp_broadcast_watched(addr, port, c->rank, c->world, &id, sizeof id, LAUNCH_TCP_TIMEOUT_S);
        }
    }
    watch_begin(s);  // set-up blocks until every rank has joined: watched too
    if (pthread_create(&s->watchdog, NULL, watchdog_main, s) != 0)
        t5_die(__FILE__, __LINE__, "cannot start the NCCL watchdog thread", "the system is out of threads");
    watched = s;
    atexit(watch_stop);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    config.commName = "train_t5";
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, c->world, id, c->rank, &config);
    nccl_check(r, comm, c->rank, "ncclCommInitRankConfig", __FILE__, __LINE__);
    pthread_mutex_lock(&s->mu);
    s->comm = comm;
    s->pending = 0;
    pthread_mutex_unlock(&s->mu);
    c->nccl = s;
}

static void nccl_finalize(Comm *c) {
    NcclState *s = state_of(c);
    if (!s) return;
    cudaCheckRank(s, cudaStreamSynchronize(s->stream));
    cudaCheckRank(s, cudaStreamSynchronize(s->cstream));
    watch_begin(s);  // finalizing waits for the peers' outstanding work: watched too
    ncclCheck(s, ncclCommFinalize(s->comm));
    watch_stop();
    ncclCheck(s, ncclCommDestroy(s->comm));
    if (s->stage) cudaCheckRank(s, cudaFree(s->stage));
    cudaCheckRank(s, cudaEventDestroy(s->done));
    cudaCheckRank(s, cudaEventDestroy(s->ev_in));
    for (int i = 0; i < TICKET_RING; i++) cudaCheckRank(s, cudaEventDestroy(s->ring[i]));
    cudaCheckRank(s, cudaStreamDestroy(s->cstream));
    if (s->t_start) {
        for (int i = 0; i < TIMING_RING; i++) {
            cudaCheckRank(s, cudaEventDestroy(s->t_start[i]));
            cudaCheckRank(s, cudaEventDestroy(s->t_end[i]));
        }
        free(s->t_start);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
    c->nccl = NULL;
}

// ---- collectives on device buffers -----------------------------------------------------------

// The communication stream starts after the compute stream's queued work (the inputs).
static void timing_fold(NcclState *s) {
    if (!s->t_count) return;
    cudaCheckRank(s, cudaEventSynchronize(s->t_end[s->t_count - 1]));
    for (unsigned i = 0; i < s->t_count; i++) {
        float ms = 0;
        cudaCheckRank(s, cudaEventElapsedTime(&ms, s->t_start[i], s->t_end[i]));
        s->busy_ms += ms;
    }
    s->t_count = 0;
}

static void cstream_enter(NcclState *s) {
    cudaCheckRank(s, cudaEventRecord(s->ev_in, s->stream));
    cudaCheckRank(s, cudaStreamWaitEvent(s->cstream, s->ev_in, 0));
    if (s->timing) {  // starts once the inputs are ready: the collective's own time
        if (s->t_count == TIMING_RING) timing_fold(s);
        cudaCheckRank(s, cudaEventRecord(s->t_start[s->t_count], s->cstream));
    }
}

// A ticket after the collectives issued so far; async 0: the compute stream waits for it now.
static int ticket_record(NcclState *s, int async) {
    int slot = (int)(s->next_ticket++ % TICKET_RING);
    cudaCheckRank(s, cudaEventRecord(s->ring[slot], s->cstream));
    if (!async) cudaCheckRank(s, cudaStreamWaitEvent(s->stream, s->ring[slot], 0));
    return slot;
}

// The end of a collective cstream_enter began (its timing event), and its ticket.
static int cstream_leave(NcclState *s, int async) {
    if (s->timing) cudaCheckRank(s, cudaEventRecord(s->t_end[s->t_count++], s->cstream));
    return ticket_record(s, async);
}

static void nccl_wait(const Comm *c, int slot) {
    NcclState *s = state_of(c);
    if (slot < 0) slot = ticket_record(s, 1);  // everything issued so far
    cudaCheckRank(s, cudaStreamWaitEvent(s->stream, s->ring[slot % TICKET_RING], 0));
}

static void nccl_allreduce_sum(const Comm *c, void *buf, size_t n, Dtype t) {
    NcclState *s = state_of(c);
    if (n == 0) return;
    cstream_enter(s);
    watch_begin(s);
    ncclCheck(s, ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, s->comm, s->cstream));
    watch_end(s);
    cstream_leave(s, 0);
}

static void nccl_allreduce_max_f32(const Comm *c, float *buf, size_t n) {
    NcclState *s = state_of(c);
    if (n == 0) return;
    cstream_enter(s);
    watch_begin(s);
    ncclCheck(s, ncclAllReduce(buf, buf, n, ncclFloat32, ncclMax, s->comm, s->cstream));
    watch_end(s);
    cstream_leave(s, 0);
}

static int nccl_allreduce_sum_buckets(const Comm *c, void *buf, size_t n, size_t bucket, Dtype t, int async) {
    NcclState *s = state_of(c);
    size_t es = comm_dtype_size(t), step = bucket ? bucket : (n ? n : 1);
    cstream_enter(s);
    watch_begin(s);
    ncclCheck(s, ncclGroupStart());
    for (size_t lo = 0; lo < n; lo += step)
        ncclCheck(s, ncclAllReduce((char *)buf + lo * es, (char *)buf + lo * es, n - lo < step ? n - lo : step,
                                   nccl_type(t), ncclSum, s->comm, s->cstream));
    ncclCheck(s, ncclGroupEnd());
    watch_end(s);
    return cstream_leave(s, async);
}

static int nccl_allgather_range(const Comm *c, const void *mine, void *out, size_t lo, size_t hi,
                                         size_t n_total, Dtype t, int async) {
    NcclState *s = state_of(c);
    size_t es = comm_dtype_size(t);
    cstream_enter(s);
    watch_begin(s);
    ncclCheck(s, ncclGroupStart());
    for (int r = 0; r < c->world; r++) {
        Range p = comm_piece_of(c, r, lo, hi, n_total);
        if (p.end == p.begin) continue;
        // the root sends `mine` (in place when it already sits at its position in out)
        ncclCheck(s, ncclBroadcast(r == c->rank ? mine : NULL, (char *)out + p.begin * es, p.end - p.begin,
                                   nccl_type(t), r, s->comm, s->cstream));
    }
    ncclCheck(s, ncclGroupEnd());
    watch_end(s);
    return cstream_leave(s, async);
}

static int nccl_reduce_scatter_range(const Comm *c, const void *send, void *recv, size_t lo, size_t hi,
                                              size_t n_total, Dtype t, int async) {
    NcclState *s = state_of(c);
    size_t es = comm_dtype_size(t);
    cstream_enter(s);
    watch_begin(s);
    ncclCheck(s, ncclGroupStart());
    for (int r = 0; r < c->world; r++) {
        Range p = comm_piece_of(c, r, lo, hi, n_total);
        if (p.end == p.begin) continue;
        // recvbuff is used only on the root
        ncclCheck(s, ncclReduce((const char *)send + p.begin * es, r == c->rank ? recv : NULL, p.end - p.begin,
                                nccl_type(t), ncclSum, r, s->comm, s->cstream));
    }
    ncclCheck(s, ncclGroupEnd());
    watch_end(s);
    return cstream_leave(s, async);
}

// ---- host arrays through the staging buffer ---------------------------------------------------

static void *stage_of(NcclState *s) {
    if (!s->stage) cudaCheckRank(s, cudaMalloc(&s->stage, STAGE_BYTES));
    return s->stage;
}

static void stage_sync(NcclState *s) { cudaCheckRank(s, cudaStreamSynchronize(s->cstream)); }

static void nccl_allreduce_host(const Comm *c, void *buf, size_t n, int is_f64) {
    NcclState *s = state_of(c);
    const size_t es = 8, chunk = STAGE_BYTES / es;  // double and long long are both 8 bytes
    char *dev = (char *)stage_of(s), *host = (char *)buf;
    for (size_t done = 0; done < n; done += chunk) {
        size_t k = n - done < chunk ? n - done : chunk;
        cudaCheckRank(s, cudaMemcpyAsync(dev, host + done * es, k * es, cudaMemcpyHostToDevice, s->cstream));
        watch_begin(s);
        ncclCheck(s, ncclAllReduce(dev, dev, k, is_f64 ? ncclFloat64 : ncclInt64, ncclSum, s->comm, s->cstream));
        watch_end(s);
        cudaCheckRank(s, cudaMemcpyAsync(host + done * es, dev, k * es, cudaMemcpyDeviceToHost, s->cstream));
        stage_sync(s);
    }
}

// Chunk by chunk of the flat space: every rank > 0 sends its piece to rank 0, which copies
// its own piece in and the whole chunk out.
static void nccl_gather_partitions_host_f32(const Comm *c, const float *mine, float *all, size_t n_total) {
    NcclState *s = state_of(c);
    const size_t chunk = STAGE_BYTES / sizeof(float);
    float *dev = (float *)stage_of(s);
    Range own = range_split_ceil(n_total, c->world, c->rank);
    for (size_t lo = 0; lo < n_total; lo += chunk) {
        size_t hi = n_total - lo < chunk ? n_total : lo + chunk;
        Range me = comm_piece_of(c, c->rank, lo, hi, n_total);
        size_t k = me.end - me.begin;
        const float *src = mine + (lo + me.begin - own.begin);
        if (k) cudaCheckRank(s, cudaMemcpyAsync(dev + me.begin, src, k * sizeof(float), cudaMemcpyHostToDevice, s->cstream));
        watch_begin(s);
        ncclCheck(s, ncclGroupStart());
        for (int r = 1; r < c->world; r++) {
            Range p = comm_piece_of(c, r, lo, hi, n_total);
            if (p.end == p.begin) continue;
            if (c->rank == 0)
                ncclCheck(s, ncclRecv(dev + p.begin, p.end - p.begin, ncclFloat32, r, s->comm, s->cstream));
            else if (r == c->rank)
                ncclCheck(s, ncclSend(dev + p.begin, p.end - p.begin, ncclFloat32, 0, s->comm, s->cstream));
        }
        ncclCheck(s, ncclGroupEnd());
        watch_end(s);
        if (c->rank == 0)
            cudaCheckRank(s, cudaMemcpyAsync(all + lo, dev, (hi - lo) * sizeof(float), cudaMemcpyDeviceToHost, s->cstream));
        stage_sync(s);
    }
}

static void nccl_barrier(const Comm *c) {
    NcclState *s = state_of(c);
    void *dev = stage_of(s);
    watch_begin(s);
    ncclCheck(s, ncclAllReduce(dev, dev, 1, ncclInt32, ncclSum, s->comm, s->cstream));
    watch_end(s);
    stage_sync(s);
}

// Byte counts first (an all-reduce of a world-long vector holding this rank's count), then
// chunk by chunk every rank > 0 sends its bytes to rank 0 through the staging buffer.
static void nccl_gather_bytes_host(const Comm *c, const void *mine, size_t n, char **all, size_t *counts) {
    NcclState *s = state_of(c);
    long long *sizes = (long long *)callocCheck((size_t)c->world, sizeof(long long));
    sizes[c->rank] = (long long)n;
    nccl_allreduce_host(c, sizes, (size_t)c->world, 0);
    size_t total = 0;
    for (int r = 0; r < c->world; r++) total += (size_t)sizes[r];
    char *out = c->rank == 0 ? (char *)mallocCheck(total ? total : 1) : NULL;
    if (c->rank == 0) {
        if (n) memcpy(out, mine, n);
        for (int r = 0; r < c->world; r++) counts[r] = (size_t)sizes[r];
    }
    char *dev = (char *)stage_of(s);
    size_t at = n;  // rank 0's write position in out
    for (int r = 1; r < c->world; r++) {
        for (size_t done = 0; done < (size_t)sizes[r]; done += STAGE_BYTES) {
            size_t k = (size_t)sizes[r] - done < STAGE_BYTES ? (size_t)sizes[r] - done : STAGE_BYTES;
            if (c->rank == r)
                cudaCheckRank(s, cudaMemcpyAsync(dev, (const char *)mine + done, k, cudaMemcpyHostToDevice, s->cstream));
            if (c->rank == r || c->rank == 0) {
                watch_begin(s);
                if (c->rank == r) ncclCheck(s, ncclSend(dev, k, ncclUint8, 0, s->comm, s->cstream));
                else ncclCheck(s, ncclRecv(dev, k, ncclUint8, r, s->comm, s->cstream));
                watch_end(s);
            }
            if (c->rank == 0) cudaCheckRank(s, cudaMemcpyAsync(out + at + done, dev, k, cudaMemcpyDeviceToHost, s->cstream));
            stage_sync(s);
        }
        if (c->rank == 0) at += (size_t)sizes[r];
    }
    free(sizes);
    *all = out;
}

static void nccl_timing(const Comm *c, int on) {
    NcclState *s = state_of(c);
    if (on && !s->t_start) {
        s->t_start = (cudaEvent_t *)callocCheck(2 * TIMING_RING, sizeof(cudaEvent_t));
        s->t_end = s->t_start + TIMING_RING;
        for (int i = 0; i < TIMING_RING; i++) {
            cudaCheckRank(s, cudaEventCreate(&s->t_start[i]));
            cudaCheckRank(s, cudaEventCreate(&s->t_end[i]));
        }
    }
    if (!on) timing_fold(s);
    s->timing = on && s->t_start;
}

static double nccl_busy_ms(const Comm *c) {
    NcclState *s = state_of(c);
    if (!s->t_start) return -1.0;
    timing_fold(s);
    double ms = s->busy_ms;
    s->busy_ms = 0;
    return ms;
}

// ---- the table --------------------------------------------------------------------------------
// Host arrays: ranks started by mpirun have MPI up and use it (the MPI table's entries);
// the others (torchrun, Slurm, --num_gpus) stage them through the device.

static void nccl_allreduce_host_or_mpi(const Comm *c, void *buf, size_t n, int is_f64) {
    if (c->mpi) return comm_mpi_ops.allreduce_host(c, buf, n, is_f64);
    nccl_allreduce_host(c, buf, n, is_f64);
}

static void nccl_gather_partitions_host_or_mpi(const Comm *c, const float *mine, float *all, size_t n_total) {
    if (c->mpi) return comm_mpi_ops.gather_partitions_host_f32(c, mine, all, n_total);
    nccl_gather_partitions_host_f32(c, mine, all, n_total);
}

static void nccl_barrier_or_mpi(const Comm *c) {
    if (c->mpi) return comm_mpi_ops.barrier(c);
    nccl_barrier(c);
}

static void nccl_gather_bytes_host_or_mpi(const Comm *c, const void *mine, size_t n, char **all, size_t *counts) {
    if (c->mpi) return comm_mpi_ops.gather_bytes_host(c, mine, n, all, counts);
    *all = NULL;
    nccl_gather_bytes_host(c, mine, n, all, counts);
}

static const CommOps nccl_ops = {
    "nccl",
    nccl_finalize,
    nccl_allreduce_sum,
    nccl_allreduce_max_f32,
    nccl_allgather_range,
    nccl_reduce_scatter_range,
    nccl_allreduce_sum_buckets,
    nccl_wait,
    nccl_allreduce_host_or_mpi,
    nccl_gather_partitions_host_or_mpi,
    nccl_barrier_or_mpi,
    nccl_gather_bytes_host_or_mpi,
    nccl_timing,
    nccl_busy_ms,
};

extern "C" const CommOps *comm_nccl_ops(void) { return &nccl_ops; }

extern "C" void comm_nccl_attach(Comm *c) {
    cuda_init(c->local_rank);  // this rank's GPU (the backend's context), before NCCL binds to it
    nccl_init(c);
}
