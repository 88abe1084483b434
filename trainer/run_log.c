// trainer/run_log.c: what a run logs and writes as metrics, as HF's Trainer does: a
// log_history record (with the console line and TensorBoard's scalars), the log after
// training, the TensorBoard event file, and SPLIT_results.json merged into all_results.json
// (see run_log.h).
#include "run_log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "log_format.h"
#include "progress.h"
#include "tensorboard.h"

// HF's Trainer.log: "epoch" (while training) and the input tokens are added, the callbacks
// see the record (the console line of ProgressCallback, TensorBoard's scalars), and
// log_history gets it with "step". `logs` is built in HF's key order by the caller; taken over.
void run_log_entry(Run *r, cJSON *logs, int print) {
    double tokens = r->input_tokens_seen;
    log_record_add_hf_keys(logs, r->a.do_train ? &r->epoch : NULL,
                           strcmp(r->a.include_num_input_tokens_seen, "no") != 0 ? &tokens : NULL);
    if (is_main(r)) {
        if (print) {
            char *line = log_format_line(logs);
            progress_log(&r->prog, line);
            free(line);
        }
        tb_log(&r->tb, logs, r->global_step);
    }
    cJSON_AddNumberToObject(logs, "step", r->global_step);
    cJSON_AddItemToArray(r->log_history, logs);
}

// HF's evaluate() after training (run_translation's --do_eval) logs too: TensorBoard gets it,
// and PrinterCallback (--disable_tqdm) prints it; ProgressCallback does not (its training bar
// is closed). trainer_state.json was written already, as in HF. `met` is left as it was.
void run_log_after_training(Run *r, const cJSON *met) {
    if (!is_main(r)) return;
    cJSON *logs = cJSON_Duplicate(met, 1);
    log_record_add_hf_keys(logs, r->a.do_train ? &r->epoch : NULL, NULL);
    if (r->a.disable_tqdm) {
        char *line = log_format_line(logs);
        progress_log(&r->prog, line);
        free(line);
    }
    tb_log(&r->tb, logs, r->global_step);
    cJSON_Delete(logs);
}

// --report_to tensorboard: the event file in the logging dir (trainer/tensorboard.h), rank 0.
void run_log_open_tensorboard(Run *r) {
    char *dir = r->a.logging_dir ? path_join(r->a.logging_dir, "") : tb_default_logdir(r->a.output_dir);
    tb_open(&r->tb, dir);
    printf("TensorBoard: %s (tensorboard --logdir %s)\n", r->tb.path, dir);
    fflush(stdout);
    free(dir);
}

// Write PREFIX_results.json with the metrics object (and merge it into all_results).
void run_log_save_metrics(Run *r, const char *split, cJSON *metrics) {
    if (!is_main(r)) return;
    char name[64];
    snprintf(name, sizeof name, "%s_results.json", split);
    char *path = path_join(r->a.output_dir, name);
    cJSON *sorted = json_sorted_copy(metrics);  // HF's save_metrics: sort_keys=True
    json_save_atomic(sorted, path);
    cJSON_Delete(sorted);
    free(path);
    cJSON *it;
    cJSON_ArrayForEach(it, metrics) {
        cJSON_DeleteItemFromObject(r->results, it->string);
        cJSON_AddItemToObject(r->results, it->string, cJSON_Duplicate(it, 1));
    }
    path = path_join(r->a.output_dir, "all_results.json");
    sorted = json_sorted_copy(r->results);
    json_save_atomic(sorted, path);
    cJSON_Delete(sorted);
    free(path);
    log_format_metrics(stdout, split, metrics);  // run_translation.py's trainer.log_metrics
    fflush(stdout);
}
