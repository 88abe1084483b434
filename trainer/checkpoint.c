// trainer/checkpoint.c: what a run writes to keep (the HF model directory, streamed tensor by
// tensor to rank 0; trainer_state.json) and the resumable checkpoints OUT/checkpoint-N (the
// model, every rank's shard through zero/checkpoint.c, trainer_state.json, `latest` last),
// and reading them back for --resume_from_checkpoint. Writes are atomic (common/fileio.h).
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "../common/json_read.h"
#include "../model/hf_dir.h"
#include "../zero/checkpoint.h"
#include "retention.h"
#include "run.h"

// Who writes a checkpoint's small files (config.json, spiece.model, trainer_state.json) and
// renames its directory into place: rank 0 on a shared file system; with node-local storage
// (RunPlan.node_local) the lowest rank of every host, each on its own disk.
static int writes_small_files(const Run *r) { return r->p.node_local ? comm_is_host_leader(&r->comm) : is_main(r); }

// Rank 0's trainer_state.json text to every host's lowest rank (node-local checkpoints: every
// host's copy is rank 0's, log history included). Collective.
static void save_state_on_each_host(const Run *r, cJSON *sorted, const char *path) {
    char *text = is_main(r) ? cJSON_PrintUnformatted(sorted) : NULL;
    if (is_main(r) && !text) t5_die(__FILE__, __LINE__, "cJSON_PrintUnformatted failed (out of memory)", NULL);
    long long n = text ? (long long)strlen(text) + 1 : 0;
    comm_broadcast_bytes_host(&r->comm, 0, &n, sizeof n);
    if (!text) text = callocCheck((size_t)n, 1);
    comm_broadcast_bytes_host(&r->comm, 0, text, (size_t)n);
    if (writes_small_files(r)) {
        cJSON *copy = is_main(r) ? NULL : json_read_parse(text, strlen(text), path, JSON_DUP_REFUSE, NULL);
        if (!is_main(r) && !copy) t5_die(__FILE__, __LINE__, "trainer_state.json from rank 0 does not parse", NULL);
        json_save_atomic(copy ? copy : sorted, path);
        cJSON_Delete(copy);
    }
    if (is_main(r)) cJSON_free(text);
    else free(text);
}

void trainer_save_state(const Run *r, const char *dir, int every_host) {
    every_host = every_host && r->p.node_local;
    if (!is_main(r) && !every_host) return;
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
    if (every_host) save_state_on_each_host(r, sorted, path);
    else json_save_atomic(sorted, path);
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

// Collective: the fp32 (master) weights streamed to rank 0, tensor by tensor in pieces of at
// most half the checkpoint chunk (zero_ckpt_chunk_elems): each rank sends its part of the
// piece, comm_gather_bytes_host puts the parts in rank order, which is flat order, and rank 0
// appends them to the open model.safetensors (config.json first). Rank 0 holds a piece and
// its own part of it at a time, so never more than one tensor. Weights holding inf/nan are
// not saved: the rank that finds one says where, every rank stops, and the unfinished file
// is removed (a model that cannot mean anything is not a result).
void trainer_save_model(Run *r, const char *dir) {
    ZeroState *z = &r->zero;
    const ParamLayout *lay = &r->m.lay;
    zero_sync(z);
    if (!zero_has_fp32_weights(z))
        t5_die(__FILE__, __LINE__, "trainer_save_model: no fp32 weights (16-bit compute loaded without them)",
               "a bug in the caller: load with ModelLoadOptions.host_weights and pass them to zero_init");
    StWriter w;
    StTensorDesc *descs = NULL;
    if (is_main(r)) descs = hf_save_begin(dir, NULL, &r->m.cfg, lay, 0, lay->count, ST_F32, &w);
    size_t piece_max = zero_ckpt_chunk_elems(lay) / 2 ? zero_ckpt_chunk_elems(lay) / 2 : 1;
    float *part = mallocCheck(piece_max * sizeof(float));
    size_t *counts = is_main(r) ? mallocCheck((size_t)r->comm.world * sizeof(size_t)) : NULL;
    int alone = !zero_weights_partitioned(z) || r->comm.world == 1;  // rank 0 holds every tensor whole
    char msg[512] = "";
    for (int i = 0; i < lay->count; i++) {
        const ParamSpec *s = &lay->specs[i];
        for (size_t lo = s->offset, end = s->offset + s->numel; lo < end; lo += piece_max) {
            size_t hi = end - lo < piece_max ? end : lo + piece_max;
            Range p = zero_weights_piece(z, lo, hi);
            size_t n = p.end - p.begin;
            zero_weights_piece_to_host(z, p, part);
            for (size_t k = 0; k < n && !msg[0]; k++)
                if (!isfinite(part[k]))
                    snprintf(msg, sizeof msg, "after step %d the weights hold %g in tensor \"%s\" (element %zu): %s "
                             "is not written; HINT: lower --learning_rate (%g), and check the weights and the data",
                             r->global_step, (double)part[k], s->name, p.begin + k - s->offset, dir,
                             r->a.learning_rate);
            if (alone) {  // nothing to gather: rank 0 writes its own copy
                if (is_main(r)) st_writer_write_f32(&w, part, hi - lo);
                continue;
            }
            char *all = NULL;
            comm_gather_bytes_host(&r->comm, part, n * sizeof(float), &all, counts);
            if (is_main(r)) st_writer_write_f32(&w, (const float *)all, hi - lo);
            freeCheck(all);
        }
    }
    freeCheck(part);
    freeCheck(counts);
    comm_agree_or_fail(&r->comm, msg);  // the lowest rank that found a bad value says why; all stop
    if (!is_main(r)) return;
    st_writer_close(&w);
    free(descs);
    char *dst = path_join(dir, "spiece.model");
    file_copy_atomic(r->spm_path, dst);
    free(dst);
}

// A checkpoint a run can resume from (docs/TRAINER.md, "Checkpoint format"): the fp32
// weights as an HF directory (streamed), every rank's shard of the master weights and
// moments with the index (zero/checkpoint.c), trainer_state.json, then `latest` once every
// rank has finished. Collective. It is written into checkpoint-N.tmp and renamed when whole,
// so checkpoint-N is never a partial one (a failed write, ENOSPC or EFBIG, removes the .tmp
// directory at exit: common/fileio.h).
void trainer_save_checkpoint(Run *r, const LossScaler *scaler) {
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d", r->global_step);
    char *dir = path_join(r->a.output_dir, name);
    size_t n = strlen(dir);
    char *tmp = mallocCheck(n + 5);
    snprintf(tmp, n + 5, "%s.tmp", dir);
    const int node_local = r->p.node_local;
    if (writes_small_files(r)) {
        remove_tree(tmp);  // left by a run that was killed while saving
        mkdir_p(tmp);
        fileio_remove_at_exit(tmp);
    }
    zero_ckpt_mem_begin();
    trainer_store_flos(r);
    trainer_save_model(r, tmp);  // rank 0: model.safetensors (config.json first), spiece.model
    if (node_local && writes_small_files(r) && !is_main(r)) {  // the other hosts' copies of the small files
        hf_save_config(tmp, &r->m.cfg, &r->m.lay);
        char *dst = path_join(tmp, "spiece.model");
        file_copy_atomic(r->spm_path, dst);
        free(dst);
    }
    int with_state = !r->a.save_only_model;  // --save_only_model: the model alone (it cannot be resumed)
    if (with_state) zero_save_shards(&r->zero, scaler, tmp, r->global_step, node_local);
    trainer_save_state(r, tmp, 1);
    // a barrier first: every rank's files are whole
    if (with_state) zero_save_latest(&r->zero, tmp, r->global_step, node_local);
    zero_ckpt_mem_report(&r->zero, "save");
    if (writes_small_files(r)) {
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

// The end of training (HF's save_model into --output_dir). At stage 3 with the DeepSpeed key
// stage3_gather_16bit_weights_on_model_save false (DeepSpeed's default) the weights are
// never gathered: --output_dir gets the ZeRO shards, the index and `latest` (as HF's
// Trainer writes the DeepSpeed checkpoint then) with config.json and spiece.model, and
// `train_t5 export` makes the HF directory from them. Otherwise model.safetensors is
// streamed as for a checkpoint (fp32 masters). Whichever is written, the other kind left by
// an earlier run in the directory goes, so the directory never holds two different models.
void trainer_save_final(Run *r, const LossScaler *scaler) {
    const char *out = r->a.output_dir;
    int shards_only = r->zero.stage == 3 && r->a.deepspeed &&
                      !r->p.ds_loaded.zero.stage3_gather_16bit_weights_on_model_save.v;
    char *stale = path_join(out, shards_only ? "model.safetensors" : ZERO_CKPT_LATEST);
    if (is_main(r) && path_is_file(stale) && remove(stale) != 0)
        t5_fail("%s: cannot remove the earlier run's file (%s); HINT: check the permissions of --output_dir", stale,
                strerror(errno));
    free(stale);
    if (!shards_only) return trainer_save_model(r, out);
    zero_save_shards(&r->zero, scaler, out, r->global_step, 0);  // the final model: rank 0's index
    zero_save_latest(&r->zero, out, r->global_step, 0);
    if (!is_main(r)) return;
    hf_save_config(out, &r->m.cfg, &r->m.lay);
    char *dst = path_join(out, "spiece.model");
    file_copy_atomic(r->spm_path, dst);
    free(dst);
    printf("stage3_gather_16bit_weights_on_model_save is false (%s): %s holds the ZeRO shards (global_step%d/, "
           "latest), not a model.safetensors; run `train_t5 export %s %s/hf` to get an HF directory\n",
           r->a.deepspeed, out, r->global_step, out, out);
}

// run.h: a resume's rules for trainer_state.json, shared with import-deepspeed.
#define HINT_STATE "HINT: a checkpoint-N directory as train_t5 or HF Trainer wrote it"
cJSON *trainer_state_read(const char *path, int *step) {
    size_t len = 0;
    char *text = read_text_file(path, &len);
    if (!text) t5_fail("%s: cannot read it; " HINT_STATE, path);
    cJSON *st = json_read_parse(text, len, path, JSON_DUP_LAST, NULL);  // as HF reads it (common/json_read.h)
    free(text);
    const cJSON *gs = st ? cJSON_GetObjectItemCaseSensitive(st, "global_step") : NULL;
    const cJSON *lh = st ? cJSON_GetObjectItemCaseSensitive(st, "log_history") : NULL;
    if (!cJSON_IsNumber(gs) || !cJSON_IsArray(lh))
        t5_fail("%s: malformed (global_step and log_history are needed); " HINT_STATE, path);
    double g = gs->valuedouble;
    if (!(g >= 0 && g <= INT_MAX && g == floor(g)))
        t5_fail("%s: \"global_step\" is %g, expected a whole number of steps in [0, %d]; " HINT_STATE, path, g,
                INT_MAX);
    const char *counts[] = {"total_flos", "num_input_tokens_seen"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, counts[i]);
        if (v && !(cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0))
            t5_fail("%s: \"%s\" must be a finite number >= 0; " HINT_STATE, path, counts[i]);
    }
    *step = (int)g;
    return st;
}

// --resume_from_checkpoint: the trainer's side (step, epoch, flos, log history); the
// optimizer's is zero_load_optimizer. Returns the step to resume at.
int trainer_load_state(Run *r, const char *dir) {
    char *path = path_join(dir, "trainer_state.json");
    int step;
    cJSON *st = trainer_state_read(path, &step);
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(st, "total_flos");
    r->total_flos = fl ? fl->valuedouble : 0;
    const cJSON *seen = cJSON_GetObjectItemCaseSensitive(st, "num_input_tokens_seen");
    r->input_tokens_seen = seen ? seen->valuedouble : 0;
    cJSON_Delete(r->log_history);
    r->log_history = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(st, "log_history"), 1);
    cJSON_Delete(st);
    free(path);
    if (step < 0 || step > r->total_steps)
        t5_fail("%s: global_step %d, but this run has %d steps; HINT: raise --max_steps/--num_train_epochs to go "
                "past the checkpoint, or add --overwrite_output_dir to train again from scratch", dir, step,
                r->total_steps);
    // the run's last step (a stop signal in it, or the final save cut short): no step is left, and the
    // same command finishes the run -- the final model, then --do_eval / --do_predict -- as HF's does
    if (step == r->total_steps && is_main(r))
        printf("%s is the run's last step (%d of %d): nothing is left to train; the run finishes from it (the final "
               "model, then the evaluations asked for)\n", dir, step, r->total_steps);
    return step;
}

// --resume_from_checkpoint: the checkpoint is of --model's architecture (its weights are
// what loads, while the memory plan and DeepSpeed's "auto" buckets follow --model).
void trainer_check_resume_model(const TrainArgs *a) {
    T5Config want, have;
    if (hf_resolve_model(a->model, &want) && strcmp(a->init, "random") != 0)
        want.untied_lm_head = hf_probe_untied(a->model);
    hf_resolve_model(a->resume_from_checkpoint, &have);
    // a node-local checkpoint on a host other than rank 0's has no weights file: config.json
    // (written by train_t5: tie_word_embeddings as the weights are) says whether the head is tied
    if (hf_has_weights_file(a->resume_from_checkpoint)) have.untied_lm_head = hf_probe_untied(a->resume_from_checkpoint);
    char diff[160];
    if (t5_config_diff(&want, &have, diff, sizeof diff))
        t5_fail("--resume_from_checkpoint %s is not a checkpoint of --model %s (%s: --model's vs the checkpoint's); "
                "HINT: resume with the --model the checkpoint was trained from", a->resume_from_checkpoint, a->model,
                diff);
}

// --resume_from_checkpoint: every file a checkpoint needs is there (checked before
// anything is written), and there is training to resume.
void trainer_check_resume_dir(const TrainArgs *a, int node_local) {
    if (!a->resume_from_checkpoint) return;
    if (!path_is_dir(a->resume_from_checkpoint))
        t5_fail("--resume_from_checkpoint %s: %s; HINT: pass a checkpoint-N directory that train_t5 wrote",
                a->resume_from_checkpoint, path_exists(a->resume_from_checkpoint) ? "not a directory" : "not found");
    const char *need[] = {"config.json", "model.safetensors", "trainer_state.json"};
    for (int i = 0; i < 3; i++) {
        // node-local storage: only rank 0's host has model.safetensors; the weights come from the shards
        if (i == 1 && node_local && zero_checkpoint_has_shards(a->resume_from_checkpoint)) continue;
        char *p = path_join(a->resume_from_checkpoint, need[i]);
        if (path_is_dir(p))
            t5_fail("--resume_from_checkpoint %s: %s is a directory, where a file is expected; HINT: pass a "
                    "checkpoint-N directory that train_t5 wrote", a->resume_from_checkpoint, need[i]);
        file_refuse_non_regular(p, NULL);  // a FIFO would pass access(): said here, as what it is
        if (access(p, R_OK) != 0)
            t5_fail("--resume_from_checkpoint %s: %s is missing; HINT: pass a checkpoint-N directory that "
                    "train_t5 wrote (with --save_steps / --save_strategy)", a->resume_from_checkpoint, need[i]);
        free(p);
    }
    zero_check_checkpoint(a->resume_from_checkpoint, node_local);  // latest, the index, every shard (here) at its size
    if (!a->do_train) t5_fail("--resume_from_checkpoint needs --do_train");
}
