// tests/test_nvme_aio.c: DeepSpeed's "aio" block in the NVMe engine (zero/nvme.c): for several
// settings, data written through nvme_write reads back bit for bit (odd lengths, every array,
// from several threads' parts), and the engine's counters show each key taking effect:
//   block_size            requests per transfer = ceil(bytes / block_size);
//   queue_depth           never more requests in flight in one context;
//   intra_op_parallelism  that many threads per transfer (when it has as many requests);
//   single_submit         one io_submit per request, else one per batch;
//   overlap_events        false: batches of queue_depth, each all waited for (submits = batches).
// Also the start-up words (nvme_describe) and the config keys reaching ZeroOptions. The file
// goes in a temp dir under /tmp (O_DIRECT where the file system takes it).
#include <string.h>

#include "../common/check.h"
#include "../deepspeed/ds_config.h"
#include "../zero/nvme.h"
#include "../deepspeed/ds_zero_options.h"
#include "../zero/zero.h"
#include "test.h"
#include "test_tmp.h"

static void fill(float *x, size_t n, unsigned seed) {
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)(int)(s >> 8) / 65536.0f;
    }
}

typedef struct {
    const char *name;
    NvmeAio aio;
    size_t count;  // floats per transfer
} Case;

// One case: write and read back every array in one transfer each; the counters after.
static void run_case(const char *dir, const Case *k) {
    NvmeStore s;
    size_t n = k->count;
    nvme_open(&s, dir, 0, n, &k->aio);
    float *src = nvme_buffer(n), *dst = nvme_buffer(n);
    int same = 1;
    for (int a = 0; a < NVME_ARRAYS; a++) {
        fill(src, n, (unsigned)(a + 7));
        nvme_write(&s, a, 0, n, src);
    }
    for (int a = 0; a < NVME_ARRAYS; a++) {
        fill(src, n, (unsigned)(a + 7));
        memset(dst, 0, n * sizeof(float));
        nvme_read(&s, a, 0, n, dst);
        same &= !memcmp(src, dst, n * sizeof(float));
    }
    char what[512], desc[256];
    nvme_describe(&s, desc, sizeof desc);
    snprintf(what, sizeof what, "%-34s %zu floats x 3 arrays written and read back bit for bit (%s)", k->name, n, desc);
    test_check(same, what);

    const NvmeStats *st = s.stats;
    size_t bytes = s.direct ? (n * 4 + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN : n * 4;
    long per = (long)((bytes + k->aio.block_size - 1) / k->aio.block_size), transfers = 2 * NVME_ARRAYS;
    snprintf(what, sizeof what, "%-34s block_size %zu: %ld requests (want %ld x %ld transfers = %ld)", k->name,
             k->aio.block_size, st->requests, per, transfers, per * transfers);
    test_check(st->transfers == transfers && st->requests == per * transfers, what);
    int threads = k->aio.threads < per ? k->aio.threads : (int)per;
    snprintf(what, sizeof what, "%-34s intra_op_parallelism %d: %ld threads on a transfer (want %d)", k->name,
             k->aio.threads, st->max_threads, threads);
    test_check(st->max_threads == threads, what);
    if (s.native_aio) {
        // each thread's part: whole requests, split as evenly as they go
        long part = (per + threads - 1) / threads;
        long want_max = part < k->aio.queue_depth ? part : k->aio.queue_depth;
        snprintf(what, sizeof what, "%-34s queue_depth %d: at most %ld requests in flight (want %ld)", k->name,
                 k->aio.queue_depth, st->max_in_flight, want_max);
        test_check(st->max_in_flight == want_max, what);
        long want_submits = 0;  // per transfer, summed over its threads' parts
        for (int t = 0; t < threads; t++) {
            long r = per / threads + (t < per % threads);
            if (k->aio.single_submit) want_submits += r;
            else if (!k->aio.overlap_events) want_submits += (r + k->aio.queue_depth - 1) / k->aio.queue_depth;
            else want_submits = -1;  // overlapped refills: as many as the completions come back in; checked below
        }
        if (want_submits >= 0) {
            snprintf(what, sizeof what, "%-34s single_submit %d, overlap_events %d: %ld io_submit calls (want %ld)",
                     k->name, k->aio.single_submit, k->aio.overlap_events, st->submits, want_submits * transfers);
            test_check(st->submits == want_submits * transfers, what);
        } else {
            snprintf(what, sizeof what, "%-34s batched, overlapped: %ld io_submit calls, fewer than the %ld requests",
                     k->name, st->submits, st->requests);
            test_check(st->submits >= transfers && (per <= 1 || st->submits < st->requests), what);
        }
    } else {
        printf("NOTICE: this kernel refuses native AIO: queue_depth/single_submit/overlap_events are not checked\n");
    }
    nvme_buffer_free(src);
    nvme_buffer_free(dst);
    nvme_close(&s);
}

// The config's "aio" block reaches the engine's settings (zero_options_from_config), and
// without the block DeepSpeed's defaults do.
static void test_config(const char *dir) {
    char path[512], json[1024];
    snprintf(path, sizeof path, "%s/aio.json", dir);
    snprintf(json, sizeof json, "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", "
             "\"nvme_path\": \"%s\"}}, \"aio\": {\"block_size\": 65536, \"queue_depth\": 4, \"thread_count\": 3, "
             "\"single_submit\": true, \"overlap_events\": false, \"use_gds\": false}}", dir);
    FILE *f = fopenCheck(path, "w");
    fputs(json, f);
    fcloseCheck(f, path);
    DsConfig c;
    ds_config_load(&c, path);
    ZeroOptions o = zero_options_from_config(&c, path);
    char what[256];
    snprintf(what, sizeof what, "config aio -> ZeroOptions: block %zu qd %d threads %d single %d overlap %d",
             o.nvme_aio.block_size, o.nvme_aio.queue_depth, o.nvme_aio.threads, o.nvme_aio.single_submit,
             o.nvme_aio.overlap_events);
    test_check(o.nvme_aio.block_size == 65536 && o.nvme_aio.queue_depth == 4 && o.nvme_aio.threads == 3 &&
                   o.nvme_aio.single_submit == 1 && o.nvme_aio.overlap_events == 0, what);
    snprintf(json, sizeof json, "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", "
             "\"nvme_path\": \"%s\"}}}", dir);
    f = fopenCheck(path, "w");
    fputs(json, f);
    fcloseCheck(f, path);
    ds_config_load(&c, path);
    o = zero_options_from_config(&c, path);
    NvmeAio d = NVME_AIO_DEFAULT;
    snprintf(what, sizeof what, "no aio block -> DeepSpeed's defaults: block %zu qd %d threads %d single %d overlap %d",
             o.nvme_aio.block_size, o.nvme_aio.queue_depth, o.nvme_aio.threads, o.nvme_aio.single_submit,
             o.nvme_aio.overlap_events);
    test_check(!memcmp(&o.nvme_aio, &d, sizeof d) && d.block_size == 1048576 && d.queue_depth == 8 && d.threads == 1 &&
                   !d.single_submit && d.overlap_events, what);
    remove(path);
}

int main(void) {
    char dir[] = "/tmp/t5_nvme_aio_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    const Case cases[] = {
        {"defaults (1 MiB requests)", NVME_AIO_DEFAULT, 300000},
        {"8 KiB requests, batched", {8192, 8, 1, 0, 1}, 10000},
        {"8 KiB, queue depth 2, overlapped", {8192, 2, 1, 0, 1}, 20001},
        {"8 KiB, single submits", {8192, 4, 1, 1, 1}, 12345},
        {"8 KiB, qd 3, batch-wise", {8192, 3, 1, 0, 0}, 20000},
        {"4 KiB, 3 threads, single, batch-wise", {4096, 2, 3, 1, 0}, 9999},
        {"16 KiB, 4 threads, overlapped", {16384, 8, 4, 0, 1}, 70000},
        {"more threads than requests", {1048576, 8, 4, 0, 1}, 1000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(dir, &cases[i]);
    test_config(dir);
    rm_rf(dir);
    return test_summary();
}
