// data/collate.c: examples -> a padded T5Batch (see collate.h).
#include "collate.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

// Truncated length: HF's tokenizer(truncation=True, max_length=M) keeps M-1 pieces
// and then </s>, so a sequence never loses its end marker.
static int trunc_len(int len, int max_len) { return len > max_len ? max_len : len; }

static void copy_truncated(int *dst, const int32_t *src, int len, int max_len, int eos_id) {
    if (len <= max_len) {
        for (int i = 0; i < len; i++) dst[i] = src[i];
        return;
    }
    for (int i = 0; i < max_len - 1; i++) dst[i] = src[i];
    dst[max_len - 1] = eos_id;
}

static void grow(int **p, size_t n) {
    free(*p);
    *p = mallocCheck(n * sizeof(int));
}

void collate_batch(Collated *c, const Dataset *ds, const uint64_t *idx, int B, int max_source_length,
                   int max_target_length, int eos_id, int pad_id, int decoder_start_id) {
    if (B < 1) t5_fail("collate: batch of %d examples; it must hold at least 1", B);
    if (max_source_length < 1 || max_target_length < 1)
        t5_fail("--max_source_length %d / --max_target_length %d: both must be at least 1", max_source_length,
                max_target_length);
    int S = 0, T = 0;
    for (int b = 0; b < B; b++) {
        if (idx[b] >= ds->count)
            t5_fail("collate: example %llu is past the end of %s (%llu examples)", (unsigned long long)idx[b],
                    ds->path ? ds->path : "the dataset", (unsigned long long)ds->count);
        const int32_t *src, *tgt;
        int ls, lt;
        dataset_example(ds, idx[b], &src, &ls, &tgt, &lt);
        if (trunc_len(ls, max_source_length) > S) S = trunc_len(ls, max_source_length);
        if (trunc_len(lt, max_target_length) > T) T = trunc_len(lt, max_target_length);
    }
    // Capacity is kept per dimension, so the arrays hold capB*capS and capB*capT ints.
    int cb = B > c->capB ? B : c->capB, cs = S > c->capS ? S : c->capS, ct = T > c->capT ? T : c->capT;
    if (cb != c->capB || cs != c->capS) {
        grow(&c->input_ids, (size_t)cb * cs);
        grow(&c->attention_mask, (size_t)cb * cs);
    }
    if (cb != c->capB || ct != c->capT) {
        grow(&c->labels, (size_t)cb * ct);
        grow(&c->decoder_input_ids, (size_t)cb * ct);
    }
    c->capB = cb;
    c->capS = cs;
    c->capT = ct;
    for (int b = 0; b < B; b++) {
        const int32_t *src, *tgt;
        int ls, lt;
        dataset_example(ds, idx[b], &src, &ls, &tgt, &lt);
        int *in = c->input_ids + (size_t)b * S, *mask = c->attention_mask + (size_t)b * S;
        int *lab = c->labels + (size_t)b * T;
        int ns = trunc_len(ls, max_source_length), nt = trunc_len(lt, max_target_length);
        copy_truncated(in, src, ls, max_source_length, eos_id);
        for (int i = 0; i < S; i++) mask[i] = i < ns;
        for (int i = ns; i < S; i++) in[i] = pad_id;
        copy_truncated(lab, tgt, lt, max_target_length, eos_id);
        for (int i = nt; i < T; i++) lab[i] = -100;
    }
    t5_shift_right(c->labels, c->decoder_input_ids, B, T, decoder_start_id, pad_id);
    c->batch = (T5Batch){.B = B, .S = S, .T = T, .input_ids = c->input_ids, .attention_mask = c->attention_mask,
                         .decoder_input_ids = c->decoder_input_ids, .labels = c->labels};
}

void collate_free(Collated *c) {
    free(c->input_ids);
    free(c->attention_mask);
    free(c->labels);
    free(c->decoder_input_ids);
    memset(c, 0, sizeof *c);
}

long collate_source_count(const Dataset *ds, const uint64_t *idx, long n, int max_source_length, int padded) {
    long total = 0, longest = 0;
    for (long i = 0; i < n; i++) {
        const int32_t *src, *tgt;
        int ls, lt;
        dataset_example(ds, idx[i], &src, &ls, &tgt, &lt);
        long l = trunc_len(ls, max_source_length);
        total += l;
        if (l > longest) longest = l;
    }
    return padded ? n * longest : total;
}

long collate_label_count(const Dataset *ds, const uint64_t *idx, long n, int max_target_length) {
    long total = 0;
    for (long i = 0; i < n; i++) {
        const int32_t *src, *tgt;
        int ls, lt;
        dataset_example(ds, idx[i], &src, &ls, &tgt, &lt);
        total += trunc_len(lt, max_target_length);
    }
    return total;
}
