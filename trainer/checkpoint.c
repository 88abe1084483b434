// trainer/checkpoint.c: what a run writes to keep (the HF model directory,
// trainer_state.json) and the resumable checkpoints OUT/checkpoint-N (the model, the
// optimizer's part through zero/checkpoint.c, trainer_state.json), and reading them back
// for --resume_from_checkpoint. Writes are atomic (common/fileio.h); rank 0 writes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../model/hf_dir.h"
#include "../zero/checkpoint.h"
#include "run.h"

void trainer_save_state(const Run *r, const char *dir) {
    if (!is_main(r)) return;
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNullToObject(st, "best_global_step");
    cJSON_AddNullToObject(st, "best_metric");
    cJSON_AddNullToObject(st, "best_model_checkpoint");
    cJSON_AddNumberToObject(st, "epoch", r->epoch);
    cJSON_AddNumberToObject(st, "eval_steps", r->a.eval_steps > 0 ? r->a.eval_steps : r->a.logging_steps);
    cJSON_AddNumberToObject(st, "global_step", r->global_step);
    cJSON_AddFalseToObject(st, "is_hyper_param_search");
    cJSON_AddTrueToObject(st, "is_local_process_zero");
    cJSON_AddTrueToObject(st, "is_world_process_zero");
    cJSON_AddItemReferenceToObject(st, "log_history", r->log_history);
    cJSON_AddNumberToObject(st, "logging_steps", r->a.logging_steps);
    cJSON_AddNumberToObject(st, "max_steps", r->total_steps);
    cJSON_AddNumberToObject(st, "num_input_tokens_seen", 0);
    cJSON_AddNumberToObject(st, "num_train_epochs", r->num_epochs);
    cJSON_AddNumberToObject(st, "save_steps", r->a.save_steps);
    cJSON_AddNumberToObject(st, "total_flos", r->total_flos);
    cJSON_AddNumberToObject(st, "train_batch_size", r->p.micro_batch);
    cJSON_AddNullToObject(st, "trial_name");
    cJSON_AddNullToObject(st, "trial_params");
    char *path = path_join(dir, "trainer_state.json");
    json_save_atomic(st, path);
    free(path);
    cJSON_Delete(st);
}

// Collective: every rank sends its partition of the weights (ZeRO stages 1-3); rank 0 writes.
void trainer_save_model(Run *r, const char *dir) {
    float *host = is_main(r) ? mallocCheck(r->m.lay.total * sizeof(float)) : NULL;
    zero_params_to_host(&r->zero, host);  // the fp32 (master) weights, whatever the compute dtype
    if (!is_main(r)) return;
    mkdir_p(dir);
    hf_save_model(dir, &r->m.cfg, &r->m.lay, host, ST_F32);
    free(host);
    char *dst = path_join(dir, "spiece.model");
    file_copy_atomic(r->spm_path, dst);
    free(dst);
}

// A checkpoint a run can resume from: fp32 weights (HF directory), the optimizer's moments,
// step and loss scaler (zero/checkpoint.c), trainer_state.json. Collective.
void trainer_save_checkpoint(Run *r, const LossScaler *scaler) {
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d", r->global_step);
    char *dir = path_join(r->a.output_dir, name);
    trainer_save_model(r, dir);
    zero_save_optimizer(&r->zero, scaler, dir);
    trainer_save_state(r, dir);
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
    int step = gs->valueint;
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(st, "total_flos");
    r->total_flos = cJSON_IsNumber(fl) ? fl->valuedouble : 0;
    cJSON_Delete(r->log_history);
    r->log_history = cJSON_Duplicate(lh, 1);
    cJSON_Delete(st);
    free(path);
    if (step < 0 || step >= r->total_steps)
        t5_fail("%s: global_step %d, but this run has %d steps; HINT: raise --max_steps/--num_train_epochs to go "
                "past the checkpoint", dir, step, r->total_steps);
    return step;
}

// --resume_from_checkpoint: every file a checkpoint needs is there (checked before
// anything is written), and there is training to resume.
void trainer_check_resume_dir(const TrainArgs *a) {
    if (!a->resume_from_checkpoint) return;
    const char *need[] = {"config.json", "model.safetensors", "optimizer.safetensors", "zero_state.json",
                          "trainer_state.json"};
    for (int i = 0; i < 5; i++) {
        char *p = path_join(a->resume_from_checkpoint, need[i]);
        if (access(p, R_OK) != 0)
            t5_fail("--resume_from_checkpoint %s: %s is missing; HINT: pass a checkpoint-N directory that "
                    "train_t5 wrote (with --save_steps / --save_strategy)", a->resume_from_checkpoint, need[i]);
        free(p);
    }
    if (!a->do_train) t5_fail("--resume_from_checkpoint needs --do_train");
}
