// data/sampler.c: epoch orders (see sampler.h). Our own RNG (splitmix64), so an order
// is a pure function of (seed, epoch) on every platform; it does not reproduce torch's
// or numpy's streams, only their algorithms.
#include "sampler.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

static const char *const NAMES[] = {"random", "sequential", "sortish"};

int sampler_parse(const char *name, SamplerType *out) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, NAMES[i])) {
            *out = (SamplerType)i;
            return 1;
        }
    return 0;
}

const char *sampler_name(SamplerType t) { return (unsigned)t < 3 ? NAMES[t] : "unknown"; }

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Uniform in [0, n) without modulo bias (rejects the low 2^64 mod n values).
static uint64_t rng_below(uint64_t *s, uint64_t n) {
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t r = splitmix64(s);
        if (r >= threshold) return r % n;
    }
}

// One stream per (seed, epoch, sampler): the seed and epoch are mixed, not added, so
// (seed, epoch+1) and (seed+1, epoch) do not share a stream.
static uint64_t rng_init(uint64_t seed, int epoch, SamplerType type) {
    uint64_t s = seed, a = splitmix64(&s);
    s = (uint64_t)(uint32_t)epoch ^ ((uint64_t)type << 40);
    uint64_t b = splitmix64(&s);
    return a ^ (b * 0xD1B54A32D192ED03ULL);
}

static void shuffle(uint64_t *rng, uint64_t *a, uint64_t n) {
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = rng_below(rng, i);
        uint64_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

typedef struct {
    uint64_t len, pos, idx;
} Keyed;

// Descending length; equal lengths keep their order (Python's sorted(reverse=True) is stable).
static int keyed_cmp(const void *pa, const void *pb) {
    const Keyed *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

typedef struct {
    uint64_t start, len;
} Span;

// finetune_trainer's sortish_sampler_indices (examples/legacy/seq2seq/utils.py), the
// key being the source length in tokens: a random permutation cut into chunks of
// 50*bs, each sorted by descending key; that cut into batches of bs; the batch whose
// first example has the largest key (the first such) swapped to the front; the other
// batches permuted.
static void sortish_order(const Dataset *ds, uint64_t *rng, int bs, uint64_t *order) {
    uint64_t n = ds->count;
    if (n == 0) return;
    for (uint64_t i = 0; i < n; i++) order[i] = i;
    shuffle(rng, order, n);
    uint64_t sz = 50 * (uint64_t)bs;
    Keyed *k = mallocCheck((size_t)(n < sz ? n : sz) * sizeof(Keyed));
    for (uint64_t c = 0; c < n; c += sz) {
        uint64_t m = n - c < sz ? n - c : sz;
        for (uint64_t i = 0; i < m; i++) {
            uint64_t idx = order[c + i];
            k[i] = (Keyed){ds->offsets[2 * idx + 1] - ds->offsets[2 * idx], i, idx};
        }
        qsort(k, (size_t)m, sizeof(Keyed), keyed_cmp);
        for (uint64_t i = 0; i < m; i++) order[c + i] = k[i].idx;
    }
    free(k);
    uint64_t nb = (n + (uint64_t)bs - 1) / (uint64_t)bs, max_b = 0, max_len = 0;
    Span *b = mallocCheck((size_t)nb * sizeof(Span));
    for (uint64_t i = 0; i < nb; i++) {
        b[i].start = i * (uint64_t)bs;
        b[i].len = n - b[i].start < (uint64_t)bs ? n - b[i].start : (uint64_t)bs;
        uint64_t idx = order[b[i].start], len = ds->offsets[2 * idx + 1] - ds->offsets[2 * idx];
        if (i == 0 || len > max_len) {
            max_len = len;
            max_b = i;
        }
    }
    Span t = b[0];
    b[0] = b[max_b];
    b[max_b] = t;
    // Permute batches 1..nb-1 (Fisher-Yates on the spans).
    for (uint64_t i = nb - 1; i > 1; i--) {
        uint64_t j = 1 + rng_below(rng, i);  // in [1, i]
        Span s = b[i];
        b[i] = b[j];
        b[j] = s;
    }
    uint64_t *out = mallocCheck((size_t)n * sizeof(uint64_t)), k2 = 0;
    for (uint64_t i = 0; i < nb; i++)
        for (uint64_t j = 0; j < b[i].len; j++) out[k2++] = order[b[i].start + j];
    memcpy(order, out, (size_t)n * sizeof(uint64_t));
    free(out);
    free(b);
}

void sampler_epoch_order(SamplerType type, const Dataset *ds, uint64_t seed, int epoch, int batch_size,
                         uint64_t *order) {
    uint64_t n = ds->count, rng = rng_init(seed, epoch, type);
    switch (type) {
    case SAMPLER_SEQUENTIAL:
        for (uint64_t i = 0; i < n; i++) order[i] = i;
        break;
    case SAMPLER_RANDOM:
        for (uint64_t i = 0; i < n; i++) order[i] = i;
        shuffle(&rng, order, n);
        break;
    case SAMPLER_SORTISH:
        if (batch_size < 1) t5_fail("sortish sampler: batch size %d; it must be at least 1", batch_size);
        sortish_order(ds, &rng, batch_size, order);
        break;
    default: t5_fail("sampler_epoch_order: unknown sampler type %d", (int)type);
    }
}
