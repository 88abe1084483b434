// tests/test_hf_dir.c: Hugging Face model directories without a GPU: save and load round
// trips in every dtype (tied and untied heads), aliases of the shared embedding, shards,
// and their errors. Error paths run in a forked child (tests/test_fork.h).
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

// ---- Hugging Face directories ------------------------------------------------------------------

static float *random_params(const T5Config *cfg, const ParamLayout *lay, uint64_t seed) {
    float *p = mallocCheck(lay->total * sizeof(float));
    params_init_random(cfg, lay, p, seed);
    // Norm weights are all 1 after init; make them distinct so a mix-up would show.
    for (int i = 0; i < lay->count; i++)
        if (lay->specs[i].kind == PARAM_NORM)
            for (size_t j = 0; j < lay->specs[i].numel; j++) p[lay->specs[i].offset + j] = 1.0f + 0.01f * (float)(i + j);
    return p;
}

static float round_to(StDtype d, float x) {
    return d == ST_F16 ? st_f16_to_f32(st_f32_to_f16(x)) : d == ST_BF16 ? st_bf16_to_f32(st_f32_to_bf16(x)) : x;
}

static void test_hf_roundtrip(void) {
    for (int untied = 0; untied <= 1; untied++) {
        for (int di = 0; di < 3; di++) {
            StDtype dt = (StDtype[]){ST_F32, ST_F16, ST_BF16}[di];
            T5Config cfg = tiny_config(untied, untied);
            ParamLayout lay;
            params_build_layout(&cfg, &lay);
            float *p = random_params(&cfg, &lay, 7 + (uint64_t)di);
            char name[64];
            snprintf(name, sizeof name, "model_%s_%s", untied ? "untied" : "tied", st_dtype_name(dt));
            char *dir = tmp_path(name);
            char *sub = path_join(dir, "nested/dir");  // mkdir -p
            hf_save_model(sub, &cfg, &lay, p, dt);

            T5Config back;
            int has_weights = hf_resolve_model(sub, &back);
            back.untied_lm_head = hf_probe_untied(sub);
            ParamLayout lay2;
            params_build_layout(&back, &lay2);
            float *q = mallocCheck(lay2.total * sizeof(float));
            hf_load_weights(sub, &back, &lay2, q);
            int ok = has_weights == 1 && back.untied_lm_head == untied && lay2.total == lay.total;
            T5Config cmp = back;
            snprintf(cmp.name, sizeof cmp.name, "tiny");
            ok &= same_config(&cmp, &cfg);
            for (size_t i = 0; ok && i < lay.total; i++) ok &= fbits(q[i]) == fbits(round_to(dt, p[i]));
            char msg[160];
            snprintf(msg, sizeof msg, "hf_save_model + hf_load_weights %s %s: config equal, probe %d, values %s",
                     untied ? "untied" : "tied", st_dtype_name(dt), back.untied_lm_head,
                     dt == ST_F32 ? "bit-exact" : "= rounded originals");
            test_check(ok, msg);

            if (di == 0) {  // the file holds exactly the layout's tensors, in layout order
                char *stp = path_join(sub, "model.safetensors");
                StFile st;
                st_open(&st, stp);
                int order = st.count == lay.count;
                for (int i = 0; order && i < st.count; i++)
                    order &= !strcmp(st.tensors[i].name, lay.specs[i].name) &&
                             (i == 0 || st.tensors[i].begin == st.tensors[i - 1].end);
                test_check(order && (st_find(&st, "lm_head.weight") != NULL) == untied &&
                               !st_find(&st, "encoder.embed_tokens.weight"),
                           untied ? "saved file: layout order, shared.weight + lm_head.weight, no embed_tokens"
                                  : "saved file: layout order, only shared.weight for the tied embedding");
                st_close(&st);
                free(stp);
            }
            params_free_layout(&lay2);
            params_free_layout(&lay);
            free(q);
            free(p);
            free(sub);
            free(dir);
        }
    }
}

// Write dir/model.safetensors (or a shard) with the layout's tensors renamed/dropped/added.
typedef struct {
    const char *rename_from, *rename_to;  // a layout tensor stored under another name
    const char *drop;                     // a layout tensor left out
    const char *extra_name;               // an extra tensor, copy of shared.weight
    int64_t extra_shape[2];               // shape of the extra (0: same as shared)
    StDtype extra_dtype;
    const char *reshape;                  // a layout tensor stored with a wrong shape (numel kept)
    int lm_head_differs;                  // extra lm_head.weight perturbed
} Variant;

static void write_variant(const char *dir, const T5Config *cfg, const ParamLayout *lay, const float *p,
                          const Variant *v) {
    mkdir(dir, 0755);
    char *cp = path_join(dir, "config.json");
    t5_config_save_json(cfg, cp);
    free(cp);
    StTensorDesc *d = callocCheck((size_t)lay->count + 1, sizeof *d);
    const float **src = callocCheck((size_t)lay->count + 1, sizeof *src);
    uint64_t *n = callocCheck((size_t)lay->count + 1, sizeof *n);
    int k = 0;
    const ParamSpec *shared = &lay->specs[params_find(lay, "shared.weight")];
    for (int i = 0; i < lay->count; i++) {
        const ParamSpec *s = &lay->specs[i];
        if (v->drop && !strcmp(v->drop, s->name)) continue;
        d[k].name = (v->rename_from && !strcmp(v->rename_from, s->name)) ? v->rename_to : s->name;
        d[k].dtype = ST_F32;
        d[k].ndim = s->ndim;
        d[k].shape[0] = s->shape[0];
        d[k].shape[1] = s->shape[1];
        if (v->reshape && !strcmp(v->reshape, s->name)) {
            d[k].shape[0] = s->shape[1];
            d[k].shape[1] = s->shape[0];
        }
        src[k] = p + s->offset;
        n[k++] = s->numel;
    }
    float *pert = NULL;
    if (v->extra_name) {
        d[k].name = v->extra_name;
        d[k].dtype = v->extra_dtype;
        d[k].ndim = 2;
        d[k].shape[0] = v->extra_shape[0] ? v->extra_shape[0] : shared->shape[0];
        d[k].shape[1] = v->extra_shape[1] ? v->extra_shape[1] : shared->shape[1];
        n[k] = (uint64_t)d[k].shape[0] * (uint64_t)d[k].shape[1];
        pert = mallocCheck(n[k] * sizeof(float));
        for (uint64_t j = 0; j < n[k]; j++) pert[j] = j < shared->numel ? p[shared->offset + j] : 0.5f;
        if (v->lm_head_differs) pert[3] += 1.0f;
        src[k++] = pert;
    }
    char *sp = path_join(dir, "model.safetensors");
    StWriter w;
    st_writer_open(&w, sp, d, k, "{\"format\":\"pt\"}");
    for (int i = 0; i < k; i++) {
        if (d[i].dtype == ST_I64) {
            int32_t *ints = callocCheck(n[i], sizeof *ints);
            st_writer_write_i32(&w, ints, n[i]);
            free(ints);
        } else {
            st_writer_write_f32(&w, src[i], n[i]);
        }
    }
    st_writer_close(&w);
    free(sp);
    free(pert);
    free(d);
    free(src);
    free(n);
}

static int load_equals(const char *dir, const T5Config *cfg, const float *want, int *probe_out) {
    T5Config c;
    hf_resolve_model(dir, &c);
    c.untied_lm_head = hf_probe_untied(dir);
    if (probe_out) *probe_out = c.untied_lm_head;
    ParamLayout lay;
    params_build_layout(&c, &lay);
    float *q = mallocCheck(lay.total * sizeof(float));
    hf_load_weights(dir, &c, &lay, q);
    int ok = memcmp(q, want, lay.total * sizeof(float)) == 0;
    free(q);
    params_free_layout(&lay);
    return ok;
}

typedef struct {
    const char *dir;
    int untied;
} LoadArg;

static void do_load_dir(const void *arg) {
    const LoadArg *a = arg;
    T5Config c;
    hf_resolve_model(a->dir, &c);
    c.untied_lm_head = a->untied >= 0 ? a->untied : hf_probe_untied(a->dir);
    ParamLayout lay;
    params_build_layout(&c, &lay);
    float *q = mallocCheck(lay.total * sizeof(float));
    hf_load_weights(a->dir, &c, &lay, q);
}

static void do_resolve(const void *arg) {
    T5Config c;
    hf_resolve_model((const char *)arg, &c);
}

// Sharded: the saved model split into two BF16 shards + index.json; then an index naming a
// missing shard.
static void test_hf_sharded(const T5Config *cfg, const ParamLayout *lay, const float *p) {
    int probe;
    char *dir = tmp_path("v_sharded");
    mkdir(dir, 0755);
    char *cp = path_join(dir, "config.json");
    t5_config_save_json(cfg, cp);
    free(cp);
    int half = lay->count / 2;
    StTensorDesc *d = callocCheck((size_t)lay->count, sizeof *d);
    for (int i = 0; i < lay->count; i++) {
        d[i].name = lay->specs[i].name;
        d[i].dtype = ST_BF16;
        d[i].ndim = lay->specs[i].ndim;
        d[i].shape[0] = lay->specs[i].shape[0];
        d[i].shape[1] = lay->specs[i].shape[1];
    }
    const char *shard_names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    size_t cap = 65536, len = 0;
    char *index = mallocCheck(cap);
    len += (size_t)snprintf(index + len, cap - len, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int s = 0; s < 2; s++) {
        int lo = s ? half : 0, hi = s ? lay->count : half;
        char *sp = path_join(dir, shard_names[s]);
        StWriter w;
        st_writer_open(&w, sp, d + lo, hi - lo, "{\"format\":\"pt\"}");
        for (int i = lo; i < hi; i++) {
            st_writer_write_f32(&w, p + lay->specs[i].offset, lay->specs[i].numel);
            len += (size_t)snprintf(index + len, cap - len, "%s\"%s\": \"%s\"", i ? ", " : "", lay->specs[i].name,
                                    shard_names[s]);
        }
        st_writer_close(&w);
        free(sp);
    }
    len += (size_t)snprintf(index + len, cap - len, "}}");
    char *ip = path_join(dir, "model.safetensors.index.json");
    write_text(ip, index);
    float *want = mallocCheck(lay->total * sizeof(float));
    for (size_t i = 0; i < lay->total; i++) want[i] = round_to(ST_BF16, p[i]);
    test_check(load_equals(dir, cfg, want, &probe) && probe == 0,
               "sharded checkpoint (index.json + 2 BF16 shards) loads");
    // Index naming a shard that is missing.
    char *bad = strstr(index, "model-00002-of-00002");
    memcpy(bad, "model-00009", 11);
    write_text(ip, index);
    expect_error("index names a missing shard", do_load_dir, &(LoadArg){dir, -1}, "model-00009-of-00002");
    free(want);
    free(ip);
    free(index);
    free(d);
    free(dir);
}

// Load errors: missing, misshaped, unknown and integer tensors, tied/untied mismatches.
static void test_hf_variant_errors(const T5Config *cfg, const ParamLayout *lay, const float *p) {
    char *dir;
    struct {
        const char *what;
        Variant v;
        int untied;  // -1: probe
        const char *needle;
    } errs[] = {
        {"missing tensor", {.drop = "decoder.block.1.layer.0.SelfAttention.q.weight"}, -1,
         "missing tensor \"decoder.block.1.layer.0.SelfAttention.q.weight\" (expected shape [12, 16])"},
        {"missing shared.weight", {.drop = "shared.weight"}, -1, "missing tensor \"shared.weight\" (expected shape [37, 16])"},
        {"shape mismatch", {.reshape = "encoder.block.0.layer.1.DenseReluDense.wi.weight"}, -1,
         "tensor \"encoder.block.0.layer.1.DenseReluDense.wi.weight\": expected shape [24, 16], found [16, 24]"},
        {"unknown tensor", {.extra_name = "model.encoder.layers.0.fc1.weight"}, -1,
         "unexpected tensor \"model.encoder.layers.0.fc1.weight\""},
        {"alias with a wrong shape", {.extra_name = "encoder.embed_tokens.weight", .extra_shape = {38, 16}}, -1,
         "expected shape [37, 16], found [38, 16]"},
        {"integer tensor", {.rename_from = "shared.weight", .rename_to = "x", .extra_name = "shared.weight",
                            .extra_dtype = ST_I64}, -1, "dtype I64"},
        {"untied head but tied layout", {.extra_name = "lm_head.weight", .lm_head_differs = 1}, 0,
         "untied lm_head.weight"},
        {"untied layout, no lm_head", {0}, 1, "missing tensor \"lm_head.weight\""},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "v_err%zu", i);
        dir = tmp_path(name);
        write_variant(dir, cfg, lay, p, &errs[i].v);
        char what[80];
        snprintf(what, sizeof what, "load: %s", errs[i].what);
        expect_error(what, do_load_dir, &(LoadArg){dir, errs[i].untied}, errs[i].needle);
        free(dir);
    }
    // Probe sees an untied head when lm_head.weight differs.
    dir = tmp_path("v_err6");
    test_check(hf_probe_untied(dir) == 1, "hf_probe_untied: an lm_head.weight that differs from shared means untied");
    free(dir);
}

// No weights file, a .bin that is no torch file, no config, bad --model.
static void test_hf_missing_files(const T5Config *cfg) {
    char *dir = tmp_path("v_noweights");
    mkdir(dir, 0755);
    char *cp = path_join(dir, "config.json");
    t5_config_save_json(cfg, cp);
    expect_error("load: no model.safetensors", do_load_dir, &(LoadArg){dir, 0}, "model.safetensors: cannot open");
    char *bin = path_join(dir, "pytorch_model.bin");
    write_text(bin, "x");
    expect_error("load: a pytorch_model.bin that is not torch.save's", do_load_dir, &(LoadArg){dir, 0},
                 "pytorch_model.bin: neither a torch zip file nor a legacy torch pickle");
    unlink(cp);
    expect_error("resolve: directory without config.json", do_resolve, dir, "config.json");
    free(bin);
    free(cp);
    free(dir);
    expect_error("resolve: unknown preset", do_resolve, "t5-tiny",
                 "--model \"t5-tiny\": not a directory with config.json and not a preset (known presets: t5-small");
    T5Config pc;
    test_check(hf_resolve_model("google-t5/t5-base", &pc) == 0 && pc.d_model == 768,
               "hf_resolve_model: a preset name gives its config and 0 (no weights)");
}

static void test_hf_variants(void) {
    T5Config cfg = tiny_config(0, 0);  // tied relu
    ParamLayout lay;
    params_build_layout(&cfg, &lay);
    float *p = random_params(&cfg, &lay, 99);
    int probe;
    char *dir;

    dir = tmp_path("v_alias_enc");
    write_variant(dir, &cfg, &lay, p,
                  &(Variant){.rename_from = "shared.weight", .rename_to = "encoder.embed_tokens.weight",
                             .extra_name = "decoder.embed_tokens.weight"});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0,
               "shared.weight stored as encoder.embed_tokens.weight (+ decoder alias): loads, tied");
    free(dir);

    dir = tmp_path("v_alias_dec");
    write_variant(dir, &cfg, &lay, p,
                  &(Variant){.rename_from = "shared.weight", .rename_to = "decoder.embed_tokens.weight"});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0, "shared.weight stored as decoder.embed_tokens.weight");
    free(dir);

    dir = tmp_path("v_lm_equal");
    write_variant(dir, &cfg, &lay, p, &(Variant){.extra_name = "lm_head.weight"});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0,
               "tied checkpoint with an lm_head.weight equal to shared.weight: probe says tied, loads");
    free(dir);

    dir = tmp_path("v_lm_only");
    write_variant(dir, &cfg, &lay, p, &(Variant){.rename_from = "shared.weight", .rename_to = "lm_head.weight"});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0,
               "lm_head.weight as the only copy of the embedding: tied, shared.weight read from it");
    free(dir);

    dir = tmp_path("v_stray");
    write_variant(dir, &cfg, &lay, p,
                  &(Variant){.extra_name = "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",
                             .extra_shape = {8, 3}});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0,
               "the dead EncDecAttention.relative_attention_bias of original t5 checkpoints is ignored");
    free(dir);

    test_hf_sharded(&cfg, &lay, p);
    test_hf_variant_errors(&cfg, &lay, p);
    test_hf_missing_files(&cfg);
    free(p);
    params_free_layout(&lay);
}


int main(void) {
    if (!io_tmp_begin("test_hf_dir")) return 2;
    test_hf_roundtrip();
    test_hf_variants();
    rm_rf(g_tmp);
    return test_summary();
}
