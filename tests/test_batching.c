// tests/test_batching.c: batches made from a dataset, without a GPU: collation (truncation
// keeps </s>, padding, labels -100, decoder inputs) and the three samplers (random,
// sequential, sortish: permutations, seeds, epochs, ranks). The text readers, .t5ds files
// and `train_t5 prepare` are tests/test_data.c's.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../data/collate.h"
#include "../data/dataset.h"
#include "../data/sampler.h"
#include "../data/spm.h"
#include "../data/text_reader.h"
#include "test.h"
#include "test_tmp.h"
#include "test_t5ds.h"

static char g_tmp[256];

static char *tmp_path(const char *name) { return path_join(g_tmp, name); }

// rt.t5ds: data/sample's whole train split (3009 examples) with the task prefix, as
// tests/test_data.c's round trip leaves it (the collation of real examples reads it).
static void prepare_real_split(void) {
    char *out = tmp_path("rt.t5ds");
    Spm *spm = spm_load("data/sample/spiece.model");
    TextSpec spec = {.format = TEXT_PAIRS, .source_path = "data/sample/train.source",
                     .target_path = "data/sample/train.target",
                     .source_prefix = "translate English to Romanian: ", .max_examples = -1};
    dataset_prepare(&spec, spm, out);
    spm_free(spm);
    free(out);
}

// ---- collate ----------------------------------------------------------------------------

static int same(const int *got, const int *want, int n) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static void test_collate(void) {
    static const int32_t s0[] = {5, 6, 7, 1}, t0[] = {8, 1}, s1[] = {9, 1}, t1[] = {10, 11, 12, 13, 14, 1},
                         s2[] = {20, 21, 22, 23, 24, 25, 1}, t2[] = {30, 1};
    const int32_t *seqs[] = {s0, t0, s1, t1, s2, t2};
    int lens[] = {4, 2, 2, 6, 7, 2};
    char *p = tmp_path("hand.t5ds");
    write_t5ds(p, 100, 3, seqs, lens, 1);
    Dataset ds;
    dataset_open(&ds, p);
    test_check(ds.count == 3 && ds.vocab_size == 100, "hand-made .t5ds (written from docs/DATASET.md) opens");
    Collated c = {0};

    uint64_t i01[] = {0, 1};
    collate_batch(&c, &ds, i01, 2, 10, 10, 1, 0, 0);
    const T5Batch *b = &c.batch;
    static const int in1[] = {5, 6, 7, 1, 9, 1, 0, 0}, m1[] = {1, 1, 1, 1, 1, 1, 0, 0},
                     l1[] = {8, 1, -100, -100, -100, -100, 10, 11, 12, 13, 14, 1},
                     d1[] = {0, 8, 1, 0, 0, 0, 0, 10, 11, 12, 13, 14};
    test_check(b->B == 2 && b->S == 4 && b->T == 6, "collate [0,1]: B 2, S 4, T 6 (longest in the batch)");
    test_check(same(b->input_ids, in1, 8) && same(b->attention_mask, m1, 8), "collate [0,1]: input_ids pad 0, attention_mask");
    test_check(same(b->labels, l1, 12) && same(b->decoder_input_ids, d1, 12),
               "collate [0,1]: labels -100 padded, decoder_input_ids shifted (start 0, -100 -> 0)");

    uint64_t i20[] = {2, 0};
    collate_batch(&c, &ds, i20, 2, 5, 3, 1, 0, 0);
    static const int in2[] = {20, 21, 22, 23, 1, 5, 6, 7, 1, 0}, m2[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
                     l2[] = {30, 1, 8, 1}, d2[] = {0, 30, 0, 8};
    test_check(b->S == 5 && same(b->input_ids, in2, 10) && same(b->attention_mask, m2, 10),
               "collate [2,0] max_source 5: [20 21 22 23 24 25 1] -> [20 21 22 23 1]");
    test_check(b->T == 2 && same(b->labels, l2, 4) && same(b->decoder_input_ids, d2, 4), "collate [2,0] max_target 3: targets fit");

    uint64_t i1[] = {1};
    collate_batch(&c, &ds, i1, 1, 1, 4, 1, 0, 0);
    static const int in3[] = {1}, l3[] = {10, 11, 12, 1}, d3[] = {0, 10, 11, 12};
    test_check(b->S == 1 && same(b->input_ids, in3, 1) && b->T == 4 && same(b->labels, l3, 4) &&
                   same(b->decoder_input_ids, d3, 4),
               "collate max 1 / 4: source [1], target [10 11 12 1] (the last kept token is </s>)");

    uint64_t all[] = {0, 1, 2, 2, 1, 0};
    collate_batch(&c, &ds, all, 6, 128, 128, 1, 0, 0);
    test_check(b->B == 6 && b->S == 7 && b->T == 6 && b->input_ids[2 * 7 + 6] == 1 && b->labels[5 * 6 + 1] == 1 &&
                   b->labels[5 * 6 + 2] == -100,
               "collate grows its buffers (B 1 -> 6) and stays exact");
    collate_free(&c);
    dataset_close(&ds);
    free(p);

    // The real train split at max length 32: rows match the untruncated tokens' first 31 then 1.
    char *rp = tmp_path("rt.t5ds");
    dataset_open(&ds, rp);
    uint64_t idx[64];
    for (int k = 0; k < 64; k++) idx[k] = (uint64_t)(k * 37);
    Collated d = {0};
    collate_batch(&d, &ds, idx, 64, 32, 24, 1, 0, 0);
    int bad = 0, truncated = 0;
    for (int k = 0; k < 64; k++) {
        const int32_t *src, *tgt;
        int ls, lt;
        dataset_example(&ds, idx[k], &src, &ls, &tgt, &lt);
        int ns = ls < 32 ? ls : 32, nt = lt < 24 ? lt : 24;
        truncated += ls > 32;
        const int *row = d.batch.input_ids + k * d.batch.S, *lab = d.batch.labels + k * d.batch.T;
        for (int j = 0; j < ns - 1; j++) bad += row[j] != src[j];
        bad += row[ns - 1] != 1;
        for (int j = ns; j < d.batch.S; j++) bad += row[j] != 0 || d.batch.attention_mask[k * d.batch.S + j] != 0;
        for (int j = 0; j < nt - 1; j++) bad += lab[j] != tgt[j];
        bad += lab[nt - 1] != 1;
        for (int j = nt; j < d.batch.T; j++) bad += lab[j] != -100;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "collate 64 real examples at 32/24 (%d sources truncated): %d wrong entries", truncated, bad);
    test_check(bad == 0 && truncated > 0 && d.batch.S == 32 && d.batch.T == 24, msg);
    collate_free(&d);
    dataset_close(&ds);
    free(rp);
}

// ---- samplers -----------------------------------------------------------------------------

static int is_perm(const uint64_t *o, uint64_t n) {
    char *seen = calloc(n ? n : 1, 1);
    int ok = 1;
    for (uint64_t i = 0; i < n; i++) {
        if (o[i] >= n || seen[o[i]]) ok = 0;
        else seen[o[i]] = 1;
    }
    free(seen);
    return ok;
}

static uint64_t src_len(const Dataset *ds, uint64_t i) { return ds->offsets[2 * i + 1] - ds->offsets[2 * i]; }

// A dataset of n examples with pseudo-random source lengths 1..maxlen.
static void make_len_dataset(const char *path, int n, int maxlen) {
    const int32_t **seqs = malloc(sizeof(int32_t *) * 2 * (size_t)n);
    int *lens = malloc(sizeof(int) * 2 * (size_t)n);
    static int32_t ones[4096];
    for (int i = 0; i < 4096; i++) ones[i] = 1;
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        seqs[2 * i] = ones;
        lens[2 * i] = 1 + (int)((x >> 8) % (uint32_t)maxlen);
        seqs[2 * i + 1] = ones;
        lens[2 * i + 1] = 1;
    }
    write_t5ds(path, 32100, n, seqs, lens, 1);
    free(seqs);
    free(lens);
}

// Batch k of an order whose batches are all bs long except one short one (n % bs),
// which the batch shuffle may have put anywhere: starts[] for the short batch at `shortb`.
static int segment(uint64_t n, int bs, uint64_t shortb, uint64_t *starts) {
    uint64_t nb = (n + (uint64_t)bs - 1) / (uint64_t)bs, r = n % (uint64_t)bs, pos = 0;
    for (uint64_t k = 0; k < nb; k++) {
        starts[k] = pos;
        pos += r && k == shortb ? r : (uint64_t)bs;
    }
    starts[nb] = n;
    return (int)nb;
}

static int batches_descending(const Dataset *ds, const uint64_t *o, const uint64_t *starts, int nb) {
    for (int k = 0; k < nb; k++)
        for (uint64_t i = starts[k] + 1; i < starts[k + 1]; i++)
            if (src_len(ds, o[i]) > src_len(ds, o[i - 1])) return 0;
    return 1;
}

// For the one-chunk case (n <= 50*bs): the batches are consecutive slices of one sorted
// list, so the length ranges of any two batches do not interleave.
static int batches_disjoint(const Dataset *ds, const uint64_t *o, const uint64_t *starts, int nb) {
    for (int s = 0; s < nb; s++)
        for (int t = s + 1; t < nb; t++) {
            uint64_t smax = src_len(ds, o[starts[s]]), smin = src_len(ds, o[starts[s + 1] - 1]);
            uint64_t tmax = src_len(ds, o[starts[t]]), tmin = src_len(ds, o[starts[t + 1] - 1]);
            if (!(smin >= tmax || tmin >= smax)) return 0;
        }
    return 1;
}

static void check_sortish(const Dataset *ds, int bs, const char *label) {
    uint64_t n = ds->count, nb = (n + (uint64_t)bs - 1) / (uint64_t)bs;
    uint64_t *a = malloc(n * 8), *b = malloc(n * 8), *c = malloc(n * 8), *starts = malloc((nb + 1) * 8);
    sampler_epoch_order(SAMPLER_SORTISH, ds, 42, 0, bs, a);
    sampler_epoch_order(SAMPLER_SORTISH, ds, 42, 0, bs, b);
    sampler_epoch_order(SAMPLER_SORTISH, ds, 42, 1, bs, c);
    uint64_t maxlen = 0;
    for (uint64_t i = 0; i < n; i++)
        if (src_len(ds, i) > maxlen) maxlen = src_len(ds, i);
    int one_chunk = n <= 50 * (uint64_t)bs;
    // Find where the short batch went: a segmentation under which every batch descends
    // (and, for one chunk, batch ranges do not interleave).
    int desc = 0, disjoint = 0, shuffled = 0;
    for (uint64_t k = 0; k < nb && !(desc && (disjoint || !one_chunk)); k++) {
        segment(n, bs, k, starts);
        desc = batches_descending(ds, a, starts, (int)nb);
        disjoint = desc && one_chunk && batches_disjoint(ds, a, starts, (int)nb);
    }
    if (disjoint) {  // ...and the batches after the first are shuffled, not left in order
        shuffled = nb < 4;
        for (uint64_t s = 2; s < nb; s++) shuffled |= src_len(ds, a[starts[s]]) > src_len(ds, a[starts[s - 1]]);
    }
    char msg[256];
    snprintf(msg, sizeof msg, "sortish %s: a permutation, deterministic, differs across epochs", label);
    test_check(is_perm(a, n) && !memcmp(a, b, n * 8) && memcmp(a, c, n * 8), msg);
    snprintf(msg, sizeof msg, "sortish %s: the first batch starts with the longest source (%llu tokens)", label,
             (unsigned long long)maxlen);
    test_check(src_len(ds, a[0]) == maxlen, msg);
    snprintf(msg, sizeof msg, "sortish %s: every batch of %d is in descending source length", label, bs);
    test_check(desc, msg);
    if (one_chunk) {
        snprintf(msg, sizeof msg, "sortish %s: one chunk sorted descending, cut into batches, batches shuffled", label);
        test_check(disjoint && shuffled, msg);
    }
    free(a);
    free(b);
    free(c);
    free(starts);
}

static void test_samplers(void) {
    char *p = tmp_path("lens.t5ds");
    make_len_dataset(p, 1037, 200);
    Dataset ds;
    dataset_open(&ds, p);
    uint64_t n = ds.count;
    uint64_t *a = malloc(n * 8), *b = malloc(n * 8), *c = malloc(n * 8), *d = malloc(n * 8);
    sampler_epoch_order(SAMPLER_SEQUENTIAL, &ds, 7, 3, 8, a);
    int seq = 1;
    for (uint64_t i = 0; i < n; i++) seq &= a[i] == i;
    test_check(seq, "sequential: 0, 1, 2, ...");
    sampler_epoch_order(SAMPLER_RANDOM, &ds, 7, 0, 8, a);
    sampler_epoch_order(SAMPLER_RANDOM, &ds, 7, 0, 8, b);
    sampler_epoch_order(SAMPLER_RANDOM, &ds, 7, 1, 8, c);
    sampler_epoch_order(SAMPLER_RANDOM, &ds, 8, 0, 8, d);
    uint64_t fixed = 0;
    for (uint64_t i = 0; i < n; i++) fixed += a[i] == i;
    test_check(is_perm(a, n) && is_perm(c, n), "random: a permutation of 0..n-1");
    test_check(!memcmp(a, b, n * 8), "random: the same (seed, epoch) gives the same order");
    test_check(memcmp(a, c, n * 8) && memcmp(a, d, n * 8), "random: another epoch or seed gives another order");
    char msg[128];
    snprintf(msg, sizeof msg, "random: shuffled (%llu of %llu in place)", (unsigned long long)fixed, (unsigned long long)n);
    test_check(fixed < 10, msg);
    free(a);
    free(b);
    free(c);
    free(d);

    check_sortish(&ds, 8, "n 1037 bs 8 (3 chunks)");
    check_sortish(&ds, 32, "n 1037 bs 32 (1 chunk)");
    check_sortish(&ds, 2000, "n 1037 bs 2000 (1 batch)");
    dataset_close(&ds);

    // Ties keep the permutation's order and the sampler still works with all lengths equal.
    make_len_dataset(p, 100, 1);
    dataset_open(&ds, p);
    a = malloc(100 * 8);
    sampler_epoch_order(SAMPLER_SORTISH, &ds, 1, 0, 7, a);
    test_check(is_perm(a, 100), "sortish with all lengths equal: a permutation");
    free(a);
    dataset_close(&ds);

    // Uniformity: where example 0 lands over 5000 epochs of a 10-example dataset.
    make_len_dataset(p, 10, 5);
    dataset_open(&ds, p);
    int hist[10] = {0};
    uint64_t o[10];
    for (int e = 0; e < 5000; e++) {
        sampler_epoch_order(SAMPLER_RANDOM, &ds, 3, e, 1, o);
        for (int i = 0; i < 10; i++)
            if (o[i] == 0) hist[i]++;
    }
    int lo = 5000, hi = 0;
    for (int i = 0; i < 10; i++) {
        if (hist[i] < lo) lo = hist[i];
        if (hist[i] > hi) hi = hist[i];
    }
    snprintf(msg, sizeof msg, "random: example 0's position over 5000 epochs is uniform (counts %d..%d, expect ~500)", lo, hi);
    test_check(lo > 400 && hi < 600, msg);
    dataset_close(&ds);

    SamplerType t;
    test_check(sampler_parse("sortish", &t) && t == SAMPLER_SORTISH && sampler_parse("random", &t) &&
                   t == SAMPLER_RANDOM && sampler_parse("sequential", &t) && t == SAMPLER_SEQUENTIAL &&
                   !sampler_parse("sorted", &t) && !strcmp(sampler_name(SAMPLER_SORTISH), "sortish"),
               "sampler_parse / sampler_name");
    free(p);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/t5_test_batching_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    prepare_real_split();
    test_collate();
    test_samplers();
    rm_rf(g_tmp);
    return test_summary();
}
