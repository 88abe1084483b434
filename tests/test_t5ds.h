// tests/test_t5ds.h: a hand-made .t5ds dataset file, written from the format description
// in docs/DATASET.md and not from data/dataset.c, so tests/test_data.c checks the reader
// against the documentation independently.
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

static inline uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

// seqs: 2*count sequences (source, target, source, ...), lens their lengths.
static inline void write_t5ds(const char *path, uint32_t vocab, int count, const int32_t *const *seqs, const int *lens,
                       int fix_checksum) {
    uint64_t n_off = 2 * (uint64_t)count + 1, n_tok = 0;
    for (int i = 0; i < 2 * count; i++) n_tok += (uint64_t)lens[i];
    size_t bytes = 64 + 8 * n_off + 4 * n_tok;
    unsigned char *buf = calloc(1, bytes);
    memcpy(buf, "T5DS\r\n\x1a\n", 8);
    uint32_t version = 1;
    memcpy(buf + 8, &version, 4);
    memcpy(buf + 12, &vocab, 4);
    uint64_t c64 = (uint64_t)count;
    memcpy(buf + 16, &c64, 8);
    memcpy(buf + 24, &n_tok, 8);
    uint64_t *off = (uint64_t *)(buf + 64);
    int32_t *tok = (int32_t *)(buf + 64 + 8 * n_off);
    off[0] = 0;
    for (int i = 0; i < 2 * count; i++) {
        memcpy(tok + off[i], seqs[i], (size_t)lens[i] * 4);
        off[i + 1] = off[i] + (uint64_t)lens[i];
    }
    uint64_t h = fix_checksum ? fnv1a(0xcbf29ce484222325ULL, buf + 64, bytes - 64) : 12345;
    memcpy(buf + 32, &h, 8);
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(buf, 1, bytes, f, path);
    fcloseCheck(f, path);
    free(buf);
}
