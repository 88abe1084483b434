// model/hf_dir.c: Hugging Face model directories in and out (see hf_dir.h).
//
// Weights come from dir/model.safetensors, or, when that is absent, from the shards
// named by dir/model.safetensors.index.json ({"weight_map": {tensor: shard file}}), then
// from pytorch_model.bin and pytorch_model.bin.index.json (formats/torch_file.c), as
// from_pretrained looks for them. Names accepted besides the layout's own:
//  - encoder.embed_tokens.weight / decoder.embed_tokens.weight: tied aliases of
//    shared.weight (either may be the only stored copy);
//  - lm_head.weight in a tied layout when it equals shared.weight (or is the only copy);
//  - decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight: a dead
//    tensor in the original t5-* checkpoints that transformers ignores on load.
// Anything else is an error, so a checkpoint of another architecture is caught.
#include "hf_dir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "../common/json_read.h"
#include "../formats/torch_file.h"

#define SINGLE_FILE "model.safetensors"
#define INDEX_FILE "model.safetensors.index.json"
#define BIN_FILE "pytorch_model.bin"
#define BIN_INDEX_FILE "pytorch_model.bin.index.json"
#define STRAY_CROSS_BIAS "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}
static void shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

// ---- the set of weight files of a directory ----------------------------------------------

typedef struct {
    char *where;    // file named in messages: model.safetensors or the index
    StFile *files;  // one, or one per shard
    int nfiles;
} Weights;

// A path that exists but is not a regular file (a directory named model.safetensors):
// said as such, not as "not found".
static void refuse_non_file(const char *path) {
    struct stat sb;
    const char *kind = stat(path, &sb) == 0 ? file_kind_name(sb.st_mode) : NULL;
    if (kind)
        t5_fail("%s: is %s, where a file is expected; HINT: a model directory holds config.json and model.safetensors "
                "files", path, kind);
}

typedef void (*WeightsOpenFn)(StFile *st, const char *path);

// from_pretrained's order: safetensors (single, then sharded), then PyTorch .bin (single, then
// sharded; formats/torch_file.c reads them, zip or legacy format, as StFiles).
static const struct {
    const char *single, *index;
    WeightsOpenFn open;
} FORMATS[] = {
    {SINGLE_FILE, INDEX_FILE, st_open},
    {BIN_FILE, BIN_INDEX_FILE, torch_bin_open},
};
#define NUM_FORMATS ((int)(sizeof FORMATS / sizeof FORMATS[0]))

// The shards named by an index ({"weight_map": {tensor: shard file}}), each opened with `open`.
static void weights_open_index(Weights *w, const char *dir, char *index, WeightsOpenFn open) {
    w->where = index;
    size_t len;
    char *text = read_text_file(index, &len);
    if (!text) t5_fail("%s: cannot open (%s)", index, strerror(errno));
    size_t at = len;  // read as transformers reads it (json.load; common/json_read.h)
    cJSON *root = json_read_parse(text, len, index, JSON_DUP_LAST, &at);
    if (!root) t5_fail("%s: malformed JSON at byte %zu of %zu", index, at, len);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map) || !cJSON_GetArraySize(map))
        t5_fail("%s: key \"weight_map\": expected a non-empty object {tensor: shard file}", index);
    // Distinct shard names, in order of first appearance.
    int nmap = cJSON_GetArraySize(map);
    const char **shards = callocCheck((size_t)nmap, sizeof *shards);
    int nshards = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e))
            t5_fail("%s: weight_map entry \"%s\": expected a shard file name (a string)", index, e->string);
        const char *s = e->valuestring;
        if (!s[0] || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
            t5_fail("%s: weight_map entry \"%s\": shard \"%s\" must be a plain file name in the same directory", index,
                    e->string, s);
        int seen = 0;
        for (int i = 0; i < nshards && !seen; i++) seen = strcmp(shards[i], s) == 0;
        if (!seen) shards[nshards++] = s;
    }
    w->files = callocCheck((size_t)nshards, sizeof *w->files);
    for (int i = 0; i < nshards; i++) {
        char *p = path_join(dir, shards[i]);
        refuse_non_file(p);
        if (!is_file(p)) t5_fail("%s: shard \"%s\" named by the index is missing (%s)", index, shards[i], p);
        open(&w->files[i], p);
        w->nfiles = i + 1;
        free(p);
    }
    // The index must tell the truth, and no tensor may live in two shards.
    cJSON_ArrayForEach(e, map) {
        int shard = 0;
        while (strcmp(shards[shard], e->valuestring) != 0) shard++;
        if (!st_find(&w->files[shard], e->string))
            t5_fail("%s: tensor \"%s\" is not in shard \"%s\" as the index says", index, e->string, e->valuestring);
    }
    for (int i = 0; i < nshards; i++)
        for (int t = 0; t < w->files[i].count; t++)
            for (int j = i + 1; j < nshards; j++)
                if (st_find(&w->files[j], w->files[i].tensors[t].name))
                    t5_fail("%s: tensor \"%s\" is stored in two shards (\"%s\" and \"%s\")", index,
                            w->files[i].tensors[t].name, shards[i], shards[j]);
    free(shards);
    cJSON_Delete(root);
    free(text);
}

// The weights file of dir that from_pretrained would load (index into FORMATS, and 1 when it
// is an index), or -1.
static int weights_pick(const char *dir, int *is_index) {
    for (int k = 0; k < NUM_FORMATS; k++) {
        const char *names[2] = {FORMATS[k].single, FORMATS[k].index};
        for (int x = 0; x < 2; x++) {
            char *p = path_join(dir, names[x]);
            refuse_non_file(p);
            int found = is_file(p);
            free(p);
            if (found) {
                *is_index = x;
                return k;
            }
        }
    }
    return -1;
}

static void weights_open(Weights *w, const char *dir) {
    memset(w, 0, sizeof *w);
    int is_index, k = weights_pick(dir, &is_index);
    if (k < 0) {
        char *single = path_join(dir, SINGLE_FILE);
        t5_fail("%s: cannot open (No such file or directory); HINT: a model directory needs config.json and "
                "model.safetensors (or model.safetensors.index.json with its shards, or pytorch_model.bin)",
                single);
    }
    char *path = path_join(dir, is_index ? FORMATS[k].index : FORMATS[k].single);
    if (is_index) {
        weights_open_index(w, dir, path, FORMATS[k].open);
        return;
    }
    w->where = path;
    w->files = callocCheck(1, sizeof *w->files);
    w->nfiles = 1;
    FORMATS[k].open(&w->files[0], path);
}

const char *hf_weights_file(const char *dir) {
    int is_index, k = weights_pick(dir, &is_index);
    return k < 0 ? NULL : is_index ? FORMATS[k].index : FORMATS[k].single;
}

static const StTensor *weights_find(const Weights *w, const char *name, const StFile **file) {
    for (int i = 0; i < w->nfiles; i++) {
        const StTensor *t = st_find(&w->files[i], name);
        if (t) {
            if (file) *file = &w->files[i];
            return t;
        }
    }
    return NULL;
}

static void weights_close(Weights *w) {
    for (int i = 0; i < w->nfiles; i++) st_close(&w->files[i]);
    free(w->files);
    free(w->where);
    memset(w, 0, sizeof *w);
}

// Byte-for-byte equality of two stored tensors, in 1 MiB chunks.
static int same_bytes(const StFile *fa, const StTensor *a, const StFile *fb, const StTensor *b) {
    if (a->dtype != b->dtype || a->end - a->begin != b->end - b->begin) return 0;
    enum { CHUNK = 1 << 20 };
    unsigned char *x = mallocCheck(CHUNK), *y = mallocCheck(CHUNK);
    uint64_t n = a->end - a->begin;
    int same = 1;
    for (uint64_t off = 0; off < n && same; off += CHUNK) {
        size_t m = (size_t)(n - off < CHUNK ? n - off : CHUNK);
        if (fseeko(fa->f, (off_t)(fa->data_start + a->begin + off), SEEK_SET) != 0 || fread(x, 1, m, fa->f) != m)
            t5_fail("%s: cannot read tensor \"%s\"", fa->path, a->name);
        if (fseeko(fb->f, (off_t)(fb->data_start + b->begin + off), SEEK_SET) != 0 || fread(y, 1, m, fb->f) != m)
            t5_fail("%s: cannot read tensor \"%s\"", fb->path, b->name);
        same = memcmp(x, y, m) == 0;
    }
    free(x);
    free(y);
    return same;
}

static const char *const SHARED_ALIASES[] = {"shared.weight", "encoder.embed_tokens.weight",
                                             "decoder.embed_tokens.weight"};

static const StTensor *find_shared(const Weights *w, const StFile **file) {
    for (int i = 0; i < 3; i++) {
        const StTensor *t = weights_find(w, SHARED_ALIASES[i], file);
        if (t) return t;
    }
    return NULL;
}

// ---- public API ---------------------------------------------------------------------------

int hf_resolve_model(const char *model_arg, T5Config *cfg) {
    if (path_is_dir(model_arg)) {
        char *cfg_path = path_join(model_arg, "config.json");
        refuse_non_file(cfg_path);
        if (is_file(cfg_path)) {
            t5_config_load_json(cfg_path, cfg);
            free(cfg_path);
            return 1;
        }
        if (!t5_config_preset(model_arg, cfg))
            t5_fail("--model \"%s\": the directory has no config.json (%s not found); HINT: a model directory needs "
                    "config.json and model.safetensors",
                    model_arg, cfg_path);
        free(cfg_path);
        return 0;
    }
    if (t5_config_preset(model_arg, cfg)) return 0;
    t5_fail("--model \"%s\": not a directory with config.json and not a preset (known presets: %s)", model_arg,
            t5_config_preset_names());
}

int hf_has_weights_file(const char *dir) {
    static const char *const names[] = {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                                        "pytorch_model.bin.index.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *p = path_join(dir, names[i]);
        int yes = path_exists(p);
        free(p);
        if (yes) return 1;
    }
    return 0;
}

int hf_probe_untied(const char *dir) {
    Weights w;
    weights_open(&w, dir);
    const StFile *fl, *fs;
    const StTensor *lm = weights_find(&w, "lm_head.weight", &fl);
    const StTensor *sh = find_shared(&w, &fs);
    // No lm_head, or lm_head as the only copy of the embedding: tied. A copy equal to
    // shared.weight (old tied checkpoints stored it) is tied too.
    int untied = lm && sh && !same_bytes(fl, lm, fs, sh);
    weights_close(&w);
    return untied;
}

// Step 2 of hf_load_weights: every tensor of the files is one of the layout's, an alias of
// the shared embedding, a tied head equal to it, or the stray cross-attention bias.
static void check_no_extra(const Weights *w, const ParamLayout *lay, int untied, const StTensor **src,
                           const StFile **srcf) {
    char want[64], got[64];
    int shared_idx = params_find(lay, "shared.weight");
    int unknown = 0;
    const char *first_unknown = NULL, *unknown_file = NULL;
    const StFile *lm_file = NULL;
    const StTensor *lm_extra = NULL;
    for (int f = 0; f < w->nfiles; f++) {
        for (int k = 0; k < w->files[f].count; k++) {
            const StTensor *t = &w->files[f].tensors[k];
            if (params_find(lay, t->name) >= 0) continue;
            int alias = strcmp(t->name, SHARED_ALIASES[1]) == 0 || strcmp(t->name, SHARED_ALIASES[2]) == 0;
            int tied_head = !untied && strcmp(t->name, "lm_head.weight") == 0;
            if (alias || tied_head) {
                const ParamSpec *s = &lay->specs[shared_idx];
                if (t->ndim != 2 || t->shape[0] != s->shape[0] || t->shape[1] != s->shape[1]) {
                    shape_str(want, sizeof want, s->ndim, s->shape);
                    shape_str(got, sizeof got, t->ndim, t->shape);
                    t5_fail("%s: tensor \"%s\": expected shape %s, found %s", w->files[f].path, t->name, want, got);
                }
                if (tied_head && t != src[shared_idx]) {
                    lm_extra = t;
                    lm_file = &w->files[f];
                }
                continue;
            }
            if (strcmp(t->name, STRAY_CROSS_BIAS) == 0) continue;
            if (!unknown++) {
                first_unknown = t->name;
                unknown_file = w->files[f].path;
            }
        }
    }
    if (unknown) {
        char more[48] = "";
        if (unknown > 1) snprintf(more, sizeof more, " (and %d more)", unknown - 1);
        t5_fail("%s: unexpected tensor \"%s\"%s: not a T5ForConditionalGeneration with this config.json "
                "(wrong model type, or a config.json that does not match the weights?)",
                unknown_file, first_unknown, more);
    }
    if (lm_extra && !same_bytes(lm_file, lm_extra, srcf[shared_idx], src[shared_idx]))
        t5_fail("%s: has an untied lm_head.weight (it differs from shared.weight) but the layout ties the head; "
                "HINT: set cfg.untied_lm_head = hf_probe_untied(dir) before params_build_layout",
                lm_file->path);

}

void hf_load_weights(const char *dir, const T5Config *cfg, const ParamLayout *lay, float *params) {
    Weights w;
    weights_open(&w, dir);
    int untied = params_find(lay, "lm_head.weight") >= 0;
    const StTensor **src = callocCheck((size_t)lay->count, sizeof *src);
    const StFile **srcf = callocCheck((size_t)lay->count, sizeof *srcf);
    char want[64], got[64];

    // 1. every tensor of the layout, with its shape and a float dtype
    for (int i = 0; i < lay->count; i++) {
        const ParamSpec *s = &lay->specs[i];
        const StTensor *t = weights_find(&w, s->name, &srcf[i]);
        if (!t && strcmp(s->name, "shared.weight") == 0) {
            t = find_shared(&w, &srcf[i]);
            if (!t && !untied) t = weights_find(&w, "lm_head.weight", &srcf[i]);
        }
        shape_str(want, sizeof want, s->ndim, s->shape);
        if (!t) t5_fail("%s: missing tensor \"%s\" (expected shape %s)", w.where, s->name, want);
        int same = t->ndim == s->ndim;
        for (int d = 0; same && d < s->ndim; d++) same = t->shape[d] == s->shape[d];
        if (!same) {
            shape_str(got, sizeof got, t->ndim, t->shape);
            t5_fail("%s: tensor \"%s\": expected shape %s, found %s", srcf[i]->path, t->name, want, got);
        }
        if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
            t5_fail("%s: tensor \"%s\": dtype %s, expected F32, F16 or BF16", srcf[i]->path, t->name,
                    st_dtype_name(t->dtype));
        src[i] = t;
    }

    // 2. nothing the model does not have
    check_no_extra(&w, lay, untied, src, srcf);

    // 3. read; a weight that is inf/nan would make every loss nan: refused, naming the tensor
    for (int i = 0; i < lay->count; i++) {
        float *t = params + lay->specs[i].offset;
        st_read_f32(srcf[i], src[i], t);
        for (size_t k = 0; k < lay->specs[i].numel; k++)
            if (!isfinite(t[k]))
                t5_fail("%s: tensor \"%s\" holds %g at element %zu: the weights are damaged (or come from a run that "
                        "diverged); HINT: use an earlier checkpoint or the original weights", srcf[i]->path,
                        src[i]->name, (double)t[k], k);
    }
    (void)cfg;
    free(src);
    free(srcf);
    weights_close(&w);
}

static double dtype_limit(StDtype dtype) {
    return dtype == ST_F16 ? 65504.0 : dtype == ST_BF16 ? 3.3895313892515355e38 : 3.4028234663852886e38;
}

int hf_check_tensor(const ParamLayout *lay, int i, const float *vals, StDtype dtype, size_t *at) {
    const double lim = dtype_limit(dtype);
    for (size_t k = 0; k < lay->specs[i].numel; k++)
        if (!(fabs((double)vals[k]) <= lim)) {
            *at = k;
            return 0;
        }
    return 1;
}

void hf_save_config(const char *dir, const T5Config *cfg, const ParamLayout *lay) {
    int untied = params_find(lay, "lm_head.weight") >= 0;
    if (untied != (cfg->untied_lm_head != 0))
        t5_die(__FILE__, __LINE__, "hf_save_config: the layout and cfg->untied_lm_head disagree",
               "build the layout from the same config");
    mkdir_p(dir);
    // tie_word_embeddings written as the file is: a separate lm_head.weight means untied
    // (what transformers 4 needs to load it); scale_decoder_outputs carries the scaling.
    T5Config c = *cfg;
    c.tie_word_embeddings = !untied;
    char *cfg_path = path_join(dir, "config.json");
    t5_config_save_json(&c, cfg_path);
    free(cfg_path);
}

StTensorDesc *hf_save_begin(const char *dir, const char *file, const T5Config *cfg, const ParamLayout *lay,
                            int first, int last, StDtype dtype, StWriter *w) {
    if (dtype != ST_F32 && dtype != ST_F16 && dtype != ST_BF16)
        t5_fail("%s: cannot save model weights as %s (use F32, F16 or BF16)", dir, st_dtype_name(dtype));
    hf_save_config(dir, cfg, lay);
    StTensorDesc *descs = callocCheck((size_t)(last - first), sizeof *descs);
    for (int i = first; i < last; i++) {
        const ParamSpec *s = &lay->specs[i];
        descs[i - first].name = s->name;
        descs[i - first].dtype = dtype;
        descs[i - first].ndim = s->ndim;
        for (int d = 0; d < s->ndim; d++) descs[i - first].shape[d] = s->shape[d];
    }
    char *st_path = path_join(dir, file ? file : SINGLE_FILE);
    st_writer_open(w, st_path, descs, last - first, "{\"format\":\"pt\"}");
    free(st_path);
    return descs;
}

void hf_save_model(const char *dir, const T5Config *cfg, const ParamLayout *lay, const float *params, StDtype dtype) {
    if (dtype != ST_F32 && dtype != ST_F16 && dtype != ST_BF16)
        t5_fail("%s: cannot save model weights as %s (use F32, F16 or BF16)", dir, st_dtype_name(dtype));
    // a weight that is inf/nan, or that the saved dtype turns into inf, is no model: nothing
    // is written (every save goes through here: the trainer, convert, overfit)
    for (int i = 0; i < lay->count; i++) {
        const float *t = params + lay->specs[i].offset;
        size_t k;
        if (!hf_check_tensor(lay, i, t, dtype, &k))
            t5_fail("%s: tensor \"%s\" holds %g at element %zu, %s: the model is not written; HINT: %s", dir,
                    lay->specs[i].name, (double)t[k], k, isfinite(t[k]) ? "beyond the saved dtype's range" : "not a finite number",
                    isfinite(t[k]) ? "save as f32 (--dtype f32)" : "lower the learning rate; check the weights and data");
    }
    StWriter wr;
    StTensorDesc *descs = hf_save_begin(dir, NULL, cfg, lay, 0, lay->count, dtype, &wr);
    for (int i = 0; i < lay->count; i++) st_writer_write_f32(&wr, params + lay->specs[i].offset, lay->specs[i].numel);
    st_writer_close(&wr);
    free(descs);
}
