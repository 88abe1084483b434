// kernels/cpu/attention_decode.c: attention of one query per row over cached keys and
// values (backend.h attention_decode), the fp32 reference of generation's decoder step.
//   q (N, H*dk); row i's key/value j read through a KvView (backend.h): slot p from the
//   beam table or i / slot_div, element (p * slot_stride + j * pos_stride) * H*dk
//   scores s_j = q . k_j + bias[h, j]; P = softmax over the unmasked keys; out = P @ v
//   (kv->pos set: keys j <= t = *pos, bias[h, Tk - 1 - t + j], by distance; backend.h)
// The arithmetic is cpu_attention_forward's with Tq = 1 (attention.c), operation for
// operation (the same cpu_attention_softmax_row), so a cached step gives the bits of the
// dense forward's last position.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/check.h"
#include "cpu_ops.h"

// Element offset of (row i, position j) in kv->k / kv->v, in units of one head row (H*dk).
static inline size_t decode_kv_row(const KvView *kv, int i, int j) {
    const long p = kv->table ? kv->table[(size_t)i * kv->table_ld + j] : i / kv->slot_div;
    return (size_t)(p * kv->slot_stride + (long)j * kv->pos_stride);
}

void cpu_attention_decode(void *out_, const void *q_, const KvView *kv, const void *bias_, int N, int Tk, int H,
                          int dk) {
    if (N < 1 || Tk < 1 || H < 1 || dk < 1 || kv->slot_div < 1)
        t5_fail("attention_decode: N %d, Tk %d, H %d, dk %d, slot_div %d must all be >= 1", N, Tk, H, dk, kv->slot_div);
    // pos: position t from memory, keys 0..t, the (H, Tk) bias by distance (backend.h)
    const int t = kv->pos ? *kv->pos : -1, len = kv->pos ? t + 1 : Tk;
    if (kv->pos && (t < 0 || t >= Tk)) t5_fail("attention_decode: position %d outside the capacity %d", t, Tk);
    const size_t bias_t = kv->pos ? (size_t)(Tk - 1 - t) : 0;
    if (kv->table && kv->table_ld < Tk)
        t5_fail("attention_decode: beam table rows of %d positions, %d keys", kv->table_ld, Tk);
    if (kv->key_mask && kv->mask_ld < Tk)
        t5_fail("attention_decode: key mask rows of %d positions, %d keys", kv->mask_ld, Tk);
    float *out = out_;
    const float *q = q_, *k = kv->k, *v = kv->v, *bias = bias_;
    const size_t HD = (size_t)H * dk;
    float *scratch = mallocCheck((size_t)N * H * len * sizeof(float));
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++) {
            const float *qi = q + (size_t)i * HD + (size_t)h * dk;
            const float *brow = bias ? bias + (size_t)h * Tk + bias_t : NULL;
            const int *mrow = kv->key_mask ? kv->key_mask + (size_t)(i / kv->slot_div) * kv->mask_ld : NULL;
            float *p = scratch + ((size_t)i * H + h) * len;
            float *o = out + (size_t)i * HD + (size_t)h * dk;
            for (int j = 0; j < len; j++) {
                if (mrow && mrow[j] == 0) {
                    p[j] = -INFINITY;  // probability exactly 0
                    continue;
                }
                const float *kj = k + decode_kv_row(kv, i, j) * HD + (size_t)h * dk;
                p[j] = cpu_attention_score(qi, kj, dk, brow ? brow + j : NULL);
            }
            for (int d = 0; d < dk; d++) o[d] = 0.0f;
            if (!cpu_attention_softmax_row(p, len)) continue;
            for (int j = 0; j < len; j++) {
                const float *vj = v + decode_kv_row(kv, i, j) * HD + (size_t)h * dk;
                for (int d = 0; d < dk; d++) o[d] += p[j] * vj[d];
            }
        }
    free(scratch);
}

void cpu_attention_kv_append(void *k_cache, void *v_cache, const void *k_new, const void *v_new, const int *pos,
                             size_t slot_bytes) {
    memcpy((char *)k_cache + (size_t)*pos * slot_bytes, k_new, slot_bytes);
    memcpy((char *)v_cache + (size_t)*pos * slot_bytes, v_new, slot_bytes);
}

void cpu_attention_qkv_append(void *q_out, void *k_cache, void *v_cache, const void *qkv, const int *pos, size_t rows,
                              size_t part_bytes) {
    const size_t slot = (size_t)*pos * rows * part_bytes;
    for (size_t r = 0; r < rows; r++) {
        const char *src = (const char *)qkv + r * 3 * part_bytes;
        memcpy((char *)q_out + r * part_bytes, src, part_bytes);
        memcpy((char *)k_cache + slot + r * part_bytes, src + part_bytes, part_bytes);
        memcpy((char *)v_cache + slot + r * part_bytes, src + 2 * part_bytes, part_bytes);
    }
}
