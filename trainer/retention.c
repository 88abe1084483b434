// trainer/retention.c: checkpoint retention and the best model, as transformers 5.17's Trainer
// (see retention.h; the HF functions each piece follows are named where it is).
#include "retention.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../common/json_read.h"
#include "../zero/checkpoint.h"

#define CHECKPOINT_PREFIX "checkpoint-"  // HF's PREFIX_CHECKPOINT_DIR + "-"
#define LARGE_MULTIPLIER 1e6             // HF's work-around for ratios (training_args.py)

// ---------------------------------------------------------------------------------
// the flags (TrainingArguments.__post_init__)

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

// --load_best_model_at_end: a checkpoint must exist at every evaluation, so the save and eval
// strategies match and (steps) the save interval is a multiple of the eval interval.
static void check_load_best(const TrainArgs *a) {
    if (strcmp(a->eval_strategy, a->save_strategy) != 0)
        t5_fail("--load_best_model_at_end requires the save and eval strategy to match, but found eval strategy %s "
                "and save strategy %s; HINT: give --eval_strategy and --save_strategy the same value (steps or epoch)",
                a->eval_strategy, a->save_strategy);
    if (strcmp(a->eval_strategy, "steps") != 0 || fmod(a->save_steps, a->eval_steps) == 0) return;
    if (a->eval_steps < 1 || a->save_steps < 1) {
        if (!(a->eval_steps < 1 && a->save_steps < 1))
            t5_fail("--load_best_model_at_end requires the saving steps to be a multiple of the evaluation steps, which "
                    "cannot get guaranteed when mixing ratio and absolute steps for --save_steps %g and --eval_steps %g; "
                    "HINT: give both as steps, or both as ratios", a->save_steps, a->eval_steps);
        if (fmod(a->save_steps * LARGE_MULTIPLIER, a->eval_steps * LARGE_MULTIPLIER) != 0)
            t5_fail("--load_best_model_at_end requires the saving steps to be a multiple of the evaluation steps, but "
                    "found --save_steps %g, which is not a multiple of --eval_steps %g; HINT: make --save_steps a "
                    "multiple of --eval_steps", a->save_steps, a->eval_steps);
        return;
    }
    t5_fail("--load_best_model_at_end requires the saving steps to be a round multiple of the evaluation steps, but "
            "found --save_steps %g, which is not a round multiple of --eval_steps %g; HINT: --save_steps %g",
            a->save_steps, a->eval_steps, a->eval_steps * ceil(a->save_steps / a->eval_steps));
}

void retention_check_args(TrainArgs *a) {
    if (a->save_total_limit < 0)
        t5_fail("--save_total_limit %d: must be >= 1 (the checkpoints kept); leave it out to keep every checkpoint",
                a->save_total_limit);
    if (a->metric_for_best_model && !*a->metric_for_best_model)
        t5_fail("--metric_for_best_model \"\": empty; HINT: --metric_for_best_model loss (or bleu with "
                "--predict_with_generate)");
    if (a->load_best_model_at_end) check_load_best(a);
    if (a->load_best_model_at_end && !a->metric_for_best_model) a->metric_for_best_model = "loss";
    if (a->greater_is_better < 0 && a->metric_for_best_model)
        a->greater_is_better = !ends_with(a->metric_for_best_model, "loss");
    // trainer.py create_accelerator_and_postprocess: with DeepSpeed the model-only checkpoint
    // cannot be loaded back as the best one
    if (a->save_only_model && a->load_best_model_at_end && a->deepspeed)
        t5_fail("--deepspeed can't be used with --save_only_model along with --load_best_model_at_end (as HF); HINT: "
                "drop --save_only_model");
    if (a->metric_for_best_model && !strcmp(a->eval_strategy, "no") && a->do_train) {
        char line[512];
        snprintf(line, sizeof line, "NOTICE: --metric_for_best_model %s changes nothing: there is no evaluation "
                 "during training (--eval_strategy no); HINT: --eval_strategy steps or epoch", a->metric_for_best_model);
        train_args_add_notice(a, line);
    }
}

// ---------------------------------------------------------------------------------
// finding checkpoints (trainer_utils.get_last_checkpoint, Trainer._sorted_checkpoints)

// "checkpoint-<digits>" exactly (get_last_checkpoint's ^checkpoint\-(\d+)$): its step, else -1.
static int checkpoint_step(const char *name) {
    size_t k = strlen(CHECKPOINT_PREFIX);
    if (strncmp(name, CHECKPOINT_PREFIX, k) != 0 || !name[k]) return -1;
    long v = 0;
    for (const char *p = name + k; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v > INT_MAX) return -1;
    }
    return (int)v;
}

static int cmp_int(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

// The steps of dir's checkpoint directories, ascending (malloc'd; *n of them).
static int *list_checkpoints(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    int cap = 16, *steps = mallocCheck((size_t)cap * sizeof(int));
    struct dirent *e;
    while ((e = readdir(d))) {
        int s = checkpoint_step(e->d_name);
        if (s < 0) continue;
        char *p = path_join(dir, e->d_name);
        int is_dir = path_is_dir(p);
        free(p);
        if (!is_dir) continue;
        if (*n == cap) steps = reallocCheck(steps, (size_t)(cap *= 2) * sizeof(int));
        steps[(*n)++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)*n, sizeof(int), cmp_int);
    return steps;
}

static char *checkpoint_path(const char *output_dir, int step) {
    char name[64];
    snprintf(name, sizeof name, CHECKPOINT_PREFIX "%d", step);
    return path_join(output_dir, name);
}

char *retention_last_checkpoint(const char *output_dir) {
    int n;
    int *steps = list_checkpoints(output_dir, &n);
    char *last = n > 0 ? checkpoint_path(output_dir, steps[n - 1]) : NULL;
    free(steps);
    return last;
}

// A "global_step*" directory in dir: the shards of a checkpoint (whose `latest` may be missing:
// zero_check_checkpoint names that), which a --save_only_model checkpoint never has.
static int has_tag_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) found = strncmp(e->d_name, ZERO_CKPT_TAG_PREFIX, strlen(ZERO_CKPT_TAG_PREFIX)) == 0;
    closedir(d);
    return found;
}

void retention_check_resumable(const char *dir) {
    // a checkpoint (trainer_state.json beside the model) with no optimizer state: neither the
    // shards (`latest`, global_stepN/) nor the older whole-moment files; a plain model directory has no
    // trainer_state.json, and trainer_check_resume_dir names what it lacks
    char *opt = path_join(dir, "optimizer.safetensors"), *zs = path_join(dir, "zero_state.json"),
         *model = path_join(dir, "model.safetensors"), *state = path_join(dir, "trainer_state.json"),
         *latest = path_join(dir, ZERO_CKPT_LATEST);
    int model_only = path_exists(model) && path_exists(state) && !path_exists(opt) && !path_exists(zs) &&
                     !path_exists(latest) && !has_tag_dir(dir);
    free(latest);
    free(opt);
    free(zs);
    free(model);
    free(state);
    if (model_only)
        t5_fail("--resume_from_checkpoint %s: a checkpoint without optimizer state (saved with --save_only_model), "
                "which cannot be resumed; HINT: start a new run from its weights with --model %s, or resume from a "
                "checkpoint saved without --save_only_model", dir, dir);
}

// The step of a best_model_checkpoint path (its last component), or -1.
static int best_step_of(const char *path) {
    if (!path) return -1;
    const char *slash = strrchr(path, '/');
    return checkpoint_step(slash ? slash + 1 : path);
}

// ---------------------------------------------------------------------------------
// the best model (Trainer._determine_best_metric, _save_checkpoint)

void retention_update_best(Run *r, const cJSON *metrics) {
    const char *want = r->a.metric_for_best_model;
    if (!want) return;
    char key[256];
    snprintf(key, sizeof key, "%s%s", strncmp(want, "eval_", 5) ? "eval_" : "", want);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(metrics, key);
    if (!cJSON_IsNumber(v)) {
        char have[1024] = "";
        size_t len = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, metrics) if (len < sizeof have) len += (size_t)snprintf(
            have + len, sizeof have - len, "%s%s", len ? ", " : "", it->string);
        t5_fail("--metric_for_best_model %s: \"%s\" is not found in the evaluation metrics; the available evaluation "
                "metrics are: %s; HINT: change --metric_for_best_model (bleu, chrf and gen_len need "
                "--predict_with_generate)", want, key, have);
    }
    int greater = r->a.greater_is_better > 0;
    if (!r->has_best_metric) {  // HF starts from -inf or inf
        r->best_metric = greater ? -INFINITY : INFINITY;
        r->has_best_metric = 1;
    }
    double x = v->valuedouble;
    if (greater ? x > r->best_metric : x < r->best_metric) {
        r->best_metric = x;
        if (r->p.save == STRATEGY_STEPS || r->p.save == STRATEGY_EPOCH) r->best_global_step = r->global_step;
    }
}

void retention_before_save(Run *r) {
    if (!r->best_global_step || (r->p.save != STRATEGY_STEPS && r->p.save != STRATEGY_EPOCH)) return;
    char *path = checkpoint_path(r->a.output_dir, r->best_global_step);
    // the checkpoint being written now exists once it is renamed into place (the same step)
    if (r->best_global_step == r->global_step || path_is_dir(path)) {
        free(r->best_model_checkpoint);
        r->best_model_checkpoint = path;
    } else {
        free(path);
    }
}

static void delete_checkpoint(Run *r, int step) {
    char *p = checkpoint_path(r->a.output_dir, step);
    char line[1200];
    snprintf(line, sizeof line, "Deleting older checkpoint [%s] due to args.save_total_limit", p);
    progress_log(&r->prog, line);
    remove_tree(p);
    free(p);
}

// Node-local checkpoints (RunPlan.node_local): rank 0 decided which checkpoints went (gone[k],
// k < n_gone on rank 0); every other host's lowest rank deletes the same ones from its own disk.
// Collective in that mode; nothing to do on a shared file system.
static void mirror_deletions(Run *r, const int *gone, int n_gone) {
    if (!r->p.node_local || r->comm.world == 1) return;
    long long n = is_main(r) ? n_gone : 0;
    comm_broadcast_bytes_host(&r->comm, 0, &n, sizeof n);
    if (n <= 0) return;
    int *steps = callocCheck((size_t)n, sizeof(int));
    if (is_main(r)) memcpy(steps, gone, (size_t)n * sizeof(int));
    comm_broadcast_bytes_host(&r->comm, 0, steps, (size_t)n * sizeof(int));
    if (!is_main(r) && comm_is_host_leader(&r->comm))
        for (long long i = 0; i < n; i++) {
            char *p = checkpoint_path(r->a.output_dir, steps[i]);
            remove_tree(p);
            free(p);
        }
    free(steps);
}

void retention_rotate(Run *r) {
    const int limit = r->a.save_total_limit;
    if (limit <= 0) return;
    if (!is_main(r)) return mirror_deletions(r, NULL, 0);
    int n, n_gone = 0;
    int *steps = list_checkpoints(r->a.output_dir, &n), *gone = callocCheck((size_t)n + 1, sizeof(int));
    const int best = best_step_of(r->best_model_checkpoint);
    int bi = -1;
    for (int i = 0; i < n; i++)
        if (steps[i] == best) bi = i;
    // _sorted_checkpoints: the best one moves next to last, where it is never deleted
    for (int i = bi; bi >= 0 && i < n - 2; i++) {
        int t = steps[i];
        steps[i] = steps[i + 1];
        steps[i + 1] = t;
    }
    if (n > limit) {
        // limit 1 with a best one that is not the newest: two stay, so that the run can resume
        int keep = bi >= 0 && limit == 1 && steps[n - 1] != best ? 2 : limit;
        for (int i = 0; i < n - keep; i++) delete_checkpoint(r, gone[n_gone++] = steps[i]);
    }
    mirror_deletions(r, gone, n_gone);
    free(gone);
    free(steps);
}

void retention_after_training(Run *r) {
    if (r->a.save_total_limit != 1) return;
    if (!is_main(r)) return mirror_deletions(r, NULL, 0);
    int n = 0, n_gone = 0;
    int *steps = r->best_model_checkpoint ? list_checkpoints(r->a.output_dir, &n) : NULL;
    int *gone = callocCheck((size_t)n + 1, sizeof(int));
    const int best = best_step_of(r->best_model_checkpoint);
    for (int i = 0; i < n; i++)
        if (steps[i] != best) delete_checkpoint(r, gone[n_gone++] = steps[i]);
    mirror_deletions(r, gone, n_gone);
    free(gone);
    free(steps);
}

// ---------------------------------------------------------------------------------
// trainer_state.json

void retention_state_add(const Run *r, cJSON *st) {
    if (r->best_global_step) cJSON_AddNumberToObject(st, "best_global_step", r->best_global_step);
    else cJSON_AddNullToObject(st, "best_global_step");
    if (r->has_best_metric) cJSON_AddNumberToObject(st, "best_metric", r->best_metric);
    else cJSON_AddNullToObject(st, "best_metric");
    if (r->best_model_checkpoint) cJSON_AddStringToObject(st, "best_model_checkpoint", r->best_model_checkpoint);
    else cJSON_AddNullToObject(st, "best_model_checkpoint");
}

void retention_load_state(Run *r, const char *dir) {
    char *path = path_join(dir, "trainer_state.json");
    size_t len = 0;
    char *text = read_text_file(path, &len);
    if (!text) t5_fail("%s: cannot read it (%s); HINT: --resume_from_checkpoint takes a checkpoint-N directory", path,
                       strerror(errno));
    cJSON *st = json_read_parse(text, len, path, JSON_DUP_LAST, NULL);  // as HF reads it (common/json_read.h)
    free(text);
    if (!st) t5_fail("%s: not JSON; HINT: a checkpoint written by train_t5", path);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(st, "best_global_step");
    const cJSON *metric = cJSON_GetObjectItemCaseSensitive(st, "best_metric");
    const cJSON *ckpt = cJSON_GetObjectItemCaseSensitive(st, "best_model_checkpoint");
    if (step && !cJSON_IsNull(step) &&
        !(cJSON_IsNumber(step) && step->valuedouble >= 0 && step->valuedouble <= INT_MAX &&
          step->valuedouble == floor(step->valuedouble)))
        t5_fail("%s: \"best_global_step\" must be null or a step number; HINT: a checkpoint written by train_t5", path);
    if (metric && !cJSON_IsNull(metric) && !cJSON_IsNumber(metric))
        t5_fail("%s: \"best_metric\" must be null or a number; HINT: a checkpoint written by train_t5", path);
    if (ckpt && !cJSON_IsNull(ckpt) && !cJSON_IsString(ckpt))
        t5_fail("%s: \"best_model_checkpoint\" must be null or a path; HINT: a checkpoint written by train_t5", path);
    r->best_global_step = cJSON_IsNumber(step) ? (int)step->valuedouble : 0;
    r->has_best_metric = cJSON_IsNumber(metric);
    r->best_metric = r->has_best_metric ? metric->valuedouble : 0;
    free(r->best_model_checkpoint);
    r->best_model_checkpoint = cJSON_IsString(ckpt) ? path_join("", ckpt->valuestring) : NULL;
    cJSON_Delete(st);
    free(path);
}
