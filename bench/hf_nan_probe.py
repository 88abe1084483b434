#!/usr/bin/env python3
"""bench/hf_nan_probe.py: where does HF Seq2SeqTrainer's t5-small run (bench/quality_parity.sh's
flags) first produce a non-finite value? Issue 21's HF runs reached grad_norm nan near step 400 in
bf16. This runs the same training (same init dir, data, schedule for the full --epochs) and stops at
--stop_step; from --watch_from on, forward hooks check every module's output, tensor hooks on those
outputs check their gradients as backward reaches them, and a pre-optimizer check looks at every
parameter's gradient. The first non-finite value is printed with its step and module (forward: the
largest finite magnitude in the module's inputs; backward: the modules backward passed just before it).

    python3 bench/hf_nan_probe.py --model INIT --train_source F --train_target F [--bf16]
        [--stop_step 520] [--watch_from 300] --out DIR
Prints `PROBE ...` lines: per-step loss and grad norm from --watch_from, then `PROBE first_nonfinite ...`
or `PROBE all finite through step N`.
"""
import argparse
import os
import sys

import sentencepiece as spm
import torch
from transformers import (Seq2SeqTrainer, Seq2SeqTrainingArguments, T5ForConditionalGeneration,
                          TrainerCallback)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_seq2seq import Pairs, add_attn_argument, collate, read_lines  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--spm", default="data/sample/spiece.model")
    ap.add_argument("--train_source", nargs="+", required=True)
    ap.add_argument("--train_target", nargs="+", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup_steps", type=int, default=200)
    ap.add_argument("--epochs", type=float, default=6)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--data_seed", type=int, default=1)
    ap.add_argument("--stop_step", type=int, default=520)
    ap.add_argument("--watch_from", type=int, default=300)
    ap.add_argument("--bf16", action="store_true")
    add_attn_argument(ap)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sp = spm.SentencePieceProcessor(model_file=a.spm)
    tr = Pairs(sp, read_lines(a.train_source), read_lines(a.train_target), "translate English to Romanian: ", 128, 128)
    model = T5ForConditionalGeneration.from_pretrained(a.model, attn_implementation=a.attn_implementation)
    state = {"step": 0, "watch": False, "found": None}
    tag = "bf16" if a.bf16 else "fp32"

    def fwd_hook(name):
        def hook(mod, inp, out):
            if not state["watch"] or state["found"]:
                return
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for o in outs:  # the gradient of this output, when backward reaches it
                if torch.is_tensor(o) and o.requires_grad and o.is_floating_point():
                    o.register_hook(grad_hook(name, type(mod).__name__))
            for o in outs:
                if torch.is_tensor(o) and o.is_floating_point() and not torch.isfinite(o).all():
                    mx = max((float(i.detach().float().abs().nan_to_num(0, 0, 0).max()) for i in inp
                              if torch.is_tensor(i) and i.is_floating_point()), default=float("nan"))
                    state["found"] = (f"PROBE first_nonfinite {tag} step={state['step'] + 1} forward module={name} "
                                      f"type={type(mod).__name__} out_dtype={o.dtype} max_abs_input={mx:.4g}")
                    return
        return hook

    trail = []  # (module, finite?) in the order backward reached the modules' outputs, this step

    def grad_hook(name, kind):
        def hook(g):
            if state["found"] or not state["watch"]:
                return
            ok = bool(torch.isfinite(g).all())
            if not ok:
                before = ", ".join(f"{n}({k})" for n, k in trail[-4:])
                state["found"] = (f"PROBE first_nonfinite {tag} step={state['step'] + 1} backward: the gradient of the "
                                  f"output of {name} ({kind}, {g.dtype}) is non-finite; backward reached before it, "
                                  f"finite: {before}")
            else:
                trail.append((name, kind))
        return hook

    for name, mod in model.named_modules():
        mod.register_forward_hook(fwd_hook(name))

    class Probe(TrainerCallback):
        def on_step_begin(self, args, st, control, **kw):
            state["step"] = st.global_step
            trail.clear()
            state["watch"] = st.global_step + 1 >= a.watch_from

        def on_pre_optimizer_step(self, args, st, control, **kw):
            if not state["watch"] or state["found"]:
                return
            bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
            if bad:  # all of them: the first in named_parameters() order says nothing about the origin
                total = sum(1 for p in model.parameters() if p.grad is not None)
                state["found"] = (f"PROBE first_nonfinite {tag} step={st.global_step + 1} gradients: {len(bad)} of "
                                  f"{total} parameters non-finite ({', '.join(bad[:3])}, ...; forward all finite)")

        def on_log(self, args, st, control, logs=None, **kw):
            if logs and "loss" in logs and st.global_step >= a.watch_from:
                print(f"PROBE {tag} step={st.global_step} loss={logs['loss']} grad_norm={logs.get('grad_norm')}",
                      flush=True)

        def on_step_end(self, args, st, control, **kw):
            if state["found"] or st.global_step >= a.stop_step:
                control.should_training_stop = True

    args = Seq2SeqTrainingArguments(
        output_dir=a.out, per_device_train_batch_size=a.batch, learning_rate=a.lr, warmup_steps=a.warmup_steps,
        lr_scheduler_type="linear", num_train_epochs=a.epochs, label_smoothing_factor=0.1, logging_steps=10,
        save_strategy="no", report_to="none", bf16=a.bf16, seed=42, data_seed=a.data_seed, dataloader_num_workers=2,
        remove_unused_columns=False, logging_nan_inf_filter=False)
    Seq2SeqTrainer(model=model, args=args, train_dataset=tr, data_collator=collate, callbacks=[Probe()]).train()
    print(state["found"] or f"PROBE all finite through step {state['step'] + 1} ({tag})", flush=True)
    if state["found"]:
        return
    w = [(n, float(p.detach().abs().max())) for n, p in model.named_parameters()]
    w.sort(key=lambda x: -x[1])
    print("PROBE largest weights: " + " ".join(f"{n}={v:.3g}" for n, v in w[:5]))


if __name__ == "__main__":
    main()
