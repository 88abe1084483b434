// tests/test_config.c: presets and config.json round trips and errors, the parameter
// layout (HF names, order, shapes, known parameter counts) and the random init, without
// a GPU. Error paths run in a forked child (tests/test_fork.h).
#include <dirent.h>
#include <float.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/check.h"
#include "../model/config.h"
#include "../model/hf_dir.h"
#include "../model/params.h"
#include "../formats/safetensors.h"
#include "test.h"
#include "test_io_util.h"

static const char *ALL_PRESETS[] = {
    "t5-small",          "t5-base",           "t5-large",           "t5-3b",              "t5-11b",
    "google/t5-v1_1-small", "google/t5-v1_1-base", "google/t5-v1_1-large", "google/t5-v1_1-xl", "google/t5-v1_1-xxl",
    "google/flan-t5-small", "google/flan-t5-base", "google/flan-t5-large", "google/flan-t5-xl", "google/flan-t5-xxl",
};
#define N_PRESETS ((int)(sizeof ALL_PRESETS / sizeof ALL_PRESETS[0]))

static void test_presets(void) {
    char *path = tmp_path("preset_config.json");
    int all_ok = 1;
    for (int i = 0; i < N_PRESETS; i++) {
        T5Config c, back;
        if (!t5_config_preset(ALL_PRESETS[i], &c)) {
            printf("       preset %s unknown\n", ALL_PRESETS[i]);
            all_ok = 0;
            continue;
        }
        t5_config_save_json(&c, path);
        t5_config_load_json(path, &back);
        if (!same_config(&c, &back)) {
            printf("       preset %s: config.json round trip differs\n", ALL_PRESETS[i]);
            all_ok = 0;
        }
    }
    test_check(all_ok, "every preset (15) saves to config.json and loads back equal");
    free(path);

    T5Config a, b;
    int alias_ok = 1;
    const char *pairs[][2] = {{"t5-small", "google-t5/t5-small"},
                              {"t5-11b", "google-t5/t5-11b"},
                              {"flan-t5-small", "google/flan-t5-small"},
                              {"t5-v1_1-xl", "google/t5-v1_1-xl"}};
    for (int i = 0; i < 4; i++)
        alias_ok &= t5_config_preset(pairs[i][0], &a) && t5_config_preset(pairs[i][1], &b) && same_config(&a, &b);
    test_check(alias_ok, "presets accept names with and without the google-t5/ or google/ prefix");
    test_check(!t5_config_preset("t5-tiny", &a) && !t5_config_preset("google/t5-small", &a) &&
                   !t5_config_preset("", &a) && !t5_config_preset("google-t5/flan-t5-small", &a),
               "unknown names are not presets (t5-tiny, google/t5-small, empty, wrong prefix)");
    test_check(strstr(t5_config_preset_names(), "t5-small") && strstr(t5_config_preset_names(), "google/flan-t5-xxl"),
               "t5_config_preset_names lists the presets");

    t5_config_preset("t5-small", &a);
    test_check(a.vocab_size == 32128 && a.d_model == 512 && a.d_kv == 64 && a.d_ff == 2048 && a.num_layers == 6 &&
                   a.num_decoder_layers == 6 && a.num_heads == 8 && a.act == ACT_RELU && !a.is_gated &&
                   a.tie_word_embeddings && a.scale_decoder_outputs && !a.untied_lm_head &&
                   a.relative_attention_num_buckets == 32 && a.relative_attention_max_distance == 128 &&
                   a.dropout_rate == 0.1f && a.layer_norm_epsilon == 1e-6f && a.initializer_factor == 1.0f &&
                   a.pad_token_id == 0 && a.eos_token_id == 1 && a.decoder_start_token_id == 0,
               "t5-small preset: hub values, relu, tied and scaled head");
    t5_config_preset("t5-3b", &a);
    t5_config_preset("t5-11b", &b);
    test_check(a.d_model == 1024 && a.d_kv == 128 && a.d_ff == 16384 && a.num_heads == 32 && a.num_layers == 24 &&
                   b.d_kv == 128 && b.d_ff == 65536 && b.num_heads == 128,
               "t5-3b / t5-11b presets: d_kv 128, inner width != d_model");
    t5_config_preset("google/flan-t5-small", &a);
    test_check(a.d_model == 512 && a.d_ff == 1024 && a.num_layers == 8 && a.num_decoder_layers == 8 &&
                   a.num_heads == 6 && a.is_gated && a.act == ACT_GELU_NEW &&
                   !strcmp(a.feed_forward_proj, "gated-gelu") && !a.tie_word_embeddings && !a.scale_decoder_outputs &&
                   a.untied_lm_head,
               "flan-t5-small preset: 8 layers, 6 heads, d_ff 1024, gated-gelu (gelu_new), untied, unscaled");
    t5_config_preset("google/t5-v1_1-xxl", &a);
    test_check(a.d_model == 4096 && a.d_ff == 10240 && a.num_heads == 64 && a.untied_lm_head,
               "t5-v1_1-xxl preset: 4096 / 10240 / 64 heads");
}

static void test_parse_ffn(void) {
    struct {
        const char *s;
        int ok;
        Activation act;
        int gated;
    } c[] = {
        {"relu", 1, ACT_RELU, 0},          {"gelu", 1, ACT_GELU, 0},           {"gelu_new", 1, ACT_GELU_NEW, 0},
        {"silu", 1, ACT_SILU, 0},          {"gated-gelu", 1, ACT_GELU_NEW, 1}, {"gated-relu", 1, ACT_RELU, 1},
        {"gated-silu", 1, ACT_SILU, 1},    {"gated-gelu_new", 1, ACT_GELU_NEW, 1}, {"gated-foo", 0, ACT_RELU, 0},
        {"swiglu", 0, ACT_RELU, 0},        {"gated-", 0, ACT_RELU, 0},         {"", 0, ACT_RELU, 0},
        {"relu-gated", 0, ACT_RELU, 0},    {"gated-gated-gelu", 0, ACT_RELU, 0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        Activation act = ACT_SILU;
        int gated = -1;
        int ok = t5_config_parse_ffn(c[i].s, &act, &gated);
        if (ok != c[i].ok || (ok && (act != c[i].act || gated != c[i].gated))) {
            printf("       parse_ffn(\"%s\") = %d act %d gated %d\n", c[i].s, ok, act, gated);
            bad++;
        }
    }
    test_check(bad == 0, "t5_config_parse_ffn: 8 accepted forms (gated-gelu -> gelu_new), 6 rejected");
}

// Defaults and every key of config.json.
static void test_config_json(void) {
    char *p = tmp_path("config.json");
    T5Config c;
    write_text(p, "{\"vocab_size\": 100, \"d_model\": 16, \"d_kv\": 4, \"d_ff\": 32, \"num_layers\": 3, "
                  "\"num_heads\": 2}");
    t5_config_load_json(p, &c);
    test_check(c.num_decoder_layers == 3 && c.act == ACT_RELU && !c.is_gated && !strcmp(c.feed_forward_proj, "relu") &&
                   c.tie_word_embeddings && c.scale_decoder_outputs && !c.untied_lm_head && c.dropout_rate == 0.1f &&
                   c.layer_norm_epsilon == 1e-6f && c.initializer_factor == 1.0f &&
                   c.relative_attention_num_buckets == 32 && c.relative_attention_max_distance == 128 &&
                   c.pad_token_id == 0 && c.eos_token_id == 1 && c.decoder_start_token_id == 0 &&
                   !strcmp(c.name, p),
               "config.json with only the required keys gets T5Config's defaults");

    // A transformers 5 config: tied head without output scaling.
    write_text(p, "{\"vocab_size\": 100, \"d_model\": 16, \"d_kv\": 4, \"d_ff\": 32, \"num_layers\": 3, "
                  "\"num_decoder_layers\": 2, \"num_heads\": 2, \"tie_word_embeddings\": true, "
                  "\"scale_decoder_outputs\": false, \"dropout_rate\": 0.0, \"feed_forward_proj\": \"gated-silu\", "
                  "\"decoder_start_token_id\": 5, \"pad_token_id\": 3, \"eos_token_id\": 4, "
                  "\"relative_attention_num_buckets\": 8, \"relative_attention_max_distance\": 20, "
                  "\"layer_norm_epsilon\": 1e-5, \"initializer_factor\": 0.5, \"model_type\": \"t5\"}");
    t5_config_load_json(p, &c);
    test_check(c.num_decoder_layers == 2 && c.tie_word_embeddings && !c.scale_decoder_outputs && !c.untied_lm_head &&
                   c.dropout_rate == 0.0f && c.act == ACT_SILU && c.is_gated && c.decoder_start_token_id == 5 &&
                   c.pad_token_id == 3 && c.eos_token_id == 4 && c.relative_attention_num_buckets == 8 &&
                   c.relative_attention_max_distance == 20 && c.layer_norm_epsilon == 1e-5f &&
                   c.initializer_factor == 0.5f,
               "config.json: every key read (transformers-5 tie=true, scale_decoder_outputs=false)");
    write_text(p, "{\"vocab_size\": 100, \"d_model\": 16, \"d_kv\": 4, \"d_ff\": 32, \"num_layers\": 3, "
                  "\"num_heads\": 2, \"pad_token_id\": 7}");
    t5_config_load_json(p, &c);
    test_check(c.decoder_start_token_id == 7, "decoder_start_token_id defaults to pad_token_id");
    free(p);
}

// The hub's own config.json files load equal to the presets.
static void test_config_json_hub(void) {
    char *p = tmp_path("config.json");
    T5Config c;
    // The hub's google/flan-t5-large config.json, verbatim.
    write_text(p, "{\n  \"architectures\": [\n    \"T5ForConditionalGeneration\"\n  ],\n  \"d_ff\": 2816,\n"
                  "  \"d_kv\": 64,\n  \"d_model\": 1024,\n  \"decoder_start_token_id\": 0,\n"
                  "  \"dense_act_fn\": \"gelu_new\",\n  \"dropout_rate\": 0.1,\n  \"eos_token_id\": 1,\n"
                  "  \"feed_forward_proj\": \"gated-gelu\",\n  \"initializer_factor\": 1.0,\n"
                  "  \"is_encoder_decoder\": true,\n  \"is_gated_act\": true,\n  \"layer_norm_epsilon\": 1e-06,\n"
                  "  \"model_type\": \"t5\",\n  \"n_positions\": 512,\n  \"num_decoder_layers\": 24,\n"
                  "  \"num_heads\": 16,\n  \"num_layers\": 24,\n  \"output_past\": true,\n  \"pad_token_id\": 0,\n"
                  "  \"relative_attention_max_distance\": 128,\n  \"relative_attention_num_buckets\": 32,\n"
                  "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"float32\",\n"
                  "  \"transformers_version\": \"4.23.1\",\n  \"use_cache\": true,\n  \"vocab_size\": 32128\n}\n");
    T5Config want;
    t5_config_load_json(p, &c);
    t5_config_preset("google/flan-t5-large", &want);
    test_check(same_config(&c, &want), "hub flan-t5-large config.json loads equal to the preset");
    // The hub's t5-small config.json (2019: no feed_forward_proj, no tie key).
    write_text(p, "{\"d_ff\": 2048, \"d_kv\": 64, \"d_model\": 512, \"dropout_rate\": 0.1, \"finetuning_task\": null,"
                  " \"initializer_factor\": 1.0, \"is_decoder\": false, \"layer_norm_epsilon\": 1e-06,"
                  " \"n_positions\": 512, \"num_heads\": 8, \"num_labels\": 2, \"num_layers\": 6,"
                  " \"output_attentions\": false, \"output_hidden_states\": false, \"output_past\": true,"
                  " \"pruned_heads\": {}, \"relative_attention_num_buckets\": 32, \"torchscript\": false,"
                  " \"use_bfloat16\": false, \"vocab_size\": 32128}");
    t5_config_load_json(p, &c);
    t5_config_preset("t5-small", &want);
    test_check(same_config(&c, &want), "hub t5-small config.json (old style) loads equal to the preset");
    free(p);
}

// What we write: transformers-5 keys, parseable, no temp file left.
static void test_config_json_save(void) {
    char *p = tmp_path("config.json");
    T5Config c;
    t5_config_preset("google/flan-t5-base", &c);
    t5_config_save_json(&c, p);
    size_t len;
    char *text = read_text_file(p, &len);
    cJSON *root = cJSON_Parse(text);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    int ok = root && cJSON_IsArray(arch) &&
             !strcmp(cJSON_GetArrayItem(arch, 0)->valuestring, "T5ForConditionalGeneration") &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(root, "model_type")->valuestring, "t5") &&
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "is_encoder_decoder")) &&
             cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings")) &&
             cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "scale_decoder_outputs")) &&
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "is_gated_act")) &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(root, "dense_act_fn")->valuestring, "gelu_new") &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(root, "feed_forward_proj")->valuestring, "gated-gelu") &&
             cJSON_GetObjectItemCaseSensitive(root, "relative_attention_max_distance")->valueint == 128 &&
             cJSON_GetObjectItemCaseSensitive(root, "d_ff")->valueint == 2048;
    test_check(ok, "saved config.json has architectures, model_type, is_encoder_decoder, tie/scale, dense_act_fn, "
                   "is_gated_act");
    test_check(strstr(text, "\"dropout_rate\": 0.1,") && strstr(text, "\"layer_norm_epsilon\": 1e-06,"),
               "saved floats are short (0.1, 1e-06), as Python writes them");
    char *tmp = tmp_path("config.json.tmp");
    test_check(access(tmp, F_OK) != 0, "config save leaves no temp file");
    free(tmp);
    cJSON_Delete(root);
    free(text);
    free(p);
}

typedef struct {
    const char *name, *json, *needle;
} CfgCase;

static void do_load_cfg(const void *arg) {
    T5Config c;
    t5_config_load_json((const char *)arg, &c);
}

#define REQ "\"vocab_size\": 100, \"d_ff\": 32, \"num_layers\": 2, \"num_heads\": 2, \"d_kv\": 4"
static void test_config_errors(void) {
    CfgCase cases[] = {
        {"truncated JSON", "{\"d_model\": 16, \"d_kv\": ", "malformed JSON: unexpected end of file at byte 24"},
        {"malformed JSON", "{\"d_model\": 16, \"d_kv\": x}", "malformed JSON at byte 24 of 26 (near \"x}\")"},
        {"trailing garbage", "{\"d_model\": 16} x", "malformed JSON at byte"},
        {"not an object", "[1, 2]", "JSON object"},
        {"missing d_model", "{" REQ "}", "missing required key \"d_model\""},
        {"d_model a string", "{" REQ ", \"d_model\": \"abc\"}", "key \"d_model\": expected a positive integer"},
        {"d_model negative", "{" REQ ", \"d_model\": -4}", "key \"d_model\""},
        {"d_model 0", "{" REQ ", \"d_model\": 0}", "key \"d_model\""},
        {"d_model 3.5", "{" REQ ", \"d_model\": 3.5}", "found 3.5"},
        {"d_model huge", "{" REQ ", \"d_model\": 1e12}", "key \"d_model\""},
        {"num_decoder_layers 0", "{" REQ ", \"d_model\": 16, \"num_decoder_layers\": 0}", "num_decoder_layers"},
        {"bad feed_forward_proj", "{" REQ ", \"d_model\": 16, \"feed_forward_proj\": \"gated-foo\"}",
         "key \"feed_forward_proj\": expected one of relu"},
        {"feed_forward_proj a number", "{" REQ ", \"d_model\": 16, \"feed_forward_proj\": 3}", "feed_forward_proj"},
        {"dropout 1.0", "{" REQ ", \"d_model\": 16, \"dropout_rate\": 1.0}", "key \"dropout_rate\""},
        {"dropout negative", "{" REQ ", \"d_model\": 16, \"dropout_rate\": -0.1}", "key \"dropout_rate\""},
        {"dropout a string", "{" REQ ", \"d_model\": 16, \"dropout_rate\": \"0.1\"}", "key \"dropout_rate\""},
        {"eps 0", "{" REQ ", \"d_model\": 16, \"layer_norm_epsilon\": 0}", "key \"layer_norm_epsilon\""},
        {"tie as string", "{" REQ ", \"d_model\": 16, \"tie_word_embeddings\": \"yes\"}", "tie_word_embeddings"},
        {"dense_act_fn contradiction", "{" REQ ", \"d_model\": 16, \"feed_forward_proj\": \"gated-gelu\", "
                                       "\"dense_act_fn\": \"silu\"}", "key \"dense_act_fn\""},
        {"is_gated_act contradiction", "{" REQ ", \"d_model\": 16, \"feed_forward_proj\": \"relu\", "
                                       "\"is_gated_act\": true}", "key \"is_gated_act\""},
        {"model_type bart", "{" REQ ", \"d_model\": 16, \"model_type\": \"bart\"}", "key \"model_type\""},
        {"pad id beyond vocab", "{" REQ ", \"d_model\": 16, \"pad_token_id\": 100}", "key \"pad_token_id\""},
        {"3 buckets", "{" REQ ", \"d_model\": 16, \"relative_attention_num_buckets\": 3}",
         "relative_attention_num_buckets"},
        {"max_distance too small", "{" REQ ", \"d_model\": 16, \"relative_attention_max_distance\": 16}",
         "relative_attention_max_distance"},
    };
    char *p = tmp_path("bad_config.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(p, cases[i].json);
        char what[80];
        snprintf(what, sizeof what, "config %s", cases[i].name);
        expect_error(what, do_load_cfg, p, cases[i].needle);
    }
    char *missing = tmp_path("no_such_dir/config.json");
    expect_error("config missing file", do_load_cfg, missing, "cannot open config.json (No such file or directory)");
    free(missing);
    free(p);
}

// ---- parameter layout -----------------------------------------------------------------------


static void test_layout_counts(void) {
    struct {
        const char *name;
        size_t want;
    } c[] = {
        // t5-*: num_parameters() of T5ForConditionalGeneration (tied head); flan: untied.
        {"t5-small", 60506624},         {"t5-base", 222903552},         {"t5-large", 737668096},
        {"t5-3b", 2851598336},          {"t5-11b", 11307321344ull},     {"google/flan-t5-small", 76961152},
        {"google/flan-t5-base", 247577856}, {"google/flan-t5-large", 783150080}, {"google/flan-t5-xl", 2849757184},
        {"google/flan-t5-xxl", 11135332352ull}, {"google/t5-v1_1-small", 76961152},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        T5Config cfg;
        ParamLayout lay;
        t5_config_preset(c[i].name, &cfg);
        params_build_layout(&cfg, &lay);
        char msg[160];
        snprintf(msg, sizeof msg, "%-22s parameters %15zu (want %zu)", c[i].name, lay.total, c[i].want);
        test_check(lay.total == c[i].want, msg);
        params_free_layout(&lay);
    }
}

// Shapes, offsets, kinds, no_decay of every tensor of the layout.
static void check_layout_shapes(const T5Config *cfg, const ParamLayout *lay) {
    size_t off = 0;
    int contiguous = 1, shapes = 1, decay = 1;
    int64_t D = cfg->d_model, I = (int64_t)cfg->num_heads * cfg->d_kv, F = cfg->d_ff, V = cfg->vocab_size;
    for (int i = 0; i < lay->count; i++) {
        const ParamSpec *s = &lay->specs[i];
        contiguous &= s->offset == off && s->numel == (size_t)s->shape[0] * (size_t)(s->ndim == 2 ? s->shape[1] : 1);
        off += s->numel;
        const char *leaf = strrchr(s->name, '.');
        while (leaf > s->name && leaf[-1] != '.') leaf--;
        int64_t e0 = -1, e1 = -1;
        if (!strncmp(leaf, "q.", 2) || !strncmp(leaf, "k.", 2) || !strncmp(leaf, "v.", 2)) e0 = I, e1 = D;
        else if (!strncmp(leaf, "o.", 2)) e0 = D, e1 = I;
        else if (!strncmp(leaf, "wi", 2)) e0 = F, e1 = D;
        else if (!strncmp(leaf, "wo.", 3)) e0 = D, e1 = F;
        else if (!strncmp(leaf, "relative_attention_bias.", 24)) e0 = cfg->relative_attention_num_buckets, e1 = cfg->num_heads;
        else if (strstr(s->name, "layer_norm")) e0 = D, e1 = 0;
        else e0 = V, e1 = D;  // shared, lm_head
        shapes &= s->shape[0] == e0 && (e1 ? s->ndim == 2 && s->shape[1] == e1 : s->ndim == 1);
        int want_no_decay = strstr(s->name, "layer_norm") || strstr(s->name, "bias");
        decay &= s->no_decay == want_no_decay;
        ParamKind k = strstr(s->name, "layer_norm") ? PARAM_NORM
                      : strstr(s->name, "relative_attention_bias") ? PARAM_RELBIAS
                      : !strcmp(s->name, "shared.weight") ? PARAM_EMBEDDING
                                                           : PARAM_LINEAR;
        decay &= s->kind == k;
    }
    test_check(contiguous && off == lay->total, "layout: offsets contiguous from 0, total = sum of numel");
    test_check(shapes, "layout: q,k,v (H*dk, D), o (D, H*dk), wi* (F, D), wo (D, F), relbias (buckets, H), norms (D)");
    test_check(decay, "layout: no_decay on norms and relative_attention_bias (HF Trainer's \"bias\" name rule), kinds");
}

// The block offset tables against the name table.
static void check_layout_offsets(const ParamLayout *lay) {
    int offs = lay->shared == lay->specs[params_find(lay, "shared.weight")].offset &&
               lay->lm_head == lay->specs[params_find(lay, "lm_head.weight")].offset &&
               lay->enc[1].self.k == lay->specs[params_find(lay, "encoder.block.1.layer.0.SelfAttention.k.weight")].offset &&
               lay->enc[0].self.has_relbias && !lay->enc[1].self.has_relbias &&
               lay->enc[0].self.relbias ==
                   lay->specs[params_find(lay, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")].offset &&
               lay->dec[1].cross.o == lay->specs[params_find(lay, "decoder.block.1.layer.1.EncDecAttention.o.weight")].offset &&
               !lay->dec[0].cross.has_relbias && lay->dec[0].self.has_relbias &&
               lay->dec[1].ffn.wi_1 == lay->specs[params_find(lay, "decoder.block.1.layer.2.DenseReluDense.wi_1.weight")].offset &&
               lay->dec[1].cross.ln == lay->specs[params_find(lay, "decoder.block.1.layer.1.layer_norm.weight")].offset &&
               lay->enc_final_ln == lay->specs[params_find(lay, "encoder.final_layer_norm.weight")].offset &&
               lay->dec_final_ln == lay->specs[params_find(lay, "decoder.final_layer_norm.weight")].offset &&
               params_find(lay, "nope") == -1;
    test_check(offs, "layout: block offset tables agree with the name table; params_find");
}

static void test_layout_order(void) {
    T5Config cfg = tiny_config(1, 1);
    cfg.num_layers = 2;
    cfg.num_decoder_layers = 2;
    ParamLayout lay;
    params_build_layout(&cfg, &lay);
    const char *want[] = {
        "shared.weight",
        "encoder.block.0.layer.0.SelfAttention.q.weight",
        "encoder.block.0.layer.0.SelfAttention.k.weight",
        "encoder.block.0.layer.0.SelfAttention.v.weight",
        "encoder.block.0.layer.0.SelfAttention.o.weight",
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        "encoder.block.0.layer.0.layer_norm.weight",
        "encoder.block.0.layer.1.DenseReluDense.wi_0.weight",
        "encoder.block.0.layer.1.DenseReluDense.wi_1.weight",
        "encoder.block.0.layer.1.DenseReluDense.wo.weight",
        "encoder.block.0.layer.1.layer_norm.weight",
        "encoder.block.1.layer.0.SelfAttention.q.weight",
        "encoder.block.1.layer.0.SelfAttention.k.weight",
        "encoder.block.1.layer.0.SelfAttention.v.weight",
        "encoder.block.1.layer.0.SelfAttention.o.weight",
        "encoder.block.1.layer.0.layer_norm.weight",
        "encoder.block.1.layer.1.DenseReluDense.wi_0.weight",
        "encoder.block.1.layer.1.DenseReluDense.wi_1.weight",
        "encoder.block.1.layer.1.DenseReluDense.wo.weight",
        "encoder.block.1.layer.1.layer_norm.weight",
        "encoder.final_layer_norm.weight",
        "decoder.block.0.layer.0.SelfAttention.q.weight",
        "decoder.block.0.layer.0.SelfAttention.k.weight",
        "decoder.block.0.layer.0.SelfAttention.v.weight",
        "decoder.block.0.layer.0.SelfAttention.o.weight",
        "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        "decoder.block.0.layer.0.layer_norm.weight",
        "decoder.block.0.layer.1.EncDecAttention.q.weight",
        "decoder.block.0.layer.1.EncDecAttention.k.weight",
        "decoder.block.0.layer.1.EncDecAttention.v.weight",
        "decoder.block.0.layer.1.EncDecAttention.o.weight",
        "decoder.block.0.layer.1.layer_norm.weight",
        "decoder.block.0.layer.2.DenseReluDense.wi_0.weight",
        "decoder.block.0.layer.2.DenseReluDense.wi_1.weight",
        "decoder.block.0.layer.2.DenseReluDense.wo.weight",
        "decoder.block.0.layer.2.layer_norm.weight",
        "decoder.block.1.layer.0.SelfAttention.q.weight",
        "decoder.block.1.layer.0.SelfAttention.k.weight",
        "decoder.block.1.layer.0.SelfAttention.v.weight",
        "decoder.block.1.layer.0.SelfAttention.o.weight",
        "decoder.block.1.layer.0.layer_norm.weight",
        "decoder.block.1.layer.1.EncDecAttention.q.weight",
        "decoder.block.1.layer.1.EncDecAttention.k.weight",
        "decoder.block.1.layer.1.EncDecAttention.v.weight",
        "decoder.block.1.layer.1.EncDecAttention.o.weight",
        "decoder.block.1.layer.1.layer_norm.weight",
        "decoder.block.1.layer.2.DenseReluDense.wi_0.weight",
        "decoder.block.1.layer.2.DenseReluDense.wi_1.weight",
        "decoder.block.1.layer.2.DenseReluDense.wo.weight",
        "decoder.block.1.layer.2.layer_norm.weight",
        "decoder.final_layer_norm.weight",
        "lm_head.weight",
    };
    int n = (int)(sizeof want / sizeof want[0]);
    int ok = lay.count == n;
    for (int i = 0; ok && i < n; i++)
        if (strcmp(lay.specs[i].name, want[i])) {
            printf("       spec %d is %s, want %s\n", i, lay.specs[i].name, want[i]);
            ok = 0;
        }
    test_check(ok, "layout: HF state-dict names in state-dict order (gated, untied, 2+2 blocks)");

    check_layout_shapes(&cfg, &lay);
    check_layout_offsets(&lay);
    params_free_layout(&lay);
}

// relu, tied head: wi instead of wi_0/wi_1, no lm_head.weight.
static void test_layout_tied(void) {
    ParamLayout lay;
    T5Config cfg = tiny_config(0, 0);
    params_build_layout(&cfg, &lay);
    test_check(params_find(&lay, "lm_head.weight") == -1 && lay.lm_head == lay.shared &&
                   params_find(&lay, "encoder.block.0.layer.1.DenseReluDense.wi.weight") >= 0 &&
                   params_find(&lay, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight") == -1 &&
                   !strcmp(lay.specs[lay.count - 1].name, "decoder.final_layer_norm.weight"),
               "layout (relu, tied): wi instead of wi_0/wi_1, no lm_head.weight, lm_head offset = shared");
    params_free_layout(&lay);
}

static void test_init(void) {
    T5Config cfg;
    t5_config_preset("google/flan-t5-small", &cfg);
    cfg.vocab_size = 1000;
    cfg.d_model = 256;
    cfg.d_kv = 32;
    cfg.num_heads = 8;
    cfg.d_ff = 1024;
    cfg.num_layers = 1;
    cfg.num_decoder_layers = 1;
    ParamLayout lay;
    params_build_layout(&cfg, &lay);
    float *p1 = mallocCheck(lay.total * sizeof(float)), *p2 = mallocCheck(lay.total * sizeof(float));
    params_init_random(&cfg, &lay, p1, 1234);
    params_init_random(&cfg, &lay, p2, 1234);
    test_check(memcmp(p1, p2, lay.total * sizeof(float)) == 0, "init: same seed, same values");
    params_init_random(&cfg, &lay, p2, 1235);
    size_t same = 0;
    for (size_t i = 0; i < lay.total; i++) same += p1[i] == p2[i];
    size_t norms = 0;
    for (int i = 0; i < lay.count; i++) norms += lay.specs[i].kind == PARAM_NORM ? lay.specs[i].numel : 0;
    test_check(same == norms, "init: another seed changes every random value (norms stay 1)");

    double D = cfg.d_model, dk = cfg.d_kv, H = cfg.num_heads, F = cfg.d_ff;
    int ok = 1;
    for (int i = 0; i < lay.count; i++) {
        const ParamSpec *s = &lay.specs[i];
        const float *x = p1 + s->offset;
        const char *nm = s->name;
        double want;
        if (s->kind == PARAM_NORM) {
            for (size_t j = 0; j < s->numel; j++) ok &= x[j] == 1.0f;
            continue;
        }
        if (strstr(nm, ".q.")) want = 1 / sqrt(D * dk);
        else if (strstr(nm, ".k.") || strstr(nm, ".v.")) want = 1 / sqrt(D);
        else if (strstr(nm, ".o.")) want = 1 / sqrt(H * dk);
        else if (strstr(nm, "relative_attention_bias")) want = 1 / sqrt(D);
        else if (strstr(nm, ".wi")) want = 1 / sqrt(D);
        else if (strstr(nm, ".wo.")) want = 1 / sqrt(F);
        else want = 1.0;  // shared, lm_head
        double sum = 0, sq = 0;
        for (size_t j = 0; j < s->numel; j++) sum += x[j], sq += (double)x[j] * x[j];
        double mean = sum / s->numel, sd = sqrt(sq / s->numel - mean * mean);
        double tol = 5.0 / sqrt((double)s->numel);  // ~5 sigma of the sample std's relative error
        if (fabs(sd / want - 1) > tol + 0.01 || fabs(mean) > 5 * want / sqrt((double)s->numel)) {
            printf("       %s: std %.5f want %.5f, mean %.5f\n", nm, sd, want, mean);
            ok = 0;
        }
    }
    test_check(ok, "init: per-tensor mean ~0 and std as HF _init_weights (q (D*dk)^-.5, k/v/wi/relbias D^-.5, "
                   "o (H*dk)^-.5, wo F^-.5, shared/lm_head 1, norms 1)");
    cfg.initializer_factor = 2.0f;
    params_init_random(&cfg, &lay, p2, 1234);
    int scaled = 1;
    for (size_t i = 0; i < lay.total; i++) scaled &= p2[i] == 2.0f * p1[i];
    test_check(scaled, "init: initializer_factor 2 doubles every value (norms = 2)");
    cfg.initializer_factor = 1.0f;
    // any range alone (a ZeRO partition) gives the whole init's values: ranges that start and
    // end inside tensors, at odd and even elements (half a Box-Muller pair), on the host and
    // through the CPU backend's init_random (zero_init_random's path)
    const size_t cuts[][2] = {{0, lay.total}, {1, 2}, {3, lay.total / 3 + 1}, {lay.total / 3 + 1, 2 * lay.total / 3},
                              {2 * lay.total / 3, lay.total - 1}, {lay.total - 1, lay.total}};
    int ranges_ok = 1, backend_ok = 1;
    const Backend *be = backend_cpu();
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        size_t lo = cuts[c][0], hi = cuts[c][1];
        memset(p2, 0xFF, lay.total * sizeof(float));
        params_init_random_range(&cfg, &lay, 1234, lo, hi, p2);
        ranges_ok &= memcmp(p2, p1 + lo, (hi - lo) * sizeof(float)) == 0;
        float *d = be->alloc((hi - lo) * sizeof(float));
        params_init_random_backend(be, &cfg, &lay, 1234, lo, hi, d, DTYPE_F32);
        backend_ok &= memcmp(d, p1 + lo, (hi - lo) * sizeof(float)) == 0;
        be->free(d);
    }
    test_check(ranges_ok, "init: params_init_random_range of 6 ranges (odd starts, inside tensors) = the whole init's slices, bitwise");
    test_check(backend_ok, "init: the CPU backend's init_random (params_init_random_backend) = the host init, bitwise");
    free(p1);
    free(p2);
    params_free_layout(&lay);
}


int main(void) {
    if (!io_tmp_begin("test_config")) return 2;
    test_presets();
    test_parse_ffn();
    test_config_json();
    test_config_json_hub();
    test_config_json_save();
    test_config_errors();
    test_layout_counts();
    test_layout_order();
    test_layout_tied();
    test_init();
    rm_rf(g_tmp);
    return test_summary();
}
