// data/dataset.h: tokenized examples of one split (train / validation / test), held in a
// memory-mapped binary file (format in docs/DATASET.md). Each example is a pair of
// token sequences, source and target, each FULL (untruncated) and ending with </s> (1):
// truncation to --max_source_length / --max_target_length happens at collation
// (data/collate.c), so one cache serves any max length.
//
// Text in (data/text_reader.c: .source/.target pairs or JSON lines), tokenized with
// data/spm.h, written by dataset_prepare(); `train_t5 prepare` and the trainer both
// call it, the trainer reusing a cache file whose key (text files, tokenizer, prefix)
// matches.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "spm.h"

typedef struct {
    char *path;          // the .t5ds file
    void *map;           // mmap of the whole file
    size_t map_bytes;
    uint32_t vocab_size; // tokenizer piece count + extra ids (32100 for T5)
    uint64_t tokenizer_hash;  // spm_model_hash of the tokenizer that made it
    uint64_t count;      // examples
    const uint64_t *offsets;  // (2*count+1) token offsets: src_i = [off[2i], off[2i+1]), tgt_i = [off[2i+1], off[2i+2])
    const int32_t *tokens;
} Dataset;

// Where the text of a split comes from.
typedef enum { TEXT_PAIRS = 0, TEXT_JSONL } TextFormat;
typedef struct {
    TextFormat format;
    const char *source_path;  // TEXT_PAIRS: X.source; TEXT_JSONL: the .json/.jsonl file
    const char *target_path;  // TEXT_PAIRS: X.target; TEXT_JSONL: NULL
    const char *src_lang, *tgt_lang;  // TEXT_JSONL: keys inside "translation" (e.g. "en", "ro")
    const char *source_prefix;        // prepended to every source line ("" for none)
    long max_examples;                // -1: all (--n_train / --n_val / --n_test)
} TextSpec;

// Tokenize a split's text into a dataset file at out_path (written to a temp name and
// renamed). Bad text (missing file, line-count mismatch, empty line, invalid UTF-8,
// malformed JSON line) is a one-line error naming the file and line.
void dataset_prepare(const TextSpec *spec, const Spm *spm, const char *out_path);
// Open and validate (magic, version, sizes, checksum, offsets, token ids) a dataset
// file; errors name it. A dataset of 0 examples opens: the caller decides whether
// that is an error (training on it is; an empty test split may not be).
void dataset_open(Dataset *ds, const char *path);
void dataset_close(Dataset *ds);
// Cache path for a split: DIR/<split>-<16 hex key>.t5ds where the key hashes the text
// files' paths, sizes and mtimes, the tokenizer hash, the prefix, max_examples.
char *dataset_cache_path(const char *dir, const char *split, const TextSpec *spec, const Spm *spm);

static inline void dataset_example(const Dataset *ds, uint64_t i, const int32_t **src, int *src_len,
                                   const int32_t **tgt, int *tgt_len) {
    uint64_t a = ds->offsets[2 * i], b = ds->offsets[2 * i + 1], c = ds->offsets[2 * i + 2];
    *src = ds->tokens + a;
    *src_len = (int)(b - a);
    *tgt = ds->tokens + b;
    *tgt_len = (int)(c - b);
}
