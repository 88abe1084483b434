// trainer/checkpoint.c: what a run writes to keep (the HF model directory,
// trainer_state.json) and the resumable checkpoints OUT/checkpoint-N (the model, the
// optimizer's part through zero/checkpoint.c, trainer_state.json), and reading them back
// for --resume_from_checkpoint. Writes are atomic (common/fileio.h); rank 0 writes.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../model/hf_dir.h"
#include "../zero/checkpoint.h"
#include "retention.h"
#include "run.h"

void trainer_save_state(const Run *r, const char *dir) {
    if (!is_main(r)) return;
    cJSON *st = cJSON_CreateObject();
    retention_state_add(r, st);  // best_global_step, best_metric, best_model_checkpoint
    cJSON_AddNumberToObject(st, "epoch", r->epoch);
    cJSON_AddNumberToObject(st, "eval_steps", r->a.eval_steps > 0 ? r->a.eval_steps : r->a.logging_steps);
    cJSON_AddNumberToObject(st, "global_step", r->global_step);
    cJSON_AddFalseToObject(st, "is_hyper_param_search");
    cJSON_AddTrueToObject(st, "is_local_process_zero");
    cJSON_AddTrueToObject(st, "is_world_process_zero");
    cJSON_AddItemReferenceToObject(st, "log_history", r->log_history);
    cJSON_AddNumberToObject(st, "logging_steps", r->a.logging_steps);
    cJSON_AddNumberToObject(st, "max_steps", r->total_steps);
    cJSON_AddNumberToObject(st, "num_input_tokens_seen", r->input_tokens_seen);
    cJSON_AddNumberToObject(st, "num_train_epochs", r->num_epochs);
    cJSON_AddNumberToObject(st, "save_steps", r->a.save_steps);
    cJSON_AddNumberToObject(st, "total_flos", r->total_flos);
    cJSON_AddNumberToObject(st, "train_batch_size", r->p.micro_batch);
    cJSON_AddNullToObject(st, "trial_name");
    cJSON_AddNullToObject(st, "trial_params");
    char *path = path_join(dir, "trainer_state.json");
    cJSON *sorted = json_sorted_copy(st);  // HF: json.dumps(..., sort_keys=True); log entries are in HF's log order
    json_save_atomic(sorted, path);
    cJSON_Delete(sorted);
    free(path);
    cJSON_Delete(st);
}

// HF's store_flos: every rank's floating-point operations since the last store, summed over
// the ranks into total_flos. Collective.
void trainer_store_flos(Run *r) {
    double f = r->current_flos;
    comm_allreduce_sum_f64(&r->comm, &f, 1);
    r->total_flos += f;
    r->current_flos = 0;
}

// The first non-finite weight of the flat host copy: its tensor and element; -1: none.
static int first_nonfinite(const ParamLayout *lay, const float *w, size_t *at) {
    for (int i = 0; i < lay->count; i++) {
        const float *t = w + lay->specs[i].offset;
        for (size_t k = 0; k < lay->specs[i].numel; k++)
            if (!isfinite(t[k])) {
                *at = k;
                return i;
            }
    }
    return -1;
}

// Collective: every rank sends its partition of the weights (ZeRO stages 1-3); rank 0 writes.
// Weights holding inf/nan are not saved: every rank stops (a model that cannot mean anything
// is not a result).
void trainer_save_model(Run *r, const char *dir) {
    float *host = is_main(r) ? mallocCheck(r->m.lay.total * sizeof(float)) : NULL;
    zero_params_to_host(&r->zero, host);  // the fp32 (master) weights, whatever the compute dtype
    size_t at = 0;
    int bad = is_main(r) ? first_nonfinite(&r->m.lay, host, &at) : -1;
    double any = bad >= 0;
    comm_allreduce_sum_f64(&r->comm, &any, 1);
    if (any > 0) {
        if (!is_main(r)) exit(1);  // rank 0 says why
        t5_fail("after step %d the weights hold %g in tensor \"%s\" (element %zu): %s is not written; HINT: lower "
                "--learning_rate (%g), and check the weights and the data", r->global_step,
                (double)host[r->m.lay.specs[bad].offset + at], r->m.lay.specs[bad].name, at, dir, r->a.learning_rate);
    }
    if (!is_main(r)) return;
    mkdir_p(dir);
    hf_save_model(dir, &r->m.cfg, &r->m.lay, host, ST_F32);
    free(host);
    char *dst = path_join(dir, "spiece.model");
    file_copy_atomic(r->spm_path, dst);
    free(dst);
}

// A checkpoint a run can resume from: fp32 weights (HF directory), the optimizer's moments,
// step and loss scaler (zero/checkpoint.c), trainer_state.json. Collective. It is written
// into checkpoint-N.tmp and renamed when whole, so checkpoint-N is never a partial one (a
// failed write, ENOSPC or EFBIG, removes the .tmp directory at exit: common/fileio.h).
void trainer_save_checkpoint(Run *r, const LossScaler *scaler) {
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d", r->global_step);
    char *dir = path_join(r->a.output_dir, name);
    size_t n = strlen(dir);
    char *tmp = mallocCheck(n + 5);
    snprintf(tmp, n + 5, "%s.tmp", dir);
    if (is_main(r)) {
        remove_tree(tmp);  // left by a run that was killed while saving
        mkdir_p(tmp);
        fileio_remove_at_exit(tmp);
    }
    trainer_store_flos(r);
    trainer_save_model(r, tmp);
    if (!r->a.save_only_model) zero_save_optimizer(&r->zero, scaler, tmp);  // --save_only_model: the model alone
    trainer_save_state(r, tmp);
    if (is_main(r)) {
        remove_tree(dir);  // --overwrite_output_dir: an older run's checkpoint of this step
        if (rename(tmp, dir) != 0)
            t5_fail("renaming %s to %s failed: %s; HINT: check the permissions of --output_dir %s", tmp, dir,
                    strerror(errno), r->a.output_dir);
        fileio_keep(tmp);
    }
    r->last_checkpoint_step = r->global_step;
    free(tmp);
    free(dir);
}

// --resume_from_checkpoint: the trainer's side (step, epoch, flos, log history); the
// optimizer's is zero_load_optimizer. Returns the step to resume at.
int trainer_load_state(Run *r, const char *dir) {
    char *path = path_join(dir, "trainer_state.json");
    char *text = read_text_file(path, NULL);
    if (!text) t5_fail("%s: cannot read it; HINT: --resume_from_checkpoint takes a checkpoint-N directory", path);
    cJSON *st = cJSON_Parse(text);
    free(text);
    const cJSON *gs = st ? cJSON_GetObjectItemCaseSensitive(st, "global_step") : NULL;
    const cJSON *lh = st ? cJSON_GetObjectItemCaseSensitive(st, "log_history") : NULL;
    if (!cJSON_IsNumber(gs) || !cJSON_IsArray(lh))
        t5_fail("%s: malformed (global_step and log_history are needed)", path);
    double g = gs->valuedouble;
    if (!(g >= 0 && g <= INT_MAX && g == floor(g)))
        t5_fail("%s: \"global_step\" is %g, expected a whole number of steps in [0, %d]; HINT: a checkpoint written by "
                "train_t5", path, g, INT_MAX);
    int step = (int)g;
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(st, "total_flos");
    if (fl && !(cJSON_IsNumber(fl) && isfinite(fl->valuedouble) && fl->valuedouble >= 0))
        t5_fail("%s: \"total_flos\" must be a finite number >= 0; HINT: a checkpoint written by train_t5", path);
    r->total_flos = fl ? fl->valuedouble : 0;
    const cJSON *seen = cJSON_GetObjectItemCaseSensitive(st, "num_input_tokens_seen");
    if (seen && !(cJSON_IsNumber(seen) && isfinite(seen->valuedouble) && seen->valuedouble >= 0))
        t5_fail("%s: \"num_input_tokens_seen\" must be a finite number >= 0; HINT: a checkpoint written by train_t5", path);
    r->input_tokens_seen = seen ? seen->valuedouble : 0;
    cJSON_Delete(r->log_history);
    r->log_history = cJSON_Duplicate(lh, 1);
    cJSON_Delete(st);
    free(path);
    if (step < 0 || step >= r->total_steps)
        t5_fail("%s: global_step %d, but this run has %d steps; HINT: raise --max_steps/--num_train_epochs to go "
                "past the checkpoint", dir, step, r->total_steps);
    return step;
}

// --resume_from_checkpoint: the checkpoint is of --model's architecture (its weights are
// what loads, while the memory plan and DeepSpeed's "auto" buckets follow --model).
void trainer_check_resume_model(const TrainArgs *a) {
    T5Config want, have;
    if (hf_resolve_model(a->model, &want) && strcmp(a->init, "random") != 0)
        want.untied_lm_head = hf_probe_untied(a->model);
    hf_resolve_model(a->resume_from_checkpoint, &have);
    have.untied_lm_head = hf_probe_untied(a->resume_from_checkpoint);
    char diff[160];
    if (t5_config_diff(&want, &have, diff, sizeof diff))
        t5_fail("--resume_from_checkpoint %s is not a checkpoint of --model %s (%s: --model's vs the checkpoint's); "
                "HINT: resume with the --model the checkpoint was trained from", a->resume_from_checkpoint, a->model,
                diff);
}

// --resume_from_checkpoint: every file a checkpoint needs is there (checked before
// anything is written), and there is training to resume.
void trainer_check_resume_dir(const TrainArgs *a) {
    if (!a->resume_from_checkpoint) return;
    if (!path_is_dir(a->resume_from_checkpoint))
        t5_fail("--resume_from_checkpoint %s: %s; HINT: pass a checkpoint-N directory that train_t5 wrote",
                a->resume_from_checkpoint, path_exists(a->resume_from_checkpoint) ? "not a directory" : "not found");
    const char *need[] = {"config.json", "model.safetensors", "optimizer.safetensors", "zero_state.json",
                          "trainer_state.json"};
    for (int i = 0; i < 5; i++) {
        char *p = path_join(a->resume_from_checkpoint, need[i]);
        if (path_is_dir(p))
            t5_fail("--resume_from_checkpoint %s: %s is a directory, where a file is expected; HINT: pass a "
                    "checkpoint-N directory that train_t5 wrote", a->resume_from_checkpoint, need[i]);
        if (access(p, R_OK) != 0)
            t5_fail("--resume_from_checkpoint %s: %s is missing; HINT: pass a checkpoint-N directory that "
                    "train_t5 wrote (with --save_steps / --save_strategy)", a->resume_from_checkpoint, need[i]);
        free(p);
    }
    if (!a->do_train) t5_fail("--resume_from_checkpoint needs --do_train");
}
