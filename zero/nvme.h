// zero/nvme.h: the NVMe store of ZeRO-Infinity's optimizer offload ("offload_optimizer":
// {"device": "nvme", "nvme_path": DIR}). One file per rank in DIR holds the rank's
// partition of the fp32 master weights, exp_avg and exp_avg_sq (three arrays of n floats,
// each padded to a 4 KiB boundary); the offloaded step (zero/offload.c) reads a chunk of
// all three, updates it and writes it back. Host memory then holds only chunk buffers.
//
// I/O: O_DIRECT (no page cache: the state really leaves host memory) when the file system
// takes it, buffered otherwise (tmpfs, some overlay file systems), said once at start-up.
// Buffers and offsets are 4 KiB aligned; a short tail is read and written as a whole 4 KiB
// block (the file's padding). A transfer is cut as DeepSpeed's "aio" block says (NvmeAio):
// into block_size requests, over intra_op_parallelism threads each taking a contiguous part,
// each thread keeping up to queue_depth requests in flight in its own Linux native AIO context
// (io_setup/io_submit/io_getevents, as DeepSpeed's aio library), submitted one per call
// (single_submit) or as a batch, and refilled as each completes (overlap_events) or a batch at
// a time. Where the kernel refuses native AIO (io_setup: ENOSYS, EPERM) each thread issues its
// requests one at a time with pread/pwrite, said once at start-up. Every error names the file, the call and a fix: a
// missing or read-only nvme_path, a full disk (the file is allocated in full at start-up, so
// ENOSPC comes before the first step, not in the middle of training).
#pragma once
#include <pthread.h>
#include <stddef.h>

#define NVME_ALIGN 4096  // bytes: O_DIRECT's alignment of buffers, offsets and sizes

enum { NVME_MASTER = 0, NVME_EXP_AVG = 1, NVME_EXP_AVG_SQ = 2, NVME_ARRAYS = 3 };

// DeepSpeed's "aio" block (runtime/swap_tensor/aio_config.py), its defaults in NVME_AIO_DEFAULT.
typedef struct {
    size_t block_size;     // bytes per request, a multiple of NVME_ALIGN (1 MiB)
    int queue_depth;       // requests in flight per thread (8)
    int threads;           // intra_op_parallelism: threads per transfer (1)
    int single_submit;     // one request per io_submit call (0)
    int overlap_events;    // refill each completed request at once (1); else a batch, then all waited for
} NvmeAio;
#define NVME_AIO_DEFAULT ((NvmeAio){.block_size = 1048576, .queue_depth = 8, .threads = 1, .single_submit = 0, \
                                    .overlap_events = 1})

// What the engine did (for the tests, which check the settings take effect): requests issued,
// io_submit calls, the most requests in flight in one context, transfers (nvme_read/write).
typedef struct {
    long requests, submits, max_in_flight, transfers, max_threads;
} NvmeStats;

typedef struct {
    int fd;
    int direct;            // 1: opened with O_DIRECT
    int native_aio;        // 1: Linux native AIO; 0: pread/pwrite (the kernel refused io_setup)
    NvmeAio aio;
    NvmeStats *stats;      // updated by the I/O threads (atomics)
    size_t n;              // floats per array
    size_t stride;         // bytes from one array to the next (n * 4 rounded up to NVME_ALIGN)
    char path[4096];       // the file (removed by nvme_close)
} NvmeStore;

// Checks that dir exists, is a directory and is writable; dies with a one-line error that
// names the config key (key) otherwise. Called while the config is read, before any work.
void nvme_check_dir(const char *dir, const char *key, const char *config_path);
// Creates DIR/train_t5_optimizer_rank<R>_<pid>.swp, allocated in full (3 arrays of n floats).
// aio: the I/O settings (NULL: DeepSpeed's defaults).
void nvme_open(NvmeStore *s, const char *dir, int rank, size_t n, const NvmeAio *aio);
// "Linux native AIO, O_DIRECT, requests of 1048576 B, queue depth 8, 1 thread, batched submits,
// overlapped completions": the engine's settings in words, for the start-up line.
void nvme_describe(const NvmeStore *s, char *out, size_t cap);
// count floats of array a from element `from` into dst / from src. dst and src must be
// NVME_ALIGN-aligned with room for count rounded up to NVME_ALIGN bytes (nvme_buffer);
// `from` must be a multiple of NVME_ALIGN / 4 elements.
void nvme_read(const NvmeStore *s, int a, size_t from, size_t count, float *dst);
void nvme_write(const NvmeStore *s, int a, size_t from, size_t count, const float *src);
// An aligned, zeroed host buffer for up to count floats of nvme_read / nvme_write; nvme_buffer_free frees it.
float *nvme_buffer(size_t count);
void nvme_buffer_free(float *p);
// Closes and removes the file.
void nvme_close(NvmeStore *s);

// An I/O thread that runs reads or writes of a store in the order they were submitted, so
// that the offloaded step reads the next chunk and writes the last one while the CPU
// updates the current one (zero/offload.c runs one queue for reads and one for writes: the
// disk serves both at once). A job's buffer must stay untouched until its ticket is waited for.
#define NVME_QUEUE_JOBS 16
typedef struct {
    int write, array;
    size_t from, count;
    float *buf;
} NvmeJob;

typedef struct {
    const NvmeStore *store;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    NvmeJob jobs[NVME_QUEUE_JOBS];
    long submitted, done;  // tickets: job t is done when done >= t
    int stop, running;
} NvmeQueue;

void nvme_queue_start(NvmeQueue *q, const NvmeStore *s);
// Queues a read (write = 0) or write of count floats of array `array` from element `from`
// (nvme_read's rules); returns its ticket. Blocks while NVME_QUEUE_JOBS jobs are pending.
long nvme_queue_submit(NvmeQueue *q, int write, int array, size_t from, size_t count, float *buf);
// Returns when every job up to ticket t has run (t <= 0: at once).
void nvme_queue_wait(NvmeQueue *q, long t);
// Runs what is queued, then stops the thread.
void nvme_queue_stop(NvmeQueue *q);
