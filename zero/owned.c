// zero/owned.c: the update and the host copies of a rank's owned range, through the record
// zero_init filled (owned.h).
#include "owned.h"

#include <string.h>

#include "../common/check.h"

// The gradient at the owned range's first element, and its element size (fp32, or bf16/fp16).
static const void *owned_grads(const ZeroOwned *w, size_t *e) {
    *e = w->grads.dtype == DTYPE_F32 ? 4 : 2;
    return (const char *)w->grads.ptr + (w->range.begin - w->grad_range.begin) * *e;
}

void zero_owned_update(const ZeroOwned *w, AdamW *opt, ZeroOffload *off, const Backend *be, const ParamLayout *lay,
                       float lr, float grad_scale, OffloadProgress progress, void *progress_ctx) {
    size_t e;
    const void *g = owned_grads(w, &e);
    if (w->master.place == OWNED_HOST || w->master.place == OWNED_NVME) {  // the CPU updates; the weights go up
        if (!off) t5_die(__FILE__, __LINE__, "zero_owned_update: a host master without offload buffers",
                         "a bug in zero_init's record: report it");
        offload_adamw_step(off, opt, be, lay, g, w->grads.place == OWNED_HOST, w->params.ptr,
                           w->params.place == OWNED_HOST, lr, grad_scale, progress, progress_ctx);
    } else {
        adamw_step(opt, be, lay, (float *)w->master.ptr, w->params.ptr, g, e, lr, grad_scale);
    }
}

void zero_owned_update_range(const ZeroOwned *w, const AdamW *opt, const Backend *be, const ParamLayout *lay, float lr,
                             float grad_scale, size_t from, size_t to) {
    if (w->master.place != OWNED_DEVICE)
        t5_die(__FILE__, __LINE__, "zero_owned_update_range: the master weights are not on the device",
               "a bug in zero_update_side_overlaps: report it");
    size_t e;
    const void *g = owned_grads(w, &e);
    adamw_step_range(opt, be, lay, (float *)w->master.ptr, w->params.ptr, g, e, lr, grad_scale, from, to);
}

// NVMe: [from, from+n) through an aligned bounce buffer, a block at a time; a write reads
// the block first so that elements outside the range keep their values.
#define NVME_BLOCK ((size_t)1 << 20)  // floats per bounce block (a multiple of the alignment)
static void nvme_range(const OwnedBuf *b, size_t from, size_t n, float *host, int write) {
    const NvmeStore *s = b->ptr;
    const size_t align = NVME_ALIGN / sizeof(float);
    float *buf = nvme_buffer(NVME_BLOCK);
    size_t pos = from;
    while (pos < from + n) {
        size_t start = pos / align * align, len = s->n - start < NVME_BLOCK ? s->n - start : NVME_BLOCK;
        size_t take = from + n - pos < start + len - pos ? from + n - pos : start + len - pos;
        nvme_read(s, b->nvme_array, start, len, buf);
        if (write) {
            memcpy(buf + (pos - start), host + (pos - from), take * sizeof(float));
            nvme_write(s, b->nvme_array, start, len, buf);
        } else {
            memcpy(host + (pos - from), buf + (pos - start), take * sizeof(float));
        }
        pos += take;
    }
    nvme_buffer_free(buf);
}

void zero_owned_f32_to_host(const OwnedBuf *b, const Backend *be, size_t from, size_t n, float *dst) {
    if (b->place == OWNED_NVME) return nvme_range(b, from, n, dst, 0);
    const float *src = (const float *)b->ptr + from;
    if (b->place == OWNED_HOST) memcpy(dst, src, n * sizeof(float));
    else be->to_host(dst, src, n * sizeof(float));
}

void zero_owned_f32_from_host(const OwnedBuf *b, const Backend *be, size_t from, size_t n, const float *src) {
    if (b->place == OWNED_NVME) return nvme_range(b, from, n, (float *)src, 1);
    float *dst = (float *)b->ptr + from;
    if (b->place == OWNED_HOST) memcpy(dst, src, n * sizeof(float));
    else be->to_device(dst, src, n * sizeof(float));
}
