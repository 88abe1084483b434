// trainer/log_history.h: what `train_t5 plot` reads from a run: trainer_state.json's
// log_history (HF Trainer's format, which trainer/checkpoint.c writes) as one series per
// logged key against "step". An evaluation run after training (--do_eval without
// --evaluation_strategy steps) is not in log_history, as in HF: its eval_results.json beside
// the state gives eval_loss and eval_bleu at global_step. Bad input ends in one line naming
// the file and the fix.
#pragma once

typedef enum { LOG_LOSS = 0, LOG_EVAL_LOSS, LOG_LEARNING_RATE, LOG_GRAD_NORM, LOG_EVAL_BLEU, LOG_KEY_COUNT } LogKey;
extern const char *const log_key_names[LOG_KEY_COUNT];  // "loss", "eval_loss", ...

typedef struct {
    double *x, *y;  // (n): step, value; a non-finite value is left out (counted in LogRun.skipped)
    int n;
} LogSeries;

typedef struct {
    char *state_path;                 // DIR/trainer_state.json
    LogSeries series[LOG_KEY_COUNT];
    int entries;                      // log_history's length
    int eval_from_results;            // 1: the eval points came from eval_results.json
    int skipped;                      // values left out as non-finite: null (train_t5 writes NaN and
                                      // inf so) or NaN / Infinity / -Infinity (Python's json, HF's)
} LogRun;

// Read DIR/trainer_state.json (or DIR itself when it is that file); dies on a missing folder
// or file, invalid JSON, a malformed log_history, or one with nothing to draw.
void log_history_load(LogRun *r, const char *dir);
void log_history_free(LogRun *r);
