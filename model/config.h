// model/config.h: the T5 architecture description. Read from a Hugging Face
// config.json (every T5 field), or from a built-in preset by hub name, and written
// back as a config.json that transformers loads.
//
// The LM head has two independent properties (DESIGN.md "T5 semantics"):
// - scale_decoder_outputs: multiply the final decoder states by d_model^-0.5 before the
//   head. From config.json's `scale_decoder_outputs` when present (transformers 5),
//   else from `tie_word_embeddings` (true for T5 1.0, false for T5 1.1 / FLAN).
// - untied_lm_head: a separate lm_head.weight (hub T5 1.1 / FLAN checkpoints). Decided
//   by the weights file (the tensor is there or not); presets set it as the hub does.
#pragma once
#include "../kernels/backend.h"

typedef struct {
    char name[256];  // preset name or config.json path, for messages
    int vocab_size;  // V
    int d_model;     // D
    int d_kv;        // dk, per head; inner attention width is num_heads * d_kv
    int d_ff;        // F
    int num_layers;          // encoder blocks
    int num_decoder_layers;  // decoder blocks
    int num_heads;           // H
    int relative_attention_num_buckets;
    int relative_attention_max_distance;
    float dropout_rate;
    float layer_norm_epsilon;
    float initializer_factor;
    char feed_forward_proj[32];  // "relu", "gated-gelu", ... as written in config.json
    Activation act;              // parsed from feed_forward_proj
    int is_gated;                // "gated-*": wi_0 / wi_1
    int tie_word_embeddings;     // as in config.json
    int scale_decoder_outputs;   // resolved, see above
    int untied_lm_head;          // resolved, see above
    int pad_token_id, eos_token_id, decoder_start_token_id;
} T5Config;

// Fill *cfg from a preset name (t5-small ... google/flan-t5-xxl, with or without the
// "google-t5/" or "google/" prefix). Returns 1 if the name is a preset, 0 otherwise.
int t5_config_preset(const char *name, T5Config *cfg);

// Space-separated list of preset names, for error messages.
const char *t5_config_preset_names(void);

// Parse config.json. Any problem (missing file, malformed JSON, missing or wrongly
// typed key, bad value) is a one-line error naming the file and key; exits non-zero.
void t5_config_load_json(const char *path, T5Config *cfg);

// Write config.json (atomically: temp file + rename) in the form transformers 5 writes.
void t5_config_save_json(const T5Config *cfg, const char *path);

// 1 if a and b are different architectures (shapes, activation, head, scaling, token ids,
// layer-norm epsilon; not dropout), with the first difference in diff ("d_model 8 vs 16").
int t5_config_diff(const T5Config *a, const T5Config *b, char *diff, size_t cap);

// Parse a feed_forward_proj string ("relu", "gated-gelu", "gated-silu", ...).
// Returns 1 on success, 0 if unsupported.
int t5_config_parse_ffn(const char *proj, Activation *act, int *is_gated);

// Inner attention width (num_heads * d_kv).
static inline int t5_config_inner_dim(const T5Config *c) { return c->num_heads * c->d_kv; }
