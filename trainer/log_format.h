// trainer/log_format.h: the console lines of a run, as transformers 5.17 prints them, while
// trainer_state.json keeps every figure at full precision:
//   - a log record (training, evaluation during training, the final train summary):
//     ProgressCallback.on_log (PrinterCallback under --disable_tqdm prints the same) writes
//     str(logs) with every float as f"{v:.4g}" and total_flos left out:
//       {'loss': '8.611', 'grad_norm': '0.7783', 'learning_rate': '0.0018', 'epoch': '0.05291'}
//   - a metrics block (run_translation.py's trainer.log_metrics): "***** train metrics *****",
//     then the keys sorted, metrics_format's values (floats round(v, 4), *_runtime as
//     H:MM:SS.cc, total_flos as NGF) right-aligned to the widest.
// Python's float repr (the shortest string that reads back the same) and round() are
// reproduced here; tests/test_log_format.c compares with lines HF's own code printed
// (tools/make_log_format_fixture.py).
#pragma once
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

// repr(v) of a Python float: "0.1", "1e-05", "1e+16", "31.0", "nan", "-inf".
void pyfloat_repr(double v, char *out, size_t cap);
// f"{v:.4g}" of a Python float.
void pyfloat_format_g4(double v, char *out, size_t cap);
// Python's round(v, ndigits) (correctly rounded, ties to even on exact ties).
double pyfloat_round(double v, int ndigits);

// Is the value of this log/metrics key a Python int in HF (step, num_input_tokens_seen,
// eval_samples, ...)? Everything else is a float.
int log_key_is_int(const char *key);

// Trainer.log's additions to a record, in its order: "epoch" (epoch NULL: not training, as
// HF's state.epoch None), then "num_input_tokens_seen" (tokens NULL: not counted). The
// log_history entry is the result plus "step"; the console line and TensorBoard get it without.
void log_record_add_hf_keys(cJSON *logs, const double *epoch, const double *tokens);

// The line ProgressCallback prints for a log record (keys in logs' order, "total_flos" left out;
// a key "step" would be printed too: callers pass the logs without it). malloc'd.
char *log_format_line(const cJSON *logs);
// HF's log_metrics block for split ("train", "eval", "predict").
void log_format_metrics(FILE *out, const char *split, const cJSON *metrics);
