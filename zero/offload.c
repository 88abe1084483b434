// zero/offload.c: the optimizer's state in host memory and its update on the CPU (see
// offload.h). The element math is the CPU backend's AdamW (kernels/cpu/adamw_math.h, the
// torch step the CPU tests check against Hugging Face), fused with the dtype conversions
// into one SIMD pass per chunk over its tensors' slices (optim/cpu_adam.c). The partition
// goes chunk by chunk through a three-stage pipeline: while the CPU updates chunk k, chunk
// k+1's gradient comes down and chunk k-1's new weights go up (backend.h's asynchronous
// copies: two copy engines), through two page-locked staging buffers each way. sqrt without errno lets the
// remaining scalar loops vectorize (same IEEE results).
#pragma GCC optimize("no-math-errno")
#include "offload.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "../common/half.h"
#include "../kernels/cpu/adamw_math.h"
#include "../optim/cpu_adam.h"
#include "../common/t5_env.h"

#define OFFLOAD_CHUNK ((size_t)16 << 20)  // elements per transfer: 4 staging buffers of 32-64 MiB
// copy slots (backend.h): chunk k's gradient comes down into SLOT_GRAD + k % 2, its weights
// go up from SLOT_PARAM + k % 2
enum { SLOT_GRAD = 0, SLOT_PARAM = 2 };

// Test hook T5_OFFLOAD_CHUNK=N: N elements a chunk instead of OFFLOAD_CHUNK, so that the CPU
// tests' small models run the pipeline over many chunks (tests/test_data_parallel.c).
static size_t offload_chunk_elems(void) {
    const char *v = t5_env_get(T5_ENV_OFFLOAD_CHUNK);
    if (!v || !*v) return OFFLOAD_CHUNK;
    char *end = NULL;
    long long k = strtoll(v, &end, 10);
    if (*end || k < 1) t5_fail("T5_OFFLOAD_CHUNK=\"%s\": expected a positive number of elements (a test hook)", v);
    return (size_t)k;
}

void offload_init(ZeroOffload *o, AdamW *opt, const Backend *be, AdamWConfig cfg, size_t begin, size_t end,
                  const float *master_init, int init_on_host, int pinned, const char *nvme_dir, const NvmeAio *aio,
                  int rank) {
    memset(o, 0, sizeof *o);
    size_t n = end - begin, e = be->act_dtype == DTYPE_F32 ? 4 : 2, chunk = offload_chunk_elems();
    o->pinned = pinned;
    o->on_nvme = nvme_dir && nvme_dir[0];
    const size_t align = NVME_ALIGN / sizeof(float);  // NVMe chunks start at aligned elements
    if (o->on_nvme) chunk = (chunk + align - 1) / align * align;
    o->chunk = n < chunk ? (n ? n : 1) : chunk;
    memset(opt, 0, sizeof *opt);
    opt->cfg = cfg;
    opt->begin = begin;
    opt->end = end;
    if (o->on_nvme) {  // the state in a file; one chunk of it at a time in host memory
        nvme_open(&o->nvme, nvme_dir, rank, n, aio);
        for (int s = 0; s < 3; s++)
            for (int a = 0; a < NVME_ARRAYS; a++) o->chunk_state[s][a] = nvme_buffer(o->chunk);
        float *buf = o->chunk_state[0][NVME_MASTER];
        for (size_t off = 0; off < n; off += o->chunk) {  // the master goes in; the moments start at zero
            size_t k = n - off < o->chunk ? n - off : o->chunk;
            if (init_on_host) memcpy(buf, master_init + off, k * sizeof(float));
            else be->to_host(buf, master_init + off, k * sizeof(float));
            nvme_write(&o->nvme, NVME_MASTER, off, k, buf);
        }
        nvme_queue_start(&o->reader, &o->nvme);
        nvme_queue_start(&o->writer, &o->nvme);
        o->nvme_bytes = 3 * n * sizeof(float);
    } else {
        o->master = be->host_alloc(n * sizeof(float), pinned);
        // master_init NULL: the caller fills o->master (zero/zero.c: a random init made in place)
        if (master_init && init_on_host) memcpy(o->master, master_init, n * sizeof(float));
        else if (master_init) be->to_host(o->master, master_init, n * sizeof(float));
        opt->m = be->host_alloc(n * sizeof(float), pinned);
        opt->v = be->host_alloc(n * sizeof(float), pinned);
        o->host_bytes = 3 * n * sizeof(float);
    }
    for (int k = 0; k < 2; k++) {  // page-locked whatever pin_memory says: the copies must overlap
        o->stage_grad[k] = be->host_alloc(o->chunk * e, 1);
        o->stage_param[k] = be->host_alloc(o->chunk * e, 1);
    }
    o->stage_bytes = o->chunk * 4 * e;
}

void offload_free(ZeroOffload *o, AdamW *opt, const Backend *be) {
    if (o->on_nvme) {
        nvme_queue_stop(&o->reader);
        nvme_queue_stop(&o->writer);
        nvme_close(&o->nvme);
        for (int s = 0; s < 3; s++)
            for (int a = 0; a < NVME_ARRAYS; a++) nvme_buffer_free(o->chunk_state[s][a]);
    } else {
        be->host_free(o->master, o->pinned);
        be->host_free(opt->m, o->pinned);
        be->host_free(opt->v, o->pinned);
    }
    for (int k = 0; k < 2; k++) {
        be->host_free(o->stage_grad[k], 1);
        be->host_free(o->stage_param[k], 1);
    }
    memset(o, 0, sizeof *o);
    opt->m = opt->v = NULL;
}

// The chunk [lo_c, hi_c) tensor by tensor (each its own weight decay), clipped to the chunk;
// the tensors tile the flat space, so every element of the chunk is written. A frozen
// tensor's weights are only copied (the compute weights stay the master's); the others go
// to cpu_adam_update_slices in one parallel pass (widen the gradient, AdamW on master and
// moments, narrow the new master into the staging buffer: kernels/cpu/adamw_math.h's exact
// step, optim/cpu_adam.c). state[3]: master, exp_avg, exp_avg_sq, element 0 of each at
// flat index state_begin (the partition's in host memory, or the chunk's buffers with NVMe).
// slices: room for lay->count.
static void update_chunk(AdamW *opt, const ParamLayout *lay, Dtype t, size_t lo_c, size_t hi_c, float lr,
                         float grad_scale, const void *stage_grad, void *stage_param, float *const state[3],
                         size_t state_begin, CpuAdamSlice *slices) {
    const size_t e = t == DTYPE_F32 ? 4 : 2;
    int count = 0;
    for (int i = 0; i < lay->count; i++) {
        const ParamSpec *p = &lay->specs[i];
        size_t lo = p->offset > lo_c ? p->offset : lo_c;
        size_t hi = p->offset + p->numel < hi_c ? p->offset + p->numel : hi_c;
        if (lo >= hi) continue;
        const size_t n = hi - lo, j0 = lo - state_begin, s0 = lo - lo_c;  // state / chunk positions
        float *master = state[0] + j0;
        if (p->frozen) {
            if (t == DTYPE_F32) memcpy((float *)stage_param + s0, master, n * sizeof(float));
            else half_from_f32_array((uint16_t *)stage_param + s0, master, n, t == DTYPE_BF16);
            continue;
        }
        float wd = p->no_decay ? 0.0f : opt->cfg.weight_decay;
        slices[count++] = (CpuAdamSlice){
            .master = master, .m = state[1] + j0, .v = state[2] + j0, .g = (const char *)stage_grad + s0 * e,
            .out = (char *)stage_param + s0 * e, .n = n,
            .c = adamw_consts(lr, opt->cfg.beta1, opt->cfg.beta2, opt->cfg.eps, wd, grad_scale, opt->step)};
    }
    cpu_adam_update_slices(slices, count, t, t, CPU_ADAM_AUTO);
}

// copy_wait / NVMe waits, timed into *acc
#define TIMED(acc, stmt)                     \
    do {                                     \
        double t0_ = clock_seconds();        \
        stmt;                                \
        (acc) += clock_seconds() - t0_;      \
    } while (0)

void offload_adamw_step(ZeroOffload *o, AdamW *opt, const Backend *be, const ParamLayout *lay, const void *grads,
                        int grads_on_host, void *params, int params_on_host, float lr, float grad_scale,
                        OffloadProgress progress, void *progress_ctx) {
    opt->step++;
    OffloadTimes *tm = &o->times;
    tm->steps++;
    tm->threads = omp_get_max_threads();
    CpuAdamSlice *slices = mallocCheck(((size_t)lay->count + 1) * sizeof(CpuAdamSlice));
    const Dtype t = be->act_dtype;
    const size_t e = t == DTYPE_F32 ? 4 : 2, n = opt->end - opt->begin;
    const size_t chunks = (n + o->chunk - 1) / o->chunk;
#define CHUNK_OFF(k) ((size_t)(k) * o->chunk)
#define CHUNK_LEN(k) (n - CHUNK_OFF(k) < o->chunk ? n - CHUNK_OFF(k) : o->chunk)
    // gradients already in host memory (streamed there during backward): read in place
    if (chunks && !grads_on_host) be->to_host_async(o->stage_grad[0], grads, CHUNK_LEN(0) * e, SLOT_GRAD);
    // NVMe: reads run one chunk ahead and writes one behind on their I/O threads (set k % 3 is
    // chunk k's); the tickets say when a set's last read arrived / last write left
    long read_done[3] = {0, 0, 0}, write_done[3] = {0, 0, 0};
    if (o->on_nvme && chunks)
        for (int a = 0; a < NVME_ARRAYS; a++)
            read_done[0] = nvme_queue_submit(&o->reader, 0, a, 0, CHUNK_LEN(0), o->chunk_state[0][a]);
    for (size_t k = 0; k < chunks; k++) {
        const int b = (int)(k % 2);
        // the next gradient comes down while this chunk is updated (its buffer's last reader,
        // the update of chunk k-1, has returned)
        if (k + 1 < chunks && !grads_on_host)
            be->to_host_async(o->stage_grad[1 - b], (const char *)grads + CHUNK_OFF(k + 1) * e, CHUNK_LEN(k + 1) * e,
                              SLOT_GRAD + 1 - b);
        if (!grads_on_host) TIMED(tm->grad_wait_s, be->copy_wait(SLOT_GRAD + b));  // this chunk's gradient is here
        const void *grad_k = grads_on_host ? (const char *)grads + CHUNK_OFF(k) * e : o->stage_grad[b];
        TIMED(tm->param_wait_s, be->copy_wait(SLOT_PARAM + b));  // chunk k-2's weights have left this staging buffer
        if (progress && k >= 2) progress(progress_ctx, CHUNK_OFF(k - 1));  // ... and landed
        size_t lo_c = opt->begin + CHUNK_OFF(k), hi_c = lo_c + CHUNK_LEN(k);  // the chunk in the flat space
        float *host_state[3] = {o->master, opt->m, opt->v};
        const int set = (int)(k % 3), next = (int)((k + 1) % 3);
        float *const *state = o->on_nvme ? o->chunk_state[set] : host_state;
        const size_t state_begin = o->on_nvme ? lo_c : opt->begin;
        if (o->on_nvme) {
            TIMED(tm->nvme_wait_s, nvme_queue_wait(&o->reader, read_done[set]));  // this chunk's master and moments are in
            if (k + 1 < chunks) {  // the next chunk's come in once its set's last write (chunk k-2) has left
                TIMED(tm->nvme_wait_s, nvme_queue_wait(&o->writer, write_done[next]));
                for (int a = 0; a < NVME_ARRAYS; a++)
                    read_done[next] = nvme_queue_submit(&o->reader, 0, a, CHUNK_OFF(k + 1), CHUNK_LEN(k + 1),
                                                        o->chunk_state[next][a]);
            }
        }
        TIMED(tm->adam_s, update_chunk(opt, lay, t, lo_c, hi_c, lr, grad_scale, grad_k, o->stage_param[b], state,
                                       state_begin, slices));
        if (o->on_nvme)  // and go back out, behind the next chunk's update
            for (int a = 0; a < NVME_ARRAYS; a++)
                write_done[set] = nvme_queue_submit(&o->writer, 1, a, CHUNK_OFF(k), CHUNK_LEN(k), o->chunk_state[set][a]);
        if (params_on_host)  // offload_param: the compute weights live in host memory too
            memcpy((char *)params + CHUNK_OFF(k) * e, o->stage_param[b], CHUNK_LEN(k) * e);
        else
            be->to_device_async((char *)params + CHUNK_OFF(k) * e, o->stage_param[b], CHUNK_LEN(k) * e, SLOT_PARAM + b);
    }
#undef CHUNK_OFF
#undef CHUNK_LEN
    // the new weights are all up before anything reads them (backend.h: later ops do not wait),
    // and the state is all back in its file (checkpoints read it)
    TIMED(tm->param_wait_s, (be->copy_wait(SLOT_PARAM), be->copy_wait(SLOT_PARAM + 1)));
    if (o->on_nvme)
        for (int s = 0; s < 3; s++) TIMED(tm->nvme_wait_s, nvme_queue_wait(&o->writer, write_done[s]));
    free(slices);
}
