#!/usr/bin/env python3
"""Load a T5 model directory in HF transformers and compute the loss on a fixture batch.

    python3 tools/check_hf_load.py MODEL_DIR FIXTURE_DIR [--compare-logits]

MODEL_DIR: an HF model directory (config.json + model.safetensors), e.g. one written by train_t5.
FIXTURE_DIR: a directory made by tools/make_fixtures.py (reference.safetensors, reference.json).
Prints one line:
    hf_loss <plain CE mean over labels != -100> hf_loss_smoothed <LabelSmoother with the fixture's eps>
and, with --compare-logits, a line `max_abs_logits_diff <max |logits - reference logits|>`.

The model is loaded with T5ForConditionalGeneration.from_pretrained(dtype=float32), put in eval
mode, and run with use_cache=False and decoder_input_ids from the fixture. The forward runs with
autograd enabled (parameters still requiring grad): on the CPU that reproduces the fixture logits
bit for bit, while torch.no_grad() takes another matmul path (differences ~1e-6 relative).

If MODEL_DIR's model.safetensors carries an lm_head.weight (untied head), the tool checks that
transformers kept the loaded lm_head equal to it. transformers 5.17 always configures T5 as tied,
but keeps lm_head untied when the file has both shared.weight and lm_head.weight with different
values; if they are bit-identical it ties them (harmless). A WARNING is printed (stderr) when the
loaded head differs from the file's lm_head.weight.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file

import transformers
from transformers import T5ForConditionalGeneration
from transformers.trainer_pt_utils import LabelSmoother


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("fixture_dir")
    ap.add_argument("--compare-logits", action="store_true",
                    help="also print max |logits - reference logits| (meaningful when MODEL_DIR holds the "
                         "fixture's initial weights, e.g. the fixture directory itself)")
    ap.add_argument("--label-smoothing", type=float, default=None,
                    help="override the fixture's label_smoothing for hf_loss_smoothed")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    ref = load_file(os.path.join(args.fixture_dir, "reference.safetensors"))
    with open(os.path.join(args.fixture_dir, "reference.json")) as f:
        info = json.load(f)
    eps = info["label_smoothing"] if args.label_smoothing is None else args.label_smoothing

    model = T5ForConditionalGeneration.from_pretrained(args.model_dir, dtype=torch.float32)
    model.eval()
    model.config.use_cache = False

    V = model.config.vocab_size
    if V != ref["logits"].shape[-1]:
        sys.exit(f"error: model vocab_size {V} != fixture vocab {ref['logits'].shape[-1]}")

    # Untied head check: compare what transformers loaded with the file's lm_head.weight.
    st_path = os.path.join(args.model_dir, "model.safetensors")
    status = 0
    if os.path.exists(st_path):
        with safe_open(st_path, "pt") as f:
            keys = set(f.keys())
            if "lm_head.weight" in keys:
                file_head = f.get_tensor("lm_head.weight").to(torch.float32)
                file_shared = f.get_tensor("shared.weight").to(torch.float32) if "shared.weight" in keys else None
                loaded = model.lm_head.weight.detach()
                tied = model.lm_head.weight is model.shared.weight
                if not torch.equal(loaded, file_head):
                    print("WARNING: transformers re-tied lm_head: the loaded lm_head.weight differs from the file's "
                          f"lm_head.weight (max diff {(loaded - file_head).abs().max().item():.3g}, tied={tied}); "
                          "the loss below is NOT the untied model's loss", file=sys.stderr)
                    status = 2
                elif tied and file_shared is not None and not torch.equal(file_shared, file_head):
                    print("WARNING: lm_head is tied to shared.weight although the file has different tensors",
                          file=sys.stderr)
                    status = 2
                else:
                    print(f"note: untied lm_head.weight kept as in the file (tied={tied}, "
                          f"scale_decoder_outputs={model.config.scale_decoder_outputs})", file=sys.stderr)
    else:
        print(f"note: {st_path} not found (sharded or .bin checkpoint?); untied-head check skipped", file=sys.stderr)

    out = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"],
                decoder_input_ids=ref["decoder_input_ids"], use_cache=False)
    logits = out.logits.detach()
    labels = ref["labels"]
    hf_loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100).item()
    hf_smoothed = LabelSmoother(epsilon=eps)(out, labels, shift_labels=False).item() if eps > 0 else hf_loss
    print("hf_loss %.9g hf_loss_smoothed %.9g" % (hf_loss, hf_smoothed))
    if args.compare_logits:
        print("max_abs_logits_diff %.9g" % (logits - ref["logits"]).abs().max().item())
    sys.exit(status)


if __name__ == "__main__":
    main()
