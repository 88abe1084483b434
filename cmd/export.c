// cmd/export.c: `train_t5 export CKPT OUT [--dtype fp32|bf16|fp16] [--max_shard_size 5GB]
// [--overwrite]`: an HF model directory (config.json, spiece.model, generation_config.json
// when the checkpoint has one, and model.safetensors, or above --max_shard_size
// model-0000i-of-0000n.safetensors + model.safetensors.index.json as save_pretrained names
// them) from any train_t5 checkpoint: the per-rank shards (zero/checkpoint.h; also a final
// stage-3 save without stage3_gather_16bit_weights_on_model_save) or a model.safetensors
// (checkpoints written before the shards). One tensor at a time: the peak host memory is
// the largest tensor plus a conversion buffer. Every input is checked before OUT is touched.
#include "cmd.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "../common/flags.h"
#include "../model/hf_dir.h"
#include "../model/params.h"
#include "../formats/safetensors.h"
#include "../trainer/output_dir.h"
#include "../zero/checkpoint.h"

#define EXPORT_USAGE "usage: train_t5 export CKPT OUT [--dtype fp32|bf16|fp16] [--max_shard_size 5GB] [--overwrite]"
#define DEFAULT_MAX_SHARD "5GB"        // transformers' save_pretrained default
#define SHARD_NAME "model-%05d-of-%05d.safetensors"
#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
static const char *const COPIED[] = {"spiece.model", "generation_config.json"};
#define N_COPIED ((int)(sizeof COPIED / sizeof COPIED[0]))

// "5GB", "500MB", "2GiB", "1000" (bytes), as transformers' convert_file_size_to_int reads
// them (decimal GB/MB/KB, binary GiB/MiB/KiB). 0 when the text is not a size.
static double parse_size(const char *s) {
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0}, {"GB", 1e9},
                 {"MB", 1e6},           {"KB", 1e3},        {"B", 1.0},      {"", 1.0}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(isfinite(v) && v > 0)) return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) return floor(v * units[i].mult);
    return 0;
}

static int parse_dtype(const char *s, StDtype *d) {
    if (!strcmp(s, "fp32") || !strcmp(s, "f32") || !strcmp(s, "float32")) *d = ST_F32;
    else if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) *d = ST_BF16;
    else if (!strcmp(s, "fp16") || !strcmp(s, "f16") || !strcmp(s, "float16")) *d = ST_F16;
    else return 0;
    return 1;
}

// Where the weights come from: the shards, or a model.safetensors whose tensors carry the
// layout's names (what train_t5 writes).
typedef struct {
    ZeroShardReader *shards;
    StFile file;
    int has_file;
} Source;

static void source_read(Source *src, const ParamLayout *lay, int i, float *dst) {
    const ParamSpec *s = &lay->specs[i];
    if (src->shards) return zero_shards_read_master(src->shards, s->offset, s->offset + s->numel, dst);
    const StTensor *t = st_find(&src->file, s->name);
    if (!t || t->numel != s->numel)
        t5_fail("%s: tensor \"%s\" of %zu elements is missing; HINT: export reads the checkpoints train_t5 writes",
                src->file.path, s->name, s->numel);
    st_read_f32(&src->file, t, dst);
}

// The files save_pretrained would cut the tensors into: a new one starts where the next
// tensor would take the current one past max_bytes (a tensor larger than that gets a file
// of its own). first[k] is file k's first tensor; returns the number of files.
static int plan_files(const ParamLayout *lay, StDtype dtype, double max_bytes, int *first) {
    int nf = 0;
    double cur = 0;
    for (int i = 0; i < lay->count; i++) {
        double b = (double)lay->specs[i].numel * st_dtype_size(dtype);
        if (nf == 0 || (cur > 0 && cur + b > max_bytes)) {
            first[nf++] = i;
            cur = 0;
        }
        cur += b;
    }
    first[nf] = lay->count;
    return nf;
}

// done: the line to print once every file of the export is in place (done_n bytes).
static void export_write(const char *ckpt, const char *out, const T5Config *cfg, const ParamLayout *lay, Source *src,
                         StDtype dtype, double max_bytes, char *done, size_t done_n) {
    int *first = mallocCheck(((size_t)lay->count + 1) * sizeof(int));
    int nf = plan_files(lay, dtype, max_bytes, first);
    size_t big = params_largest_numel(lay);
    float *buf = mallocCheck((big ? big : 1) * sizeof(float));
    cJSON *map = cJSON_CreateObject();
    double total_bytes = 0;
    for (int k = 0; k < nf; k++) {
        char name[64];
        if (nf == 1) snprintf(name, sizeof name, SINGLE_NAME);
        else snprintf(name, sizeof name, SHARD_NAME, k + 1, nf);
        StWriter w;
        StTensorDesc *descs = hf_save_begin(out, name, cfg, lay, first[k], first[k + 1], dtype, &w);
        for (int i = first[k]; i < first[k + 1]; i++) {
            const ParamSpec *s = &lay->specs[i];
            source_read(src, lay, i, buf);
            size_t at;
            if (!hf_check_tensor(lay, i, buf, dtype, &at))
                t5_fail("%s: tensor \"%s\" holds %g at element %zu, %s: nothing is exported; HINT: %s", ckpt, s->name,
                        (double)buf[at], at, isfinite(buf[at]) ? "beyond the range of --dtype" : "not a finite number",
                        isfinite(buf[at]) ? "export with --dtype fp32 (or bf16)" : "export an earlier checkpoint");
            st_writer_write_f32(&w, buf, s->numel);
            cJSON_AddStringToObject(map, s->name, name);
            total_bytes += (double)s->numel * st_dtype_size(dtype);
        }
        st_writer_close(&w);
        free(descs);
    }
    if (nf > 1) {  // save_pretrained's index: {"metadata": {"total_size"}, "weight_map"}, keys sorted
        cJSON *idx = cJSON_CreateObject(), *meta = cJSON_CreateObject();
        cJSON_AddNumberToObject(meta, "total_size", total_bytes);
        cJSON_AddItemToObject(idx, "metadata", meta);
        cJSON_AddItemToObject(idx, "weight_map", map);
        cJSON *sorted = json_sorted_copy(idx);
        char *p = path_join(out, INDEX_NAME);
        json_save_atomic(sorted, p);
        free(p);
        cJSON_Delete(sorted);
        cJSON_Delete(idx);
    } else {
        cJSON_Delete(map);
    }
    freeCheck(buf);
    free(first);
    snprintf(done, done_n, "exported %s to %s: %d tensors, %s, %d file%s (%.0f bytes of weights)", ckpt, out,
             lay->count, st_dtype_name(dtype), nf, nf > 1 ? "s + " INDEX_NAME : "", total_bytes);
}

// --overwrite: the model files an earlier export left (a single file where shards come now,
// or shards of another count) go first, as save_pretrained removes stale shards.
static void remove_stale(const char *out) {
    DIR *d = opendir(out);
    if (!d) t5_fail("export: cannot list %s (%s)", out, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        int a, b, used = 0;
        int shard = sscanf(e->d_name, "model-%d-of-%d.safetensors%n", &a, &b, &used) == 2 && !e->d_name[used];
        if (shard || !strcmp(e->d_name, SINGLE_NAME) || !strcmp(e->d_name, INDEX_NAME)) {
            char *p = path_join(out, e->d_name);
            if (remove(p) != 0) t5_fail("export: cannot remove the stale %s (%s)", p, strerror(errno));
            free(p);
        }
    }
    closedir(d);
}

int cmd_run_export(int argc, char **argv) {
    const char *dtype_s = "fp32", *max_s = DEFAULT_MAX_SHARD;
    int overwrite = 0, help = 0;
    FlagSpec specs[] = {
        {"dtype", FLAG_STRING, &dtype_s, "tensor dtype of the exported weights: fp32 (the master), bf16, fp16"},
        {"max_shard_size", FLAG_STRING, &max_s, "largest file before the weights are split (5GB; GB/MB/KB, GiB/MiB/KiB)"},
        {"overwrite", FLAG_BOOL, &overwrite, "write into an OUT that holds files already"},
        {"help", FLAG_BOOL, &help, "this help"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    // the two paths: the words that are neither a flag nor a flag's value
    const char **pos = mallocCheck(sizeof(char *) * (size_t)(argc ? argc : 1));
    int np = flags_parse_words(argc, argv, 2, specs, n_specs, "export", pos);
    if (np > 2) t5_fail("export: a third path \"%s\"; HINT: %s", pos[2], EXPORT_USAGE);
    if (help) {
        printf("%s\n  An HF model directory (from_pretrained loads it) from a train_t5 checkpoint-N or output\n"
               "  directory: its ZeRO shards (any world size or stage) or its model.safetensors.\n", EXPORT_USAGE);
        flags_print_help(specs, n_specs);
        free(pos);
        return 0;
    }
    if (np < 2) t5_fail("export: %s given; HINT: %s", np ? "no OUT" : "no CKPT and no OUT", EXPORT_USAGE);
    const char *ckpt = pos[0], *out = pos[1];
    StDtype dtype;
    if (!parse_dtype(dtype_s, &dtype)) t5_fail("export: --dtype \"%s\": expected fp32, bf16 or fp16", dtype_s);
    double max_bytes = parse_size(max_s);
    if (max_bytes <= 0)
        t5_fail("export: --max_shard_size \"%s\": expected a size such as 5GB, 500MB or 2GiB", max_s);
    if (!path_is_dir(ckpt))
        t5_fail("export: CKPT %s: %s; HINT: pass a checkpoint-N directory or an --output_dir that train_t5 wrote",
                ckpt, path_exists(ckpt) ? "not a directory" : "not found");
    char *cfg_path = path_join(ckpt, "config.json");
    file_refuse_non_regular(cfg_path, NULL);  // a FIFO or a directory is said as such, not as missing
    if (!path_is_file(cfg_path))
        t5_fail("export: %s is missing; HINT: pass a checkpoint-N directory or an --output_dir that train_t5 wrote",
                cfg_path);
    free(cfg_path);
    if (path_exists(out) && !path_is_dir(out)) t5_fail("export: OUT %s exists and is not a directory", out);
    if (dir_is_nonempty(out) && !overwrite)
        t5_fail("export: OUT %s holds files already; HINT: pick a new directory, or pass --overwrite", out);

    T5Config cfg;
    hf_resolve_model(ckpt, &cfg);
    char *single = path_join(ckpt, SINGLE_NAME);
    Source src = {0};
    ParamLayout lay;
    int from_shards = zero_checkpoint_has_shards(ckpt);
    if (!from_shards) {
        file_refuse_non_regular(single, NULL);
        if (!path_is_file(single))
            t5_fail("export: %s has neither a `%s` file (ZeRO shards) nor %s; HINT: a half-written checkpoint has no "
                    "latest: export an earlier checkpoint-N", ckpt, ZERO_CKPT_LATEST, SINGLE_NAME);
        cfg.untied_lm_head = hf_probe_untied(ckpt);
    }
    params_build_layout(&cfg, &lay);
    if (from_shards) src.shards = zero_shards_open(ckpt, lay.total, 1);  // every checksum verified here
    else st_open(&src.file, single), src.has_file = 1;
    free(single);

    int fresh = !dir_is_nonempty(out);
    mkdir_p(out);
    if (fresh) fileio_remove_at_exit(out);  // a failure leaves no half-exported directory
    output_dir_lock_as(out, "export: OUT");  // never into a directory a live run holds
    if (!fresh) remove_stale(out);
    char done[1024];
    export_write(ckpt, out, &cfg, &lay, &src, dtype, max_bytes, done, sizeof done);
    for (int i = 0; i < N_COPIED; i++) {
        char *a = path_join(ckpt, COPIED[i]), *b = path_join(out, COPIED[i]);
        if (path_exists(a)) file_copy_atomic(a, b);  // a FIFO there is refused, not skipped
        free(a);
        free(b);
    }
    if (fresh) fileio_keep(out);
    printf("%s\n", done);  // only now: every file is written
    zero_shards_close(src.shards);
    if (src.has_file) st_close(&src.file);
    params_free_layout(&lay);
    free(pos);
    return 0;
}
