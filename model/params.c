// model/params.c: the flat parameter layout in Hugging Face state-dict order, and the
// deterministic random init of T5PreTrainedModel._init_weights (see params.h).
//
// Order = module definition order of transformers' modeling_t5.py, which is what
// model.state_dict() / named_parameters() yield:
//   T5ForConditionalGeneration: shared, encoder, decoder, lm_head
//   T5Stack: (embed_tokens = shared, not repeated), block[i], final_layer_norm
//   T5Block: layer[0] self-attention, (decoder) layer[1] cross-attention, layer[-1] FF
//   T5Attention: q, k, v, o, relative_attention_bias (first block of a stack only)
//   T5LayerSelfAttention / T5LayerCrossAttention / T5LayerFF: the sublayer, then layer_norm
//   T5DenseActDense: wi, wo; T5DenseGatedActDense: wi_0, wi_1, wo
#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/init_rng.h"

#include "../common/check.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

typedef struct {
    ParamLayout *lay;
    int cap;
} Builder;

static size_t add(Builder *b, ParamKind kind, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static size_t add(Builder *b, ParamKind kind, int64_t d0, int64_t d1, const char *fmt, ...) {
    ParamLayout *lay = b->lay;
    if (lay->count == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        ParamSpec *grown = realloc(lay->specs, (size_t)b->cap * sizeof *grown);
        if (!grown) t5_die(__FILE__, __LINE__, "out of host memory for the parameter table", NULL);
        lay->specs = grown;
    }
    ParamSpec *s = &lay->specs[lay->count++];
    memset(s, 0, sizeof *s);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->ndim = d1 > 0 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1 > 0 ? d1 : 0;
    s->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    s->offset = lay->total;
    s->kind = kind;
    // HF Trainer.get_decay_parameter_names drops names matching r"bias" and norm patterns:
    // norm weights AND relative_attention_bias.weight get no weight decay.
    s->no_decay = kind == PARAM_NORM || kind == PARAM_RELBIAS;
    lay->total += s->numel;
    return s->offset;
}

static void add_attention(Builder *b, const T5Config *c, AttnOffsets *a, int relbias, const char *prefix) {
    int64_t D = c->d_model, I = (int64_t)c->num_heads * c->d_kv;
    a->q = add(b, PARAM_LINEAR, I, D, "%s.q.weight", prefix);
    a->k = add(b, PARAM_LINEAR, I, D, "%s.k.weight", prefix);
    a->v = add(b, PARAM_LINEAR, I, D, "%s.v.weight", prefix);
    a->o = add(b, PARAM_LINEAR, D, I, "%s.o.weight", prefix);
    a->has_relbias = relbias;
    if (relbias)
        a->relbias = add(b, PARAM_RELBIAS, c->relative_attention_num_buckets, c->num_heads,
                         "%s.relative_attention_bias.weight", prefix);
}

static void add_ffn(Builder *b, const T5Config *c, FfnOffsets *f, const char *prefix) {
    int64_t D = c->d_model, F = c->d_ff;
    if (c->is_gated) {
        f->wi = add(b, PARAM_LINEAR, F, D, "%s.DenseReluDense.wi_0.weight", prefix);
        f->wi_1 = add(b, PARAM_LINEAR, F, D, "%s.DenseReluDense.wi_1.weight", prefix);
    } else {
        f->wi = add(b, PARAM_LINEAR, F, D, "%s.DenseReluDense.wi.weight", prefix);
        f->wi_1 = 0;
    }
    f->wo = add(b, PARAM_LINEAR, D, F, "%s.DenseReluDense.wo.weight", prefix);
    f->ln = add(b, PARAM_NORM, D, 0, "%s.layer_norm.weight", prefix);
}

// Units from the tensor offsets: each unit starts at its first tensor and ends where the
// next unit starts.
static void build_units(const T5Config *c, ParamLayout *lay) {
    int n = 1 + c->num_layers + 1 + c->num_decoder_layers + 1 + (c->untied_lm_head ? 1 : 0);
    lay->units = callocCheck((size_t)n, sizeof *lay->units);
    lay->n_units = n;
    int u = 0;
    lay->unit_shared = u;
    snprintf(lay->units[u++].name, sizeof lay->units[0].name, "shared");
    lay->unit_enc0 = u;
    for (int i = 0; i < c->num_layers; i++) {
        lay->units[u].lo = lay->enc[i].self.q;
        snprintf(lay->units[u++].name, sizeof lay->units[0].name, "encoder.block.%d", i);
    }
    lay->unit_enc_final = u;
    lay->units[u].lo = lay->enc_final_ln;
    snprintf(lay->units[u++].name, sizeof lay->units[0].name, "encoder.final_layer_norm");
    lay->unit_dec0 = u;
    for (int i = 0; i < c->num_decoder_layers; i++) {
        lay->units[u].lo = lay->dec[i].self.q;
        snprintf(lay->units[u++].name, sizeof lay->units[0].name, "decoder.block.%d", i);
    }
    lay->unit_dec_final = u;
    lay->units[u].lo = lay->dec_final_ln;
    snprintf(lay->units[u++].name, sizeof lay->units[0].name, "decoder.final_layer_norm");
    lay->unit_lm_head = lay->unit_shared;
    if (c->untied_lm_head) {
        lay->unit_lm_head = u;
        lay->units[u].lo = lay->lm_head;
        snprintf(lay->units[u++].name, sizeof lay->units[0].name, "lm_head");
    }
    for (int i = 0; i < n; i++) lay->units[i].hi = i + 1 < n ? lay->units[i + 1].lo : lay->total;
}

int params_unit_of(const ParamLayout *lay, size_t off) {
    int lo = 0, hi = lay->n_units - 1;
    while (lo < hi) {  // last unit with units[u].lo <= off
        int mid = (lo + hi + 1) / 2;
        if (lay->units[mid].lo <= off) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

void params_build_layout(const T5Config *c, ParamLayout *lay) {
    memset(lay, 0, sizeof *lay);
    Builder b = {lay, 0};
    int64_t V = c->vocab_size, D = c->d_model;
    char prefix[96];
    lay->shared = add(&b, PARAM_EMBEDDING, V, D, "shared.weight");

    lay->enc = callocCheck((size_t)c->num_layers, sizeof *lay->enc);
    for (int i = 0; i < c->num_layers; i++) {
        BlockOffsets *blk = &lay->enc[i];
        snprintf(prefix, sizeof prefix, "encoder.block.%d.layer.0.SelfAttention", i);
        add_attention(&b, c, &blk->self, i == 0, prefix);
        blk->self.ln = add(&b, PARAM_NORM, D, 0, "encoder.block.%d.layer.0.layer_norm.weight", i);
        snprintf(prefix, sizeof prefix, "encoder.block.%d.layer.1", i);
        add_ffn(&b, c, &blk->ffn, prefix);
    }
    lay->enc_final_ln = add(&b, PARAM_NORM, D, 0, "encoder.final_layer_norm.weight");

    lay->dec = callocCheck((size_t)c->num_decoder_layers, sizeof *lay->dec);
    for (int i = 0; i < c->num_decoder_layers; i++) {
        BlockOffsets *blk = &lay->dec[i];
        snprintf(prefix, sizeof prefix, "decoder.block.%d.layer.0.SelfAttention", i);
        add_attention(&b, c, &blk->self, i == 0, prefix);
        blk->self.ln = add(&b, PARAM_NORM, D, 0, "decoder.block.%d.layer.0.layer_norm.weight", i);
        snprintf(prefix, sizeof prefix, "decoder.block.%d.layer.1.EncDecAttention", i);
        add_attention(&b, c, &blk->cross, 0, prefix);
        blk->cross.ln = add(&b, PARAM_NORM, D, 0, "decoder.block.%d.layer.1.layer_norm.weight", i);
        snprintf(prefix, sizeof prefix, "decoder.block.%d.layer.2", i);
        add_ffn(&b, c, &blk->ffn, prefix);
    }
    lay->dec_final_ln = add(&b, PARAM_NORM, D, 0, "decoder.final_layer_norm.weight");

    lay->lm_head = c->untied_lm_head ? add(&b, PARAM_LINEAR, V, D, "lm_head.weight") : lay->shared;
    build_units(c, lay);
}

void params_free_layout(ParamLayout *lay) {
    free(lay->specs);
    free(lay->enc);
    free(lay->dec);
    free(lay->units);
    memset(lay, 0, sizeof *lay);
}

int params_find(const ParamLayout *lay, const char *name) {
    for (int i = 0; i < lay->count; i++)
        if (strcmp(lay->specs[i].name, name) == 0) return i;
    return -1;
}

// ---- random init ----------------------------------------------------------------------
// Counter-based: element j of a tensor is a pure function of (seed, tensor name, j), so
// any slice (a ZeRO partition) can be initialized alone and the result does not depend
// on the order tensors are visited.

static uint64_t name_key(const char *name, uint64_t seed) {
    uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001B3ull;
    return init_rng_splitmix64(h ^ init_rng_splitmix64(seed));
}

// std of each tensor as HF's T5PreTrainedModel._init_weights (factor = initializer_factor):
// shared N(0, f); lm_head N(0, f) when untied; q N(0, f*(D*dk)^-0.5); k, v N(0, f*D^-0.5);
// o N(0, f*(H*dk)^-0.5); relative_attention_bias N(0, f*D^-0.5); wi/wi_0/wi_1 N(0, f*D^-0.5);
// wo N(0, f*F^-0.5); norms = f.
static double init_std(const T5Config *c, const ParamSpec *s, int *is_const) {
    double f = c->initializer_factor, D = c->d_model;
    *is_const = 0;
    const char *dot = strrchr(s->name, '.');  // ".weight"
    size_t n = dot ? (size_t)(dot - s->name) : strlen(s->name);
    const char *leaf = s->name;
    for (size_t i = 0; i < n; i++)
        if (s->name[i] == '.') leaf = s->name + i + 1;
    size_t leaf_len = (size_t)(s->name + n - leaf);
#define LEAF_IS(str) (leaf_len == strlen(str) && strncmp(leaf, str, leaf_len) == 0)
    switch (s->kind) {
    case PARAM_NORM: *is_const = 1; return f;
    case PARAM_EMBEDDING: return f;
    case PARAM_RELBIAS: return f / sqrt(D);
    case PARAM_LINEAR:
        if (LEAF_IS("lm_head")) return f;
        if (LEAF_IS("q")) return f / sqrt(D * (double)c->d_kv);
        if (LEAF_IS("k") || LEAF_IS("v")) return f / sqrt(D);
        if (LEAF_IS("o")) return f / sqrt((double)c->num_heads * c->d_kv);
        if (LEAF_IS("wi") || LEAF_IS("wi_0") || LEAF_IS("wi_1")) return f / sqrt(D);
        if (LEAF_IS("wo")) return f / sqrt((double)c->d_ff);
        break;
    }
#undef LEAF_IS
    t5_die(__FILE__, __LINE__, "params_init_random: no init rule for a tensor of the layout", s->name);
}

// The part [*a, *b) of tensor s that falls in the flat range [lo, hi); 0 when none does.
static int tensor_in_range(const ParamSpec *s, size_t lo, size_t hi, size_t *a, size_t *b) {
    *a = s->offset > lo ? s->offset : lo;
    *b = s->offset + s->numel < hi ? s->offset + s->numel : hi;
    return *a < *b;
}

void params_init_random(const T5Config *cfg, const ParamLayout *lay, float *params, uint64_t seed) {
    params_init_random_range(cfg, lay, seed, 0, lay->total, params);
}

void params_init_random_range(const T5Config *cfg, const ParamLayout *lay, uint64_t seed, size_t lo, size_t hi,
                              float *dst) {
    for (int t = 0; t < lay->count; t++) {
        const ParamSpec *s = &lay->specs[t];
        size_t a, b;
        if (!tensor_in_range(s, lo, hi, &a, &b)) continue;
        int is_const;
        double std = init_std(cfg, s, &is_const);
        float *out = dst + (a - lo);
        size_t j0 = a - s->offset, n = b - a;  // tensor-local elements j0 .. j0+n-1
        if (is_const) {
            for (size_t j = 0; j < n; j++) out[j] = (float)std;
            continue;
        }
        uint64_t key = name_key(s->name, seed);
        size_t p0 = j0 / 2, p1 = (j0 + n + 1) / 2;  // the pairs that hold them
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (size_t p = p0; p < p1; p++) {
            double z[2];
            init_rng_normal_pair(key, p, z);
            for (size_t k = 0; k < 2; k++) {
                size_t j = 2 * p + k;
                if (j >= j0 && j < j0 + n) out[j - j0] = (float)(z[k] * std);
            }
        }
    }
}

void params_init_random_backend(const Backend *be, const T5Config *cfg, const ParamLayout *lay, uint64_t seed,
                                size_t lo, size_t hi, void *dst, Dtype dt) {
    size_t e = dt == DTYPE_F32 ? 4 : 2;
    for (int t = 0; t < lay->count; t++) {
        const ParamSpec *s = &lay->specs[t];
        size_t a, b;
        if (!tensor_in_range(s, lo, hi, &a, &b)) continue;
        int is_const;
        double std = init_std(cfg, s, &is_const);
        be->init_random((char *)dst + (a - lo) * e, dt, b - a, is_const ? 0 : name_key(s->name, seed),
                        a - s->offset, std, is_const);
    }
}

int params_is_encoder(const ParamLayout *lay, const ParamSpec *p) {
    int u = params_unit_of(lay, p->offset);
    return u >= lay->unit_enc0 && u <= lay->unit_enc_final;
}

size_t params_largest_numel(const ParamLayout *lay) {
    size_t big = 0;
    for (int i = 0; i < lay->count; i++)
        if (lay->specs[i].numel > big) big = lay->specs[i].numel;
    return big;
}
