// tests/test_io_util.h: helpers shared by the model I/O tests (test_io.c: fp16/bf16 and
// safetensors; test_config.c: presets, config.json, the parameter layout and init;
// test_hf_dir.c: Hugging Face model directories): a scratch directory, small file
// writers, float bit views, forked error checks and a tiny config.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../model/config.h"
#include "test_fork.h"
#include "test_tmp.h"

static char g_tmp[256];  // this binary's scratch directory (io_tmp_begin)

static inline int io_tmp_begin(const char *test) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/t5_%s_XXXXXX", test);
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 0;
    }
    return 1;
}

static inline char *tmp_path(const char *name) { return path_join(g_tmp, name); }

static inline void write_text(const char *path, const char *text) {
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(text, 1, strlen(text), f, path);
    fcloseCheck(f, path);
}

static inline uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// forked error checks: tests/test_fork.h
static inline void expect_error(const char *what, FailFn fn, const void *arg, const char *needle) {
    test_expect_error(what, fn, arg, needle, NULL);
}

// Two configs equal in every field that matters (name aside).
static inline int same_config(const T5Config *a, const T5Config *b) {
    return a->vocab_size == b->vocab_size && a->d_model == b->d_model && a->d_kv == b->d_kv && a->d_ff == b->d_ff &&
           a->num_layers == b->num_layers && a->num_decoder_layers == b->num_decoder_layers &&
           a->num_heads == b->num_heads && a->relative_attention_num_buckets == b->relative_attention_num_buckets &&
           a->relative_attention_max_distance == b->relative_attention_max_distance &&
           a->dropout_rate == b->dropout_rate && a->layer_norm_epsilon == b->layer_norm_epsilon &&
           a->initializer_factor == b->initializer_factor && !strcmp(a->feed_forward_proj, b->feed_forward_proj) &&
           a->act == b->act && a->is_gated == b->is_gated && a->tie_word_embeddings == b->tie_word_embeddings &&
           a->scale_decoder_outputs == b->scale_decoder_outputs && a->untied_lm_head == b->untied_lm_head &&
           a->pad_token_id == b->pad_token_id && a->eos_token_id == b->eos_token_id &&
           a->decoder_start_token_id == b->decoder_start_token_id;
}

// A tiny T5 (vocab 37, d_model 16, 3 heads of 4, 2 encoder and 3 decoder layers).
static inline T5Config tiny_config(int gated, int untied) {
    T5Config c;
    t5_config_preset(gated ? "google/flan-t5-small" : "t5-small", &c);
    snprintf(c.name, sizeof c.name, "tiny");
    c.vocab_size = 37;
    c.d_model = 16;
    c.d_kv = 4;
    c.num_heads = 3;  // inner width 12 != d_model
    c.d_ff = 24;
    c.num_layers = 2;
    c.num_decoder_layers = 3;
    c.relative_attention_num_buckets = 8;
    c.relative_attention_max_distance = 20;
    c.untied_lm_head = untied;
    c.tie_word_embeddings = !untied;
    return c;
}
