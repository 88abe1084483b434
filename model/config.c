// model/config.c: T5 presets, config.json parsing with full validation, and writing
// config.json the way transformers 5 does (see config.h).
//
// Preset numbers are hub config.json values, checked against the files themselves:
// google-t5/t5-{small,base,large}/config.json; t5-11b's shapes from google/t5-11b-ssm-*
// (same architecture); google/flan-t5-xxl and fine-tuned copies of
// google/flan-t5-{small,large,xl} and google/t5-v1_1-{small,base,xl,xxl} configs (their
// "_name_or_path" names the source). t5-3b and the rest are confirmed by the parameter
// counts in tests/test_io.c (60,506,624 for t5-small ... 11,307,321,344 for t5-11b;
// 76,961,152 for flan-t5-small ... 2,849,757,184 for flan-t5-xl), which published
// num_parameters() figures match. T5 1.0 configs omit relative_attention_max_distance
// and tie_word_embeddings, so T5Config's defaults (128, true) apply. T5 1.1 / FLAN small
// really is 8 layers, 6 heads, d_ff 1024 (t5x t5_1_1/small.gin), not t5-small's shape.
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../common/json_read.h"

// Upper bounds that keep every size product far from overflow; all real T5s are far below.
#define CFG_MAX_DIM (1 << 24)
#define CFG_MAX_LAYERS 1024

typedef struct {
    const char *hub_name;  // canonical hub id; the part after '/' is accepted too
    int d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads;
    int v1_1;              // T5 1.1 / FLAN: gated-gelu, untied head, no output scaling
} Preset;

static const Preset PRESETS[] = {
    {"google-t5/t5-small", 512, 64, 2048, 6, 6, 8, 0},
    {"google-t5/t5-base", 768, 64, 3072, 12, 12, 12, 0},
    {"google-t5/t5-large", 1024, 64, 4096, 24, 24, 16, 0},
    {"google-t5/t5-3b", 1024, 128, 16384, 24, 24, 32, 0},
    {"google-t5/t5-11b", 1024, 128, 65536, 24, 24, 128, 0},
    {"google/t5-v1_1-small", 512, 64, 1024, 8, 8, 6, 1},
    {"google/t5-v1_1-base", 768, 64, 2048, 12, 12, 12, 1},
    {"google/t5-v1_1-large", 1024, 64, 2816, 24, 24, 16, 1},
    {"google/t5-v1_1-xl", 2048, 64, 5120, 24, 24, 32, 1},
    {"google/t5-v1_1-xxl", 4096, 64, 10240, 24, 24, 64, 1},
    {"google/flan-t5-small", 512, 64, 1024, 8, 8, 6, 1},
    {"google/flan-t5-base", 768, 64, 2048, 12, 12, 12, 1},
    {"google/flan-t5-large", 1024, 64, 2816, 24, 24, 16, 1},
    {"google/flan-t5-xl", 2048, 64, 5120, 24, 24, 32, 1},
    {"google/flan-t5-xxl", 4096, 64, 10240, 24, 24, 64, 1},
};
#define NUM_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

static void copy_name(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static const char *act_name(Activation a) {
    switch (a) {
    case ACT_RELU: return "relu";
    case ACT_GELU: return "gelu";
    case ACT_GELU_NEW: return "gelu_new";
    case ACT_SILU: return "silu";
    }
    return "?";
}

static int act_from_name(const char *s, Activation *act) {
    if (strcmp(s, "relu") == 0) *act = ACT_RELU;
    else if (strcmp(s, "gelu") == 0) *act = ACT_GELU;
    else if (strcmp(s, "gelu_new") == 0) *act = ACT_GELU_NEW;
    else if (strcmp(s, "silu") == 0) *act = ACT_SILU;
    else return 0;
    return 1;
}

// As T5Config.__init__: "gated-X" or "X"; "gated-gelu" means gelu_new (backwards compat).
int t5_config_parse_ffn(const char *proj, Activation *act, int *is_gated) {
    if (!proj) return 0;
    int gated = strncmp(proj, "gated-", 6) == 0;
    const char *base = gated ? proj + 6 : proj;
    Activation a;
    if (gated && strcmp(base, "gelu") == 0) a = ACT_GELU_NEW;
    else if (!act_from_name(base, &a)) return 0;
    if (act) *act = a;
    if (is_gated) *is_gated = gated;
    return 1;
}

static const char *SUPPORTED_FFN = "relu, gelu, gelu_new, silu, gated-relu, gated-gelu, gated-gelu_new, gated-silu";

static void set_common_defaults(T5Config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 32128;
    c->relative_attention_num_buckets = 32;
    c->relative_attention_max_distance = 128;
    c->dropout_rate = 0.1f;
    c->layer_norm_epsilon = 1e-6f;
    c->initializer_factor = 1.0f;
    c->pad_token_id = 0;
    c->eos_token_id = 1;
    c->decoder_start_token_id = 0;
}

int t5_config_preset(const char *name, T5Config *cfg) {
    if (!name) return 0;
    for (int i = 0; i < NUM_PRESETS; i++) {
        const Preset *p = &PRESETS[i];
        const char *short_name = strchr(p->hub_name, '/') + 1;
        if (strcmp(name, p->hub_name) != 0 && strcmp(name, short_name) != 0) continue;
        set_common_defaults(cfg);
        copy_name(cfg->name, sizeof cfg->name, p->v1_1 ? p->hub_name : short_name);
        cfg->d_model = p->d_model;
        cfg->d_kv = p->d_kv;
        cfg->d_ff = p->d_ff;
        cfg->num_layers = p->num_layers;
        cfg->num_decoder_layers = p->num_decoder_layers;
        cfg->num_heads = p->num_heads;
        copy_name(cfg->feed_forward_proj, sizeof cfg->feed_forward_proj, p->v1_1 ? "gated-gelu" : "relu");
        t5_config_parse_ffn(cfg->feed_forward_proj, &cfg->act, &cfg->is_gated);
        cfg->tie_word_embeddings = !p->v1_1;
        cfg->scale_decoder_outputs = !p->v1_1;
        cfg->untied_lm_head = p->v1_1;
        return 1;
    }
    return 0;
}

const char *t5_config_preset_names(void) {
    static char buf[1024];
    if (!buf[0]) {
        size_t k = 0;
        for (int i = 0; i < NUM_PRESETS; i++) {
            const Preset *p = &PRESETS[i];
            // T5 1.0 under its short name (what everyone types), the rest under the hub id.
            const char *n = p->v1_1 ? p->hub_name : strchr(p->hub_name, '/') + 1;
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? " " : "", n);
        }
    }
    return buf;
}

// ---- config.json parsing ------------------------------------------------------------

// The JSON text of a value, shortened, for "found ..." in messages.
static void describe_value(const cJSON *v, char *out, size_t cap) {
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) {  // cJSON would print null
        snprintf(out, cap, "a number beyond a double's range (read as %g)", v->valuedouble);
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    if (!s) {
        snprintf(out, cap, "(unprintable)");
        return;
    }
    if (strlen(s) > 60) memcpy(s + 57, "...", 4);
    snprintf(out, cap, "%s", s);
    free(s);
}

__attribute__((noreturn)) static void fail_key(const char *path, const char *key, const char *expected, const cJSON *v) {
    char found[96];
    describe_value(v, found, sizeof found);
    t5_fail("%s: key \"%s\": expected %s, found %s", path, key, expected, found);
}

// Integer key: returns 1 and sets *out when present (and not null), 0 when absent/null.
static int get_int(const cJSON *root, const char *path, const char *key, int lo, int hi, const char *expected, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) fail_key(path, key, expected, v);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < lo || d > hi) fail_key(path, key, expected, v);
    *out = (int)d;
    return 1;
}

static void require_int(const cJSON *root, const char *path, const char *key, int hi, int *out) {
    char expected[64];
    snprintf(expected, sizeof expected, "a positive integer <= %d", hi);
    if (!get_int(root, path, key, 1, hi, expected, out))
        t5_fail("%s: missing required key \"%s\" (expected %s)", path, key, expected);
}

static int get_float(const cJSON *root, const char *path, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    // the value is kept as an fp32: 1e300 (or 1e400, which cJSON reads as inf) is not one
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > FLT_MAX)
        fail_key(path, key, "a finite number (within fp32's range)", v);
    *out = (float)v->valuedouble;
    return 1;
}

static int get_bool(const cJSON *root, const char *path, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) fail_key(path, key, "true or false", v);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 1;
}

static const cJSON *get_string(const cJSON *root, const char *path, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return NULL;
    if (!cJSON_IsString(v)) fail_key(path, key, "a string", v);
    return v;
}

// Read and parse config.json; the text is returned in *text (freed by the caller after
// cJSON_Delete of the result). Errors name the byte where the JSON goes wrong.
static cJSON *config_parse_file(const char *path, char **text_out) {
    size_t len = 0;
    char *text = *text_out = read_text_file(path, &len);
    if (!text)
        t5_fail("%s: cannot open config.json (%s); HINT: a model directory needs config.json and model.safetensors; "
                "or pass a preset name such as t5-small",
                path, strerror(errno));
    if (memchr(text, '\0', len)) t5_fail("%s: contains a NUL byte: not a JSON text file", path);
    // as transformers reads it (json.load): the last of duplicate keys wins, with a NOTICE;
    // text after the object, "\u0000" and what else Python refuses: refused (common/json_read.h)
    size_t off = len;
    cJSON *root = json_read_parse(text, len, path, JSON_DUP_LAST, &off);
    if (!root) {
        char near[40] = {0};
        size_t k = 0;
        for (size_t i = off; i < len && k < 24; i++) near[k++] = (text[i] == '\n' || text[i] == '\t') ? ' ' : text[i];
        if (off >= len) t5_fail("%s: malformed JSON: unexpected end of file at byte %zu", path, len);
        t5_fail("%s: malformed JSON at byte %zu of %zu (near \"%s\")", path, off, len, near);
    }
    if (!cJSON_IsObject(root)) {
        char found[96];
        describe_value(root, found, sizeof found);
        t5_fail("%s: expected a JSON object at top level, found %s", path, found);
    }
    return root;
}

// The dimensions and the relative attention buckets.
static void config_read_dims(const cJSON *root, const char *path, T5Config *cfg) {
    require_int(root, path, "vocab_size", CFG_MAX_DIM, &cfg->vocab_size);
    require_int(root, path, "d_model", CFG_MAX_DIM, &cfg->d_model);
    require_int(root, path, "d_kv", CFG_MAX_DIM, &cfg->d_kv);
    require_int(root, path, "d_ff", CFG_MAX_DIM, &cfg->d_ff);
    require_int(root, path, "num_layers", CFG_MAX_LAYERS, &cfg->num_layers);
    require_int(root, path, "num_heads", CFG_MAX_DIM, &cfg->num_heads);
    cfg->num_decoder_layers = cfg->num_layers;
    get_int(root, path, "num_decoder_layers", 1, CFG_MAX_LAYERS, "a positive integer <= 1024",
            &cfg->num_decoder_layers);
    if ((int64_t)cfg->num_heads * cfg->d_kv > CFG_MAX_DIM)
        t5_fail("%s: num_heads * d_kv = %lld is too large (at most %d)", path,
                (long long)cfg->num_heads * cfg->d_kv, CFG_MAX_DIM);

    // Bucketing halves num_buckets (bidirectional) and halves again for the exact range;
    // fewer than 4 buckets, or max_distance within the exact range, divides by zero in HF.
    get_int(root, path, "relative_attention_num_buckets", 4, 65536, "an integer from 4 to 65536",
            &cfg->relative_attention_num_buckets);
    get_int(root, path, "relative_attention_max_distance", 1, CFG_MAX_DIM, "a positive integer",
            &cfg->relative_attention_max_distance);
    if (cfg->relative_attention_max_distance <= cfg->relative_attention_num_buckets / 2)
        t5_fail("%s: key \"relative_attention_max_distance\": expected more than relative_attention_num_buckets/2 "
                "(%d), found %d",
                path, cfg->relative_attention_num_buckets / 2, cfg->relative_attention_max_distance);

}

// feed_forward_proj and the transformers-4 keys that must agree with it.
static void config_read_ffn(const cJSON *root, const char *path, T5Config *cfg) {
    const cJSON *ffn = get_string(root, path, "feed_forward_proj");
    const char *proj = ffn ? ffn->valuestring : "relu";
    char ffn_expected[160];
    snprintf(ffn_expected, sizeof ffn_expected, "one of %s", SUPPORTED_FFN);
    if (strlen(proj) >= sizeof cfg->feed_forward_proj || !t5_config_parse_ffn(proj, &cfg->act, &cfg->is_gated))
        fail_key(path, "feed_forward_proj", ffn_expected, ffn);
    copy_name(cfg->feed_forward_proj, sizeof cfg->feed_forward_proj, proj);
    // transformers 4 let a stored dense_act_fn / is_gated_act override feed_forward_proj;
    // rather than guess which one the file means, refuse a contradiction.
    const cJSON *daf = get_string(root, path, "dense_act_fn");
    Activation a2;
    if (daf && (!act_from_name(daf->valuestring, &a2) || a2 != cfg->act)) {
        char expected[96];
        snprintf(expected, sizeof expected, "\"%s\" (as feed_forward_proj \"%s\" implies)", act_name(cfg->act), proj);
        fail_key(path, "dense_act_fn", expected, daf);
    }
    int gated2;
    if (get_bool(root, path, "is_gated_act", &gated2) && gated2 != cfg->is_gated) {
        char expected[96];
        snprintf(expected, sizeof expected, "%s (as feed_forward_proj \"%s\" implies)", cfg->is_gated ? "true" : "false",
                 proj);
        fail_key(path, "is_gated_act", expected, cJSON_GetObjectItemCaseSensitive(root, "is_gated_act"));
    }
}

// Embedding tying, decoder-output scaling and the special token ids.
static void config_read_head_tokens(const cJSON *root, const char *path, T5Config *cfg) {
    cfg->tie_word_embeddings = 1;
    get_bool(root, path, "tie_word_embeddings", &cfg->tie_word_embeddings);
    cfg->scale_decoder_outputs = cfg->tie_word_embeddings;
    get_bool(root, path, "scale_decoder_outputs", &cfg->scale_decoder_outputs);
    // A first guess as the hub means it; hf_probe_untied() decides from the weights file.
    cfg->untied_lm_head = !cfg->tie_word_embeddings;

    const char *tok_expected = "a non-negative integer";
    get_int(root, path, "pad_token_id", 0, INT32_MAX, tok_expected, &cfg->pad_token_id);
    get_int(root, path, "eos_token_id", 0, INT32_MAX, tok_expected, &cfg->eos_token_id);
    cfg->decoder_start_token_id = cfg->pad_token_id;  // as HF's shift_right falls back
    get_int(root, path, "decoder_start_token_id", 0, INT32_MAX, tok_expected, &cfg->decoder_start_token_id);
    const char *tok_keys[3] = {"pad_token_id", "eos_token_id", "decoder_start_token_id"};
    int tok_vals[3] = {cfg->pad_token_id, cfg->eos_token_id, cfg->decoder_start_token_id};
    for (int i = 0; i < 3; i++)
        if (tok_vals[i] >= cfg->vocab_size)
            t5_fail("%s: key \"%s\": expected a token id below vocab_size (%d), found %d", path, tok_keys[i],
                    cfg->vocab_size, tok_vals[i]);
}

void t5_config_load_json(const char *path, T5Config *cfg) {
    char *text = NULL;
    cJSON *root = config_parse_file(path, &text);
    set_common_defaults(cfg);
    copy_name(cfg->name, sizeof cfg->name, path);

    const cJSON *mt = get_string(root, path, "model_type");
    if (mt && strcmp(mt->valuestring, "t5") != 0 && strcmp(mt->valuestring, "mt5") != 0)
        fail_key(path, "model_type", "\"t5\" (or \"mt5\": same architecture)", mt);
    config_read_dims(root, path, cfg);
    if (get_float(root, path, "dropout_rate", &cfg->dropout_rate) && !(cfg->dropout_rate >= 0 && cfg->dropout_rate < 1))
        fail_key(path, "dropout_rate", "a number in [0, 1)", cJSON_GetObjectItemCaseSensitive(root, "dropout_rate"));
    if (get_float(root, path, "layer_norm_epsilon", &cfg->layer_norm_epsilon) && !(cfg->layer_norm_epsilon > 0))
        fail_key(path, "layer_norm_epsilon", "a positive number",
                 cJSON_GetObjectItemCaseSensitive(root, "layer_norm_epsilon"));
    if (get_float(root, path, "initializer_factor", &cfg->initializer_factor) && !(cfg->initializer_factor > 0))
        fail_key(path, "initializer_factor", "a positive number",
                 cJSON_GetObjectItemCaseSensitive(root, "initializer_factor"));

    config_read_ffn(root, path, cfg);
    config_read_head_tokens(root, path, cfg);
    cJSON_Delete(root);
    free(text);
}

// ---- config.json writing ------------------------------------------------------------

// Shortest decimal that reads back as the same float ("0.1", "1e-06"), so the file
// looks like the one Python writes and a save/load round trip is exact.
static void format_float(float v, char *out, size_t cap) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(out, cap, "%.*g", prec, (double)v);
        if (strtof(out, NULL) == v) break;
    }
    // JSON needs a digit after the point for a float-looking value; keep "1.0" style.
    if (!strpbrk(out, ".eEn")) {
        size_t n = strlen(out);
        if (n + 2 < cap) memcpy(out + n, ".0", 3);
    }
}

static void json_escape(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void t5_config_save_json(const T5Config *c, const char *path) {
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    char drop[32], eps[32], factor[32];
    format_float(c->dropout_rate, drop, sizeof drop);
    format_float(c->layer_norm_epsilon, eps, sizeof eps);
    format_float(c->initializer_factor, factor, sizeof factor);
    // Keys sorted, two-space indent: the layout of PretrainedConfig.to_json_string().
    fprintf(f, "{\n");
    fprintf(f, "  \"architectures\": [\n    \"T5ForConditionalGeneration\"\n  ],\n");
    fprintf(f, "  \"classifier_dropout\": 0.0,\n");
    fprintf(f, "  \"d_ff\": %d,\n", c->d_ff);
    fprintf(f, "  \"d_kv\": %d,\n", c->d_kv);
    fprintf(f, "  \"d_model\": %d,\n", c->d_model);
    fprintf(f, "  \"decoder_start_token_id\": %d,\n", c->decoder_start_token_id);
    fprintf(f, "  \"dense_act_fn\": \"%s\",\n", act_name(c->act));
    fprintf(f, "  \"dropout_rate\": %s,\n", drop);
    fprintf(f, "  \"eos_token_id\": %d,\n", c->eos_token_id);
    fprintf(f, "  \"feed_forward_proj\": ");
    json_escape(f, c->feed_forward_proj);
    fprintf(f, ",\n");
    fprintf(f, "  \"initializer_factor\": %s,\n", factor);
    fprintf(f, "  \"is_encoder_decoder\": true,\n");
    fprintf(f, "  \"is_gated_act\": %s,\n", c->is_gated ? "true" : "false");
    fprintf(f, "  \"layer_norm_epsilon\": %s,\n", eps);
    fprintf(f, "  \"model_type\": \"t5\",\n");
    fprintf(f, "  \"num_decoder_layers\": %d,\n", c->num_decoder_layers);
    fprintf(f, "  \"num_heads\": %d,\n", c->num_heads);
    fprintf(f, "  \"num_layers\": %d,\n", c->num_layers);
    fprintf(f, "  \"pad_token_id\": %d,\n", c->pad_token_id);
    fprintf(f, "  \"relative_attention_max_distance\": %d,\n", c->relative_attention_max_distance);
    fprintf(f, "  \"relative_attention_num_buckets\": %d,\n", c->relative_attention_num_buckets);
    fprintf(f, "  \"scale_decoder_outputs\": %s,\n", c->scale_decoder_outputs ? "true" : "false");
    fprintf(f, "  \"tie_word_embeddings\": %s,\n", c->tie_word_embeddings ? "true" : "false");
    fprintf(f, "  \"use_cache\": true,\n");
    fprintf(f, "  \"vocab_size\": %d\n", c->vocab_size);
    fprintf(f, "}\n");
    if (ferror(f)) t5_fail("writing '%s' failed: %s", af.tmp_path, strerror(errno));
    atomic_commit(&af);
}

int t5_config_diff(const T5Config *a, const T5Config *b, char *diff, size_t cap) {
    const struct {
        const char *key;
        long long x, y;
    } ints[] = {
        {"vocab_size", a->vocab_size, b->vocab_size},
        {"d_model", a->d_model, b->d_model},
        {"d_kv", a->d_kv, b->d_kv},
        {"d_ff", a->d_ff, b->d_ff},
        {"num_layers", a->num_layers, b->num_layers},
        {"num_decoder_layers", a->num_decoder_layers, b->num_decoder_layers},
        {"num_heads", a->num_heads, b->num_heads},
        {"relative_attention_num_buckets", a->relative_attention_num_buckets, b->relative_attention_num_buckets},
        {"relative_attention_max_distance", a->relative_attention_max_distance, b->relative_attention_max_distance},
        {"is_gated_act", a->is_gated, b->is_gated},
        {"activation", a->act, b->act},
        {"untied lm_head.weight", a->untied_lm_head, b->untied_lm_head},
        {"scale_decoder_outputs", a->scale_decoder_outputs, b->scale_decoder_outputs},
        {"pad_token_id", a->pad_token_id, b->pad_token_id},
        {"eos_token_id", a->eos_token_id, b->eos_token_id},
        {"decoder_start_token_id", a->decoder_start_token_id, b->decoder_start_token_id},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].x != ints[i].y) {
            snprintf(diff, cap, "%s %lld vs %lld", ints[i].key, ints[i].x, ints[i].y);
            return 1;
        }
    if (a->layer_norm_epsilon != b->layer_norm_epsilon) {
        snprintf(diff, cap, "layer_norm_epsilon %g vs %g", (double)a->layer_norm_epsilon, (double)b->layer_norm_epsilon);
        return 1;
    }
    return 0;
}
