// model/params.h: the parameter layout. All parameters live in ONE flat buffer
// (llm.c style); a tensor is an offset into it. The name table uses the exact
// Hugging Face state-dict names, in HF state-dict order (which is also forward
// order), so ZeRO partitions are contiguous ranges of that space (zero/partition.h).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "../kernels/backend.h"
#include "config.h"

typedef enum {
    PARAM_EMBEDDING = 0,  // shared.weight (V,D)
    PARAM_LINEAR,         // (O,I) projection weights, lm_head.weight
    PARAM_NORM,           // RMS norm weights (D): no weight decay
    PARAM_RELBIAS,        // relative_attention_bias.weight (num_buckets,H)
} ParamKind;

typedef struct {
    char name[96];     // exact HF state-dict name
    int ndim;          // 1 or 2
    int64_t shape[2];  // HF (torch) shape
    size_t offset;     // element offset into the flat buffer
    size_t numel;
    ParamKind kind;
    int frozen;        // 1: not trained (--freeze_embeds): no update, not in the gradient norm
    int no_decay;      // 1: excluded from weight decay. HF Trainer excludes names matching
                       // norm patterns and r"bias": the norm weights AND relative_attention_bias
} ParamSpec;

// Element offsets of one attention sublayer's tensors.
typedef struct {
    size_t q, k, v, o;   // q,k,v (H*dk, D); o (D, H*dk)
    size_t ln;           // layer_norm.weight (D)
    int has_relbias;     // first block of each stack only
    size_t relbias;      // relative_attention_bias.weight (num_buckets, H)
} AttnOffsets;

typedef struct {
    size_t wi;           // wi.weight, or wi_0.weight when gated (F, D)
    size_t wi_1;         // gated only (F, D)
    size_t wo;           // (D, F)
    size_t ln;           // layer_norm.weight (D)
} FfnOffsets;

typedef struct {
    AttnOffsets self;
    AttnOffsets cross;   // decoder blocks only
    FfnOffsets ffn;
} BlockOffsets;

// A unit: the tensors one step of forward/backward uses together (the embedding, one
// block, a final norm, the untied head), a contiguous range [lo, hi) of the flat space.
// ZeRO stage 3 gathers parameters a unit at a time; stages 2-3 reduce a unit's gradients
// as soon as backward has finished them (zero/grads_reduce_scatter.c, zero/params_fetch.c). Units cover the
// flat space in order, without gaps.
typedef struct {
    char name[48];   // "shared", "encoder.block.3", "encoder.final_layer_norm", "lm_head", ...
    size_t lo, hi;   // element range
} ParamUnit;

typedef struct {
    ParamSpec *specs;
    int count;
    size_t total;              // elements in the flat buffer
    size_t shared;             // shared.weight (V, D)
    size_t lm_head;            // lm_head.weight (V, D) when untied, else == shared
    size_t enc_final_ln, dec_final_ln;
    BlockOffsets *enc;         // (num_layers)
    BlockOffsets *dec;         // (num_decoder_layers)
    ParamUnit *units;          // (n_units) in flat order
    int n_units;
    int unit_shared, unit_enc0, unit_enc_final, unit_dec0, unit_dec_final;  // encoder block i: unit_enc0 + i
    int unit_lm_head;          // == unit_shared when the head is tied
} ParamLayout;

// Build the layout for a config (allocates; free with params_free_layout).
void params_build_layout(const T5Config *cfg, ParamLayout *lay);
void params_free_layout(ParamLayout *lay);

// Index of the unit holding element offset off (binary search).
int params_unit_of(const ParamLayout *lay, size_t off);
// Index of a tensor by HF name, or -1 if absent.
int params_find(const ParamLayout *lay, const char *name);
// The element count of the layout's largest tensor (checkpoint buffers are sized by it).
size_t params_largest_numel(const ParamLayout *lay);
// 1 when tensor p belongs to the encoder stack (its blocks and final norm: the units
// unit_enc0 .. unit_enc_final); the shared embedding is not the encoder's.
int params_is_encoder(const ParamLayout *lay, const ParamSpec *p);

// Deterministic random init on the host, as HF's T5PreTrainedModel._init_weights
// (normal with factor-scaled std; norms = 1) using our own seeded RNG.
void params_init_random(const T5Config *cfg, const ParamLayout *lay, float *params, uint64_t seed);
// The same values for the flat elements [lo, hi) only, into dst (hi - lo floats): a ZeRO
// partition initialized alone (counter-based: element j of a tensor depends on the seed,
// the tensor's name and j only).
void params_init_random_range(const T5Config *cfg, const ParamLayout *lay, uint64_t seed, size_t lo, size_t hi,
                              float *dst);
// The same made by the backend into dst (hi - lo elements of dtype dt, backend memory):
// the CUDA backend draws them on the GPU, so start-up neither draws 738M normals on the
// host (t5-large) nor copies them (backend.h init_random; kernels/init_rng.h on rounding).
void params_init_random_backend(const Backend *be, const T5Config *cfg, const ParamLayout *lay, uint64_t seed,
                                size_t lo, size_t hi, void *dst, Dtype dt);
