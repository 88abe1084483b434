// trainer/gen_defaults.c: generation defaults from the model directory (gen_defaults.h).
// HF: Seq2SeqTrainer generates with its gen_kwargs (the flags) over model.generation_config,
// which is generation_config.json when the directory has one; transformers 4.2's
// finetune_trainer.py (the 2021 post's script) first copied config.json's
// task_specific_params[task] into the config (use_task_specific_params), prefix included.
#include "gen_defaults.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../common/json_read.h"

typedef struct {
    const cJSON *obj;  // the object holding the keys (NULL: no such source)
    const char *file;  // for messages
    const char *where; // key path prefix for messages ("" or "task_specific_params.X.")
} GenSource;

// As transformers reads it (json.load: the last of duplicate keys wins; common/json_read.h); a
// FIFO or device is one line, never a wait.
static cJSON *json_read(const char *path) {
    cJSON *root = json_read_file(path, JSON_DUP_LAST, "fix or remove the file");
    if (!root) t5_fail("%s: cannot open (%s); HINT: check the file's permissions", path, strerror(errno));
    if (!cJSON_IsObject(root)) t5_fail("%s: not a JSON object; HINT: fix or remove the file", path);
    return root;
}

static void notice_taken(TrainArgs *a, const GenSource *s, const char *key, const char *value, const char *flag) {
    char line[1024];
    snprintf(line, sizeof line, "NOTICE: %s from %s: key \"%s%s\" (%s not given)", value, s->file, s->where, key,
             flag);
    train_args_add_notice(a, line);
}

// An integer key in [lo, hi]; 1 when present.
static int take_int(const GenSource *s, const char *key, int lo, int hi, const char *flag, int *out) {
    const cJSON *v = s->obj ? cJSON_GetObjectItemCaseSensitive(s->obj, key) : NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        t5_fail("%s: key \"%s%s\" must be an integer in [%d, %d]; HINT: fix the file or give %s", s->file,
                s->where, key, lo, hi, flag);
    *out = (int)v->valuedouble;
    return 1;
}

static int take_bool(const GenSource *s, const char *key, int *out) {
    const cJSON *v = s->obj ? cJSON_GetObjectItemCaseSensitive(s->obj, key) : NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v))
        t5_fail("%s: key \"%s%s\" must be true or false (\"never\" is not built); HINT: fix the file or give "
                "--early_stopping", s->file, s->where, key);
    *out = cJSON_IsTrue(v);
    return 1;
}

static int take_number(const GenSource *s, const char *key, double *out) {
    const cJSON *v = s->obj ? cJSON_GetObjectItemCaseSensitive(s->obj, key) : NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > 1e30)
        t5_fail("%s: key \"%s%s\" must be a finite number; HINT: fix the file or give --length_penalty", s->file,
                s->where, key);
    *out = v->valuedouble;
    return 1;
}

// The four generation settings from the first source (in precedence order) that has each.
static void take_generation(TrainArgs *a, const GenSource src[2]) {
    char value[96];
    for (int k = 0; k < 2; k++) {
        const GenSource *s = &src[k];
        int iv;
        double dv;
        if (!(a->gen_flag_mask & GEN_FLAG_NUM_BEAMS) && take_int(s, "num_beams", 1, 64, "--generation_num_beams", &iv)) {
            a->generation_num_beams = iv;
            a->gen_flag_mask |= GEN_FLAG_NUM_BEAMS;
            snprintf(value, sizeof value, "generation num_beams %d", iv);
            notice_taken(a, s, "num_beams", value, "--generation_num_beams");
        }
        if (!(a->gen_flag_mask & GEN_FLAG_MAX_LENGTH) &&
            take_int(s, "max_length", 2, TRAIN_ARGS_MAX_TOKENS, "--generation_max_length", &iv)) {
            a->generation_max_length = iv;
            a->gen_flag_mask |= GEN_FLAG_MAX_LENGTH;
            snprintf(value, sizeof value, "generation max_length %d", iv);
            notice_taken(a, s, "max_length", value, "--generation_max_length / --val_max_target_length");
        }
        if (!(a->gen_flag_mask & GEN_FLAG_EARLY_STOPPING) && take_bool(s, "early_stopping", &iv)) {
            a->early_stopping = iv;
            a->gen_flag_mask |= GEN_FLAG_EARLY_STOPPING;
            snprintf(value, sizeof value, "generation early_stopping %s", iv ? "true" : "false");
            notice_taken(a, s, "early_stopping", value, "--early_stopping");
        }
        if (!(a->gen_flag_mask & GEN_FLAG_LENGTH_PENALTY) && take_number(s, "length_penalty", &dv)) {
            a->length_penalty = dv;
            a->gen_flag_mask |= GEN_FLAG_LENGTH_PENALTY;
            snprintf(value, sizeof value, "generation length_penalty %g", dv);
            notice_taken(a, s, "length_penalty", value, "--length_penalty");
        }
    }
}

// task_specific_params[--task]'s "prefix" when --source_prefix is not given.
static void take_prefix(TrainArgs *a, const GenSource *task) {
    const cJSON *v = task->obj ? cJSON_GetObjectItemCaseSensitive(task->obj, "prefix") : NULL;
    if (a->source_prefix || !v || cJSON_IsNull(v)) return;
    if (!cJSON_IsString(v))
        t5_fail("%s: key \"%sprefix\" must be a string; HINT: fix the file or give --source_prefix", task->file,
                task->where);
    a->source_prefix = strdup(v->valuestring);  // lives as long as the run
    char value[320];
    snprintf(value, sizeof value, "source prefix \"%.256s\"", v->valuestring);
    notice_taken(a, task, "prefix", value, "--source_prefix");
}

void gen_defaults_apply(TrainArgs *a) {
    if (!a->model || !path_is_dir(a->model)) return;  // a preset: no files
    char *gen_path = path_join(a->model, "generation_config.json"), *cfg_path = path_join(a->model, "config.json");
    cJSON *gen = path_exists(gen_path) ? json_read(gen_path) : NULL;  // a FIFO or a directory is refused there
    cJSON *cfg = path_exists(cfg_path) ? json_read(cfg_path) : NULL;
    GenSource src[2] = {{gen, gen_path, ""}, {NULL, cfg_path, ""}};
    char where[200];
    const cJSON *tsp = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "task_specific_params") : NULL;
    if (tsp && !cJSON_IsNull(tsp) && !cJSON_IsObject(tsp))
        t5_fail("%s: key \"task_specific_params\" must be an object; HINT: fix the file", cfg_path);
    if (tsp && a->task) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(tsp, a->task);
        if (t && !cJSON_IsObject(t))
            t5_fail("%s: key \"task_specific_params.%s\" must be an object; HINT: fix the file", cfg_path, a->task);
        snprintf(where, sizeof where, "task_specific_params.%.150s.", a->task);
        src[1] = (GenSource){t, cfg_path, where};
    }
    if (a->predict_with_generate) take_generation(a, src);
    take_prefix(a, &src[1]);
    cJSON_Delete(gen);
    cJSON_Delete(cfg);
    free(gen_path);
    free(cfg_path);
}
