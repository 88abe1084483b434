#!/usr/bin/env python3
"""Console-line fixture for train_t5: what transformers 5.17 prints for given log records.

    python3 tools/make_log_format_fixture.py --out tests/fixtures/hf_log_lines.json

Needs transformers==5.17.0 only (no torch, no GPU): pip install transformers==5.17.0.

What runs is HF's own code, not a copy of it:
  * Trainer.log (trainer.py) adds "epoch" (and num_input_tokens_seen), appends {**logs, "step"}
    to log_history and calls the callbacks' on_log. transformers.trainer imports torch, so the
    method's source is taken from the installed trainer.py (ast) and run with a stand-in `self`
    (state, args, callback_handler): the same statements, in the same order.
  * ProgressCallback.on_log (the default, tqdm's write) and PrinterCallback.on_log
    (--disable_tqdm) from transformers.trainer_callback, imported as they are; both lines are
    recorded and must be equal.
  * log_metrics / metrics_format / _secs2timedelta (trainer_pt_utils.py, which imports torch):
    their source from the installed file, run as they are (run_translation.py's
    trainer.log_metrics(split, metrics)).
The records fed in are what HF builds before Trainer.log, key for key in HF's order:
  train step   _maybe_log_save_evaluate: loss, grad_norm, learning_rate
  eval         evaluation_loop: eval_loss, then compute_metrics' keys prefixed (run_translation:
               bleu, gen_len; train_t5 adds chrf after bleu), then evaluate()'s speed_metrics:
               eval_runtime, eval_samples_per_second, eval_steps_per_second
  train end    _inner_training_loop: speed_metrics (train_runtime, train_samples_per_second,
               train_steps_per_second), total_flos, train_loss
The values are of the sizes a run logs, plus the edge cases of the formatting (ties, 1e-05,
1e+16, nan, inf, 0, whole floats, runtimes over a day).

Output: JSON {"transformers": version, "records": [...], "metrics": [...]}: each record has
"logs" (what Trainer.log got), "epoch", "num_input_tokens_seen" (or null), "step", "history"
(the log_history entry) and "line" (the printed line); each metrics case "split", "metrics"
and "lines". tests/test_log_format.c feeds the same through trainer/log_format.c.
"""
import argparse
import ast
import contextlib
import datetime
import io
import json
import math
import os
import types

import transformers
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from transformers.trainer_utils import speed_metrics


def hf_source_functions(module_file, names, cls=None):
    """The named top-level functions (or methods of class cls) of an installed transformers file."""
    path = os.path.join(os.path.dirname(transformers.__file__), module_file)
    tree = ast.parse(open(path).read())
    body = tree.body
    if cls:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    out = {}
    for n in body:
        if isinstance(n, ast.FunctionDef) and n.name in names:
            n.decorator_list = []
            n.returns = None
            for a in n.args.args + n.args.kwonlyargs:
                a.annotation = None
            out[n.name] = ast.unparse(n)
    missing = set(names) - set(out)
    if missing:
        raise SystemExit(f"{module_file}: no {missing} in transformers {transformers.__version__}")
    return out


def load_hf_code():
    g = {"datetime": datetime, "speed_metrics": speed_metrics}
    src = hf_source_functions("trainer_pt_utils.py", ["_secs2timedelta", "metrics_format", "log_metrics"])
    src.update(hf_source_functions("trainer.py", ["log"], cls="Trainer"))
    for s in src.values():
        exec(s, g)
    return g


class Bar:
    """tqdm's training bar: ProgressCallback writes its line with bar.write."""
    def __init__(self):
        self.lines = []

    def write(self, s):
        self.lines.append(s)


class Handler:
    """Trainer.callback_handler: on_log to ProgressCallback and PrinterCallback, in turn."""
    def __init__(self):
        self.progress = ProgressCallback()
        self.progress.training_bar = Bar()
        self.printed = []

    def on_log(self, args, state, control, logs):
        self.progress.on_log(args, state, control, logs=logs)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            PrinterCallback().on_log(args, state, control, logs=dict(logs))
        self.printed.append(buf.getvalue().rstrip("\n"))
        return control


def run_log(g, logs, epoch, tokens, step):
    state = types.SimpleNamespace(epoch=epoch, num_input_tokens_seen=tokens, global_step=step, log_history=[],
                                  is_world_process_zero=True, is_local_process_zero=True)
    args = types.SimpleNamespace(include_num_input_tokens_seen="no" if tokens is None else "all")
    handler = Handler()
    me = types.SimpleNamespace(state=state, args=args, callback_handler=handler, control=None,
                               _initial_num_input_tokens_seen=0)
    given = dict(logs)
    g["log"](me, logs)  # Trainer.log(self, logs): no start_time (the train-speed keys stay out)
    line = handler.progress.training_bar.lines[0]
    if handler.printed[0] != line:
        raise SystemExit(f"ProgressCallback and PrinterCallback differ: {line!r} vs {handler.printed[0]!r}")
    return {"logs": given, "epoch": epoch, "num_input_tokens_seen": tokens, "step": step,
            "history": state.log_history[0], "line": line}


def run_metrics(g, split, metrics):
    me = types.SimpleNamespace(is_world_process_zero=lambda: True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        g["log_metrics"](me, split, dict(metrics))
    return {"split": split, "metrics": metrics, "lines": buf.getvalue().splitlines()}


def records():
    """(logs, epoch, num_input_tokens_seen, step) in HF's key order (see the docstring)."""
    def train(loss, gn, lr):
        return {"loss": loss, "grad_norm": gn, "learning_rate": lr}

    def ev(loss, bleu=None, chrf=None, gen_len=None, rt=7.3308, sps=6.821, stps=0.273):
        d = {"eval_loss": loss}
        if bleu is not None:
            d.update({"eval_bleu": bleu, "eval_chrf": chrf, "eval_gen_len": gen_len})
        d.update({"eval_runtime": rt, "eval_samples_per_second": sps, "eval_steps_per_second": stps})
        return d

    def end(rt, sps, stps, flos, loss):
        return {"train_runtime": rt, "train_samples_per_second": sps, "train_steps_per_second": stps,
                "total_flos": flos, "train_loss": loss}

    return [
        (train(10.292365032950059, 0.77832543849945068, 0.0018), 0.0529100529100529, None, 10),
        (train(9.40879392251517, 0.25341033935546875, 0.0018363636363636364), 0.10582010582010581, None, 20),
        (train(8.0065317982673552, 0.4573342502117157, 1.8181818181818182e-05), 0.634920634920635, None, 120),
        (train(8.61085325331505, 3.0517578125e-05, 5e-05), 0.094736842105263161, None, 18),
        (train(0.00012345, 12345.678, 9.999999999999999e-05), 1.0, None, 95),
        (train(2.5, 1234567.0, 1e-06), 2.0, None, 190),
        (train(0.0, 0.0, 0.0), 3.0, None, 285),
        (train(float("nan"), float("inf"), 2e-05), 0.5, None, 7),
        (train(6.00005, 0.99995, 1.00005e-05), 0.33335, 123456, 3),     # ties near the 4th digit
        (train(11.0, 1e16, 3e-05), 0.125, 1234567890, 4),
        (dict(train(7.25, 0.5, 1e-3), loss_scale=65536.0, skipped_steps=2), 0.25, None, 8),  # fp16 keys (train_t5's)
        (ev(7.95628, 0.1069, 2.2249, 31.0), 0.634920634920635, None, 120),
        (ev(10.123456789, 0.0, 0.0, 32.0, 0.5, 100.0, 4.0), 1.0, None, 10),
        (ev(8.5), 0.5, None, 60),
        (end(277.0793, 6.929, 0.433, 1.2345678e14, 8.870048522949219), 0.634920634920635, None, 120),
        (end(0.8123, 29.544, 3.693, 0.0, 9.1), 3.0, 4096, 3),
    ]


def metrics_cases():
    return [
        ("train", {"epoch": 0.634920634920635, "total_flos": 1.2345678e14, "train_loss": 8.870048522949219,
                   "train_runtime": 277.07934, "train_samples_per_second": 6.929, "train_steps_per_second": 0.433,
                   "train_samples": 3009}),
        ("train", {"epoch": 3.0, "total_flos": 123.0, "train_loss": 1.00005, "train_runtime": 90061.999,
                   "train_samples_per_second": 0.00001, "train_steps_per_second": 12345678.123456,
                   "train_peak_gpu_memory_gib": 28.42}),
        ("eval", {"eval_loss": 7.95628, "eval_bleu": 0.1069, "eval_chrf": 2.2249, "eval_gen_len": 31.0,
                  "eval_runtime": 7.3308, "eval_samples_per_second": 6.821, "eval_steps_per_second": 0.273,
                  "epoch": 0.634920634920635, "eval_samples": 50}),
        ("eval", {"eval_loss": float("nan"), "eval_runtime": 0.004, "eval_samples_per_second": 1e16,
                  "eval_steps_per_second": 2.5e-05, "epoch": 0.0, "eval_samples": 1}),
        ("predict", {"predict_loss": 3.14159265, "predict_bleu": 12.34565, "predict_gen_len": 17.5,
                     "predict_runtime": 172800.5, "predict_samples_per_second": 123.456,
                     "predict_steps_per_second": 7.0, "predict_samples": 2000}),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    if transformers.__version__ != "5.17.0":
        raise SystemExit(f"transformers {transformers.__version__}: this fixture is HF 5.17.0's (pip install transformers==5.17.0)")
    g = load_hf_code()
    doc = {"transformers": transformers.__version__,
           "records": [run_log(g, dict(l), e, t, s) for l, e, t, s in records()],
           "metrics": [run_metrics(g, sp, m) for sp, m in metrics_cases()]}
    # JSON has no nan/inf: Python writes NaN/Infinity, which the C test's cJSON does not read; strings instead
    def enc(v):
        if isinstance(v, float) and not math.isfinite(v):
            return {"float": repr(v)}
        if isinstance(v, dict):
            return {k: enc(x) for k, x in v.items()}
        if isinstance(v, list):
            return [enc(x) for x in v]
        return v
    with open(out, "w") as f:
        json.dump(enc(doc), f, indent=1)
        f.write("\n")
    print(f"{out}: {len(doc['records'])} log lines, {len(doc['metrics'])} metrics blocks (transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
