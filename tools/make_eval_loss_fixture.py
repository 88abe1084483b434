#!/usr/bin/env python3
"""tools/make_eval_loss_fixture.py: the eval_loss HF Seq2SeqTrainer.evaluate reports for the tiny
trainer fixture model, at eval batch sizes that leave a short last batch and one that does not.

    python3 tools/make_eval_loss_fixture.py [--out tests/fixtures/eval_loss]

Needs transformers==5.17.0 (the GPU machine's; any torch: CPU, fp32), sentencepiece, safetensors,
and tests/fixtures/trainer_model + trainer_data (tools/make_trainer_fixture.py).

Why: in transformers 5.17 Seq2SeqTrainer.evaluate sets gather_function = accelerator.gather (not
gather_for_metrics), and evaluation_loop appends each batch's mean loss repeated
args.eval_batch_size times -- the configured size, also for a short last batch -- then takes the
mean. So eval_loss is the plain mean of the batches' mean token losses: the last batch weighs as
much as a full one. (A mean weighted by each batch's own row count differs: 0.08% on t5-large at
200 newsdev pairs in batches of 32.)

Writes OUT/expected.json: for every case (per_device_eval_batch_size, label_smoothing_factor) the
Trainer's eval_loss, the same figure recomputed here by a plain loop over batches (the script
fails if they differ by more than 1e-6 relative), and the row-weighted mean, which the C test
requires to be far enough from the Trainer's figure that the check can tell them apart.
The eval split is the 24 lines of trainer_data/train.* at max lengths 64/64, prefix as the trainer
fixture's.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_trainer_fixture import (BASE, DATA_DIR, MODEL_DIR, Seq2SeqCollator, load_run_model,  # noqa: E402
                                  tokenize)

CASES = [(5, 0.0), (5, 0.1), (7, 0.0), (8, 0.0)]  # 24 rows: last batch 4, 4, 3, 8 (full)
LENGTHS = dict(max_source_length=64, max_target_length=64)


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def batch_losses(model, collate, rows, bs, smoothing):
    """Each batch's mean token loss, as Seq2SeqTrainer.prediction_step computes it (label smoothing:
    transformers' LabelSmoother, epsilon=smoothing, over the batch's label tokens)."""
    out = []
    with torch.no_grad():
        for k in range(0, len(rows), bs):
            b = collate(rows[k:k + bs])
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                           decoder_input_ids=b["decoder_input_ids"]).logits
            lp = -torch.log_softmax(logits.double(), -1)
            lab = b["labels"]
            mask = lab.ne(-100)
            nll = lp.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1)[mask]
            smooth = lp.sum(-1)[mask]
            n = mask.sum().item()
            out.append(((1 - smoothing) * nll.sum() / n + smoothing * smooth.sum() / (n * lp.shape[-1])).item())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/eval_loss")
    a = ap.parse_args()
    if transformers.__version__ != "5.17.0":
        sys.exit(f"transformers {transformers.__version__}: the fixture is HF 5.17's (pip install transformers==5.17.0)")
    torch.manual_seed(0)
    h = dict(BASE, **LENGTHS, dropout_rate=0.0)
    rows = tokenize(DATA_DIR, h)
    model = load_run_model(MODEL_DIR, h).eval()
    collate = Seq2SeqCollator(model)
    cases = []
    for bs, smoothing in CASES:
        args = Seq2SeqTrainingArguments(output_dir="/tmp/make_eval_loss_fixture", per_device_eval_batch_size=bs,
                                        label_smoothing_factor=smoothing, report_to="none",
                                        remove_unused_columns=False, use_cpu=True)
        got = Seq2SeqTrainer(model=model, args=args, eval_dataset=Rows(rows), data_collator=collate).evaluate()
        per = batch_losses(model, collate, rows, bs, smoothing)
        sizes = [min(bs, len(rows) - k) for k in range(0, len(rows), bs)]
        plain = sum(per) / len(per)
        weighted = sum(l * s for l, s in zip(per, sizes)) / len(rows)
        if abs(got["eval_loss"] - plain) > 1e-6 * abs(plain):
            sys.exit(f"batch {bs} smoothing {smoothing}: Trainer eval_loss {got['eval_loss']!r} is not the mean of "
                     f"batch means {plain!r} (row-weighted {weighted!r}): the semantics changed; re-read trainer.py")
        cases.append(dict(per_device_eval_batch_size=bs, label_smoothing_factor=smoothing, eval_loss=got["eval_loss"],
                          mean_of_batch_means=plain, row_weighted_mean=weighted, batch_losses=per, batch_rows=sizes))
        print(f"batch {bs} smoothing {smoothing}: eval_loss {got['eval_loss']:.9g} (row-weighted {weighted:.9g})")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump(dict(transformers=transformers.__version__, torch=torch.__version__, model=MODEL_DIR,
                       data=DATA_DIR + "/train.*", rows=len(rows), source_prefix=h["source_prefix"], **LENGTHS,
                       cases=cases), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
