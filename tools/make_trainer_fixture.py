#!/usr/bin/env python3
"""End-to-end Trainer fixtures for train_t5: what HF Seq2SeqTrainer writes for a tiny run.

    python3 tools/make_trainer_fixture.py --out tests/fixtures [--only main,ga1] [--check]

Needs torch==2.11.0, transformers==5.17.0, sentencepiece, safetensors (the GPU machine's versions).
Everything runs on the CPU in fp32, single thread, torch.use_deterministic_algorithms(True).

Writes
  trainer_model/   tiny random T5 1.0-style model (config.json + model.safetensors, shared.weight only)
  trainer_data/    train.source / train.target = the first 24 lines of data/sample/train.*,
                   tokenized.json (max lengths 24/20) and tokenized_64_64.json (64/64) = the ids every
                   example gets (what the C tokenizer must produce)
  trainer_<run>/   args.json, trainer_state.json, train_results.json, all_results.json, steps.json
                   (+ final.safetensors for run "main") -- see tools/README.md.
  Runs: main (GA 2, smoothing 0.1), nosmooth (GA 2, no smoothing), ga1 (GA 1, batch 8, smoothing 0.1),
  padded (main with max lengths 64/64, so that source and label padding occur).

Each run is a real transformers.Seq2SeqTrainer.train() (optim="adamw_torch", sequential sampler,
dropout off), followed by trainer.save_model / log_metrics / save_metrics("train") / save_state as
examples/pytorch/translation/run_translation.py does. The per-step figures are then recomputed by an
independent plain-PyTorch loop that implements the semantics read from the installed sources
(see the docstring of `manual_run`); the script fails if the two disagree. --check also reruns every
Trainer run and requires bit-identical numbers and weights.

Loss normalization in transformers 5.17 (trainer.py; T5ForConditionalGeneration.forward has
**kwargs, so Trainer.model_accepts_loss_kwargs is True and num_items_in_batch = number of labels
!= -100 over ALL micro-batches of the optimizer step is computed and passed around):
  * label smoothing: LabelSmoother(outputs, labels, num_items_in_batch=N_step) divides the
    micro-batch's sums by N_step (not by its own token count); training_step does NOT divide by
    gradient_accumulation_steps. So the accumulated loss/gradient = token-weighted mean over the step.
  * no label smoothing: the model computes CrossEntropyLoss(ignore_index=-100) (mean over THIS
    micro-batch's tokens; T5 ignores num_items_in_batch), and training_step still does NOT divide
    by gradient_accumulation_steps (because model_accepts_loss_kwargs and num_items_in_batch is
    not None). So with GA=k the gradient and the logged loss are the SUM of k micro-batch means.
  * logged loss = sum of the micro-batch losses returned by training_step since the last log,
    divided by the number of optimizer steps since the last log (float32 accumulation, no rounding).
  * logged learning_rate = scheduler.get_last_lr()[0] read after optimizer.step() and before
    lr_scheduler.step(): the lr the update of that step used.
  * logged epoch = epoch + (micro_step + 1) / len(train_dataloader), no rounding.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
import torch.nn as nn
import torch.nn.functional as F
import sentencepiece as spm
from safetensors.torch import save_file, load_file

import transformers
from transformers import (T5Config, T5ForConditionalGeneration, Seq2SeqTrainer, Seq2SeqTrainingArguments,
                          TrainerCallback, Trainer, get_scheduler)
from transformers.trainer_pt_utils import LabelSmoother

EXPECTED_TORCH = "2.11.0"
EXPECTED_TRANSFORMERS = "5.17.0"

MODEL_SEED = 4242
N_EXAMPLES = 24
PREFIX = "translate English to Romanian: "
SPIECE = "data/sample/spiece.model"
SRC_TRAIN = ("data/sample/train.source", "data/sample/train.target")

MODEL_CONFIG = dict(vocab_size=32128, d_model=8, d_kv=4, num_heads=2, d_ff=12, num_layers=2, num_decoder_layers=2,
                    feed_forward_proj="relu", relative_attention_num_buckets=32, relative_attention_max_distance=128,
                    dropout_rate=0.1, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
# T5Config default tie_word_embeddings=True -> scale_decoder_outputs=True (T5 1.0 head, d_model^-0.5)

BASE = dict(task="translation_en_to_ro", source_prefix=PREFIX, max_source_length=24, max_target_length=20,
            per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=3, learning_rate=3e-3,
            weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-6, max_grad_norm=0.5,
            lr_scheduler_type="linear", warmup_steps=2, label_smoothing_factor=0.1, logging_steps=1, seed=42,
            sampler="sequential", dropout_rate=0.0)

RUNS = {
    "main": dict(BASE, final_weights=True),
    "nosmooth": dict(BASE, label_smoothing_factor=0.0, final_weights=False),
    "ga1": dict(BASE, gradient_accumulation_steps=1, per_device_train_batch_size=8, final_weights=False),
    # Extra: with 24/20 almost every example is truncated (no source padding at all, 2 padded label
    # positions in the whole run), so main cannot tell token-weighted GA normalization from a mean of
    # micro-batch means (6e-5 apart). 64/64 gives padding in both and separates them clearly.
    "padded": dict(BASE, max_source_length=64, max_target_length=64, final_weights=False),
}

MODEL_DIR = "tests/fixtures/trainer_model"    # as the C test passes it (relative to the repo root)
DATA_DIR = "tests/fixtures/trainer_data"


def fmt_num(x):
    """Short text for a flag value that parses back to the same double: 3e-3, 1e-6, 0.01, 0.5, 0."""
    if isinstance(x, float):
        r = repr(x)
        r = r[:-2] if r.endswith(".0") else r
        m, e = ("%e" % x).split("e")
        m = m.rstrip("0").rstrip(".")
        sci = f"{m}e{int(e)}"
        return sci if len(sci) < len(r) and float(sci) == x else r
    return str(x)


def train_t5_flags(h):
    flags = ["--model", MODEL_DIR, "--tokenizer_name", SPIECE, "--data_dir", DATA_DIR, "--task", h["task"]]
    for k in ("max_source_length", "max_target_length", "per_device_train_batch_size", "gradient_accumulation_steps",
              "max_steps", "learning_rate", "weight_decay", "adam_epsilon", "max_grad_norm", "lr_scheduler_type",
              "warmup_steps", "label_smoothing_factor", "logging_steps", "seed", "sampler", "dropout_rate"):
        flags += ["--" + k, fmt_num(h[k])]
    flags += ["--do_train"]
    return flags


# --------------------------------------------------------------------------- model and data

def build_fixture_model(model_dir):
    torch.manual_seed(MODEL_SEED)
    cfg = T5Config(**MODEL_CONFIG)
    model = T5ForConditionalGeneration(cfg)
    assert model.lm_head.weight is model.shared.weight and cfg.scale_decoder_outputs
    os.makedirs(model_dir, exist_ok=True)
    model.config.to_json_file(os.path.join(model_dir, "config.json"))
    j = json.load(open(os.path.join(model_dir, "config.json")))
    assert j["decoder_start_token_id"] == 0 and j["pad_token_id"] == 0 and j["eos_token_id"] == 1
    assert j["tie_word_embeddings"] is True and j["scale_decoder_outputs"] is True and j["dropout_rate"] == 0.1
    skip = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}
    state = {k: t.detach().clone().contiguous() for k, t in model.state_dict().items() if k not in skip}
    assert all(t.dtype == torch.float32 for t in state.values())
    save_file(state, os.path.join(model_dir, "model.safetensors"), metadata={"format": "pt"})
    return state


def load_run_model(model_dir, h):
    """The model for one run: the fixture directory loaded as train_t5 --model does, dropout overridden to 0."""
    model = T5ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32, dropout_rate=h["dropout_rate"])
    assert model.config.dropout_rate == 0.0
    drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert drops and all(m.p == 0.0 for m in drops), "dropout is not off"
    attn = [m.dropout for m in model.modules() if isinstance(getattr(m, "dropout", None), float)]
    assert attn and all(p == 0.0 for p in attn), "attention dropout is not off"  # T5Attention.dropout (a float)
    assert model.lm_head.weight is model.shared.weight
    assert model.encoder.embed_tokens.weight is model.shared.weight
    assert model.decoder.embed_tokens.weight is model.shared.weight
    assert all(p.dtype == torch.float32 for p in model.parameters())
    return model


def write_data(data_dir):
    os.makedirs(data_dir, exist_ok=True)
    for src, name in zip(SRC_TRAIN, ("train.source", "train.target")):
        with open(src, "rb") as f:
            lines = [f.readline() for _ in range(N_EXAMPLES)]
        assert all(l.endswith(b"\n") for l in lines)
        with open(os.path.join(data_dir, name), "wb") as f:
            f.write(b"".join(lines))


def tokenize(data_dir, h):
    sp = spm.SentencePieceProcessor(model_file=SPIECE)
    src = open(os.path.join(data_dir, "train.source"), encoding="utf-8").read().split("\n")[:N_EXAMPLES]
    tgt = open(os.path.join(data_dir, "train.target"), encoding="utf-8").read().split("\n")[:N_EXAMPLES]
    ms, mt = h["max_source_length"], h["max_target_length"]
    data = []
    for s, t in zip(src, tgt):
        ids = sp.encode(h["source_prefix"] + s)[:ms - 1] + [1]
        lab = sp.encode(t)[:mt - 1] + [1]
        data.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": lab})
    return data


class Seq2SeqCollator:
    """DataCollatorForSeq2Seq without a tokenizer: pad to the longest in the batch (input_ids 0,
    attention_mask 0, labels -100), decoder_input_ids = model.prepare_decoder_input_ids_from_labels."""

    def __init__(self, model):
        self.model = model

    def __call__(self, features):
        S = max(len(f["input_ids"]) for f in features)
        T = max(len(f["labels"]) for f in features)
        B = len(features)
        input_ids = torch.zeros(B, S, dtype=torch.long)
        attention_mask = torch.zeros(B, S, dtype=torch.long)
        labels = torch.full((B, T), -100, dtype=torch.long)
        for b, f in enumerate(features):
            n, m = len(f["input_ids"]), len(f["labels"])
            input_ids[b, :n] = torch.tensor(f["input_ids"])
            attention_mask[b, :n] = torch.tensor(f["attention_mask"])
            labels[b, :m] = torch.tensor(f["labels"])
        dec = self.model.prepare_decoder_input_ids_from_labels(labels=labels)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels, "decoder_input_ids": dec}


# --------------------------------------------------------------------------- the HF Trainer run

class SeqTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer with a SequentialSampler (train_t5 --sampler sequential) that records what each
    micro-batch contributes (training_step's return value and the num_items_in_batch it got)."""

    def _get_train_sampler(self, train_dataset=None):
        ds = train_dataset if train_dataset is not None else self.train_dataset
        return torch.utils.data.SequentialSampler(ds)

    def training_step(self, model, inputs, num_items_in_batch=None):
        rec = {"batch_shape_input": list(inputs["input_ids"].shape), "batch_shape_labels": list(inputs["labels"].shape),
               "label_tokens": int(inputs["labels"].ne(-100).sum()),
               "input_ids": inputs["input_ids"].tolist(), "labels": inputs["labels"].tolist(),
               "decoder_input_ids": inputs["decoder_input_ids"].tolist(),
               "num_items_in_batch": None if num_items_in_batch is None else int(num_items_in_batch)}
        loss = super().training_step(model, inputs, num_items_in_batch)
        rec["loss_returned"] = loss.item()
        self.micro_records.append(rec)
        return loss


class LogCapture(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kw):
        self.logs.append(dict(logs or {}, step=state.global_step))


def hf_run(model_dir, data, h, out_dir, optim="adamw_torch"):
    torch.manual_seed(0)  # irrelevant (sequential sampler, no dropout), Trainer calls set_seed(42) anyway
    model = load_run_model(model_dir, h)
    args = Seq2SeqTrainingArguments(
        output_dir=out_dir, do_train=True, per_device_train_batch_size=h["per_device_train_batch_size"],
        gradient_accumulation_steps=h["gradient_accumulation_steps"], max_steps=h["max_steps"],
        learning_rate=h["learning_rate"], weight_decay=h["weight_decay"], adam_beta1=h["adam_beta1"],
        adam_beta2=h["adam_beta2"], adam_epsilon=h["adam_epsilon"], max_grad_norm=h["max_grad_norm"],
        lr_scheduler_type=h["lr_scheduler_type"], warmup_steps=h["warmup_steps"],
        label_smoothing_factor=h["label_smoothing_factor"], logging_steps=h["logging_steps"], seed=h["seed"],
        save_strategy="no", report_to=[], dataloader_drop_last=False, use_cpu=True, optim=optim,
        disable_tqdm=True, train_sampling_strategy="sequential")
    cap = LogCapture()
    trainer = SeqTrainer(model=model, args=args, train_dataset=data, data_collator=Seq2SeqCollator(model),
                         callbacks=[cap])
    trainer.micro_records = []
    info = {"model_accepts_loss_kwargs": bool(trainer.model_accepts_loss_kwargs),
            "label_smoother": None if trainer.label_smoother is None else repr(trainer.label_smoother),
            "optim": str(args.optim), "default_optim": str(Seq2SeqTrainingArguments.__dataclass_fields__["optim"].default),
            "average_tokens_across_devices": bool(args.average_tokens_across_devices), "n_gpu": args.n_gpu,
            "device": str(args.device)}
    train_result = trainer.train()
    info["optimizer"] = type(trainer.optimizer).__name__ + " " + json.dumps(
        {k: v for k, v in trainer.optimizer.defaults.items() if k in ("lr", "betas", "eps", "weight_decay", "foreach", "fused")})
    info["sampler"] = type(trainer._get_train_sampler()).__name__
    info["train_dataloader_len"] = len(trainer.get_train_dataloader())
    trainer.save_model()
    metrics = dict(train_result.metrics)
    metrics["train_samples"] = len(data)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    final = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return dict(logs=cap.logs, micro=trainer.micro_records, info=info, final=final, out_dir=out_dir,
                train_loss=train_result.training_loss)


# --------------------------------------------------------------------------- independent recomputation

def manual_run(model_dir, data, h):
    """Plain PyTorch re-statement of Trainer's loop for this setup (transformers 5.17):
    micro-batches in dataset order, GA micro-batches per update; N = #labels != -100 over the update's
    micro-batches; per micro-batch loss = LabelSmoother with denominator N (smoothing) or the model's
    CE mean over the micro-batch (no smoothing); no division by GA in either case; backward each;
    logged loss = float32 sum of the micro-batch losses; grad_norm = clip_grad_norm_(max_grad_norm)
    (pre-clip norm); torch AdamW with Trainer's decay groups; lr logged = scheduler lr before
    scheduler.step(); epoch = (micro_step + 1) / len(dataloader)."""
    model = load_run_model(model_dir, h)
    model.train()
    collate = Seq2SeqCollator(model)
    bs, ga, eps = h["per_device_train_batch_size"], h["gradient_accumulation_steps"], h["label_smoothing_factor"]
    batches = [collate(data[i:i + bs]) for i in range(0, len(data), bs)]
    named = list(model.named_parameters())
    decay = Trainer.get_decay_parameter_names(None, model)
    groups = [{"params": [p for n, p in named if n in decay], "weight_decay": h["weight_decay"]},
              {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=h["learning_rate"], betas=(h["adam_beta1"], h["adam_beta2"]),
                            eps=h["adam_epsilon"], foreach=False, fused=False)
    sched = get_scheduler(h["lr_scheduler_type"], opt, num_warmup_steps=h["warmup_steps"],
                          num_training_steps=h["max_steps"])
    steps = []
    micro = 0
    for step in range(1, h["max_steps"] + 1):
        mbs = batches[(step - 1) * ga: step * ga]
        N = sum(int(b["labels"].ne(-100).sum()) for b in mbs)
        acc = torch.tensor(0.0)
        parts, nll_sum, smooth_sum = [], 0.0, 0.0
        for b in mbs:
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                        decoder_input_ids=b["decoder_input_ids"])
            lab = b["labels"]
            if eps > 0:
                lp = -F.log_softmax(out.logits, dim=-1)
                mask = lab.ne(-100)
                nll = lp.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0.0)
                sm = lp.sum(-1, dtype=torch.float32).masked_fill(~mask, 0.0)
                loss = (1 - eps) * (nll.sum() / N) + eps * (sm.sum() / (N * lp.shape[-1]))
            else:
                loss = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), lab.reshape(-1), ignore_index=-100)
            loss.backward()
            acc += loss.detach()
            parts.append(loss.item())
            ce = F.cross_entropy(out.logits.detach().reshape(-1, out.logits.shape[-1]), lab.reshape(-1),
                                 ignore_index=-100, reduction="sum").item()
            nll_sum += ce
            micro += 1
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), h["max_grad_norm"])
        opt.step()
        lr = sched.get_last_lr()[0]
        sched.step()
        model.zero_grad()
        steps.append({"step": step, "loss": acc.item(), "grad_norm": gn.item(), "learning_rate": lr,
                      "epoch": micro / len(batches), "micro_losses": parts, "num_items_in_batch": N,
                      "ce_token_mean": nll_sum / N})
    final = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return steps, final


# --------------------------------------------------------------------------- outputs

def relerr(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def chmod_tree(d):
    for root, _, files in os.walk(d):
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)


def state_for_file(state):
    skip = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}
    return {k: t.to(torch.float32).contiguous() for k, t in state.items() if k not in skip}


def do_run(name, h, out_root, data_dir, check, tmp_root):
    data = tokenize(data_dir, h)
    d = os.path.join(out_root, "trainer_" + name)
    os.makedirs(d, exist_ok=True)
    hf_out = os.path.join(tmp_root, name)
    r = hf_run(MODEL_DIR_ABS, data, h, hf_out)
    logs = [l for l in r["logs"] if "loss" in l and "grad_norm" in l]
    summary = [l for l in r["logs"] if "train_loss" in l]
    assert len(logs) == h["max_steps"] and len(summary) == 1

    # the state file as HF wrote it
    state = json.load(open(os.path.join(hf_out, "trainer_state.json")))
    hist = [e for e in state["log_history"] if "loss" in e]
    for a, b in zip(hist, logs):  # on_log dict == what lands in log_history (no rounding anywhere)
        for k in ("loss", "grad_norm", "learning_rate", "epoch", "step"):
            assert a[k] == b[k], (name, k, a[k], b[k])
    for fn in ("trainer_state.json", "train_results.json", "all_results.json"):
        shutil.copyfile(os.path.join(hf_out, fn), os.path.join(d, fn))

    # independent recomputation
    man_steps, man_final = manual_run(MODEL_DIR_ABS, data, h)
    ga = h["gradient_accumulation_steps"]
    steps_out = []
    worst = {"loss": 0.0, "grad_norm": 0.0, "learning_rate": 0.0, "epoch": 0.0, "weights": 0.0}
    bs = h["per_device_train_batch_size"]
    assert len(r["micro"]) == h["max_steps"] * ga
    for j, x in enumerate(r["micro"]):  # the Trainer saw the examples in dataset order, padded as intended
        feats = data[j * bs:(j + 1) * bs]
        S, T = max(len(f["input_ids"]) for f in feats), max(len(f["labels"]) for f in feats)
        want_in = [f["input_ids"] + [0] * (S - len(f["input_ids"])) for f in feats]
        want_lab = [f["labels"] + [-100] * (T - len(f["labels"])) for f in feats]
        want_dec = [[0] + [t if t != -100 else 0 for t in row[:-1]] for row in want_lab]
        assert (x["input_ids"], x["labels"], x["decoder_input_ids"]) == (want_in, want_lab, want_dec), (name, j)
    for k, (l, m) in enumerate(zip(logs, man_steps)):
        mic = r["micro"][k * ga:(k + 1) * ga]
        assert [x["num_items_in_batch"] for x in mic] == [m["num_items_in_batch"]] * len(mic), (mic, m)
        for key in ("loss", "grad_norm", "learning_rate", "epoch"):
            worst[key] = max(worst[key], relerr(m[key], l[key]))
        for a, b in zip(mic, m["micro_losses"]):
            worst["loss"] = max(worst["loss"], relerr(b, a["loss_returned"]))
        # what a mean of per-micro-batch means (each over its own tokens) / GA would have logged instead
        alt = sum(x["loss_returned"] * m["num_items_in_batch"] / x["label_tokens"] for x in mic) / len(mic)
        steps_out.append({
            "step": l["step"], "loss": l["loss"], "grad_norm": l["grad_norm"], "learning_rate": l["learning_rate"],
            "epoch": l["epoch"], "clipped": l["grad_norm"] > h["max_grad_norm"],
            "num_items_in_batch": m["num_items_in_batch"],
            "micro_batches": [{"examples": [i for i in range((k * ga + j) * h["per_device_train_batch_size"],
                                                             (k * ga + j + 1) * h["per_device_train_batch_size"])],
                               "input_shape": x["batch_shape_input"], "labels_shape": x["batch_shape_labels"],
                               "label_tokens": x["label_tokens"], "loss": x["loss_returned"]}
                              for j, x in enumerate(mic)],
            "ce_token_mean": m["ce_token_mean"],
            "loss_if_mean_of_microbatch_means": alt,
        })
    for key, t in r["final"].items():
        diff = (t - man_final[key]).abs().max().item() / max(man_final[key].abs().max().item(), 1e-30)
        worst["weights"] = max(worst["weights"], diff)
    assert all(v <= 1e-5 for v in worst.values()), (name, worst)

    result = {"note": "loss, grad_norm, learning_rate, epoch: the Python floats Trainer.log put in log_history "
                      "(transformers 5.17 does not round them; only the console print uses '.4g'); micro_batches[].loss: "
                      "what training_step returned for that micro-batch (their float32 sum is the step's loss)",
              "steps": steps_out, "train_loss": r["train_loss"], "summary_log": summary[0],
              "recompute_max_rel_diff": worst, "hf": r["info"]}

    if check:  # determinism: a second full Trainer run must give bit-identical numbers and weights
        r2 = hf_run(MODEL_DIR_ABS, data, h, os.path.join(tmp_root, name + "_again"))
        logs2 = [l for l in r2["logs"] if "loss" in l and "grad_norm" in l]
        same = all(a[k] == b[k] for a, b in zip(logs, logs2) for k in ("loss", "grad_norm", "learning_rate", "epoch"))
        same = same and all(torch.equal(r["final"][k], r2["final"][k]) for k in r["final"])
        assert same, f"{name}: second run differs"
        result["deterministic_rerun_identical"] = True

    if h["final_weights"]:
        saved = load_file(os.path.join(hf_out, "model.safetensors"))
        want = state_for_file(r["final"])
        assert set(saved) == set(want), (sorted(set(saved) ^ set(want)))
        assert all(torch.equal(saved[k], want[k]) for k in want)
        save_file(want, os.path.join(d, "final.safetensors"), metadata={"format": "pt"})
        if check:  # what the default optimizer (adamw_torch_fused on torch >= 2.8) would change
            rf = hf_run(MODEL_DIR_ABS, data, h, os.path.join(tmp_root, name + "_fused"), optim="adamw_torch_fused")
            fl = [l for l in rf["logs"] if "loss" in l and "grad_norm" in l]
            result["fused_optimizer_max_rel_diff"] = {
                "loss": max(relerr(a["loss"], b["loss"]) for a, b in zip(fl, logs)),
                "grad_norm": max(relerr(a["grad_norm"], b["grad_norm"]) for a, b in zip(fl, logs)),
                "weights": max(((rf["final"][k] - r["final"][k]).abs().max() /
                                r["final"][k].abs().max().clamp(min=1e-30)).item() for k in r["final"]),
                "optimizer": rf["info"]["optimizer"]}

    hyper = {k: v for k, v in h.items() if k != "final_weights"}
    flags = train_t5_flags(h)
    args_json = {
        "run": name,
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        # train_t5's CPU backend follows torch's AVX2 kernels: make the fixtures where this says AVX2
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "model_dir": MODEL_DIR, "data_dir": DATA_DIR, "tokenizer": SPIECE, "num_examples": len(data),
        "hyperparameters": hyper,
        "train_t5_flags": flags,
        "command": "./train_t5 " + " ".join(flags) + " --output_dir OUT",
        "command_note": "run from the repository root; append --output_dir <dir>",
        "compare": {"files": ["trainer_state.json:log_history[*].{loss,grad_norm,learning_rate,epoch,step}"]
                    + (["model.safetensors vs final.safetensors"] if h["final_weights"] else []),
                    "rel_tol": 1e-4},
        "hf_setup": {
            "trainer": "transformers.Seq2SeqTrainer subclass, _get_train_sampler -> SequentialSampler",
            "training_args": {"save_strategy": "no", "report_to": [], "dataloader_drop_last": False, "use_cpu": True,
                              "optim": "adamw_torch", "disable_tqdm": True, "train_sampling_strategy": "sequential",
                              "remove_unused_columns": True},
            "model": "T5ForConditionalGeneration.from_pretrained(model_dir, dtype=float32, dropout_rate=0.0)",
            "collator": "pad to longest: input_ids 0, attention_mask 0, labels -100; "
                        "decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)",
            "tokenization": "sentencepiece: ids = sp.encode(source_prefix + src)[:max_source_length-1] + [1]; "
                            "labels = sp.encode(tgt)[:max_target_length-1] + [1]",
            "after_train": "save_model(); metrics['train_samples']=len(train_dataset); log_metrics/save_metrics('train'); save_state()",
            **{k: r["info"][k] for k in r["info"]},
        },
    }
    with open(os.path.join(d, "args.json"), "w") as f:
        json.dump(args_json, f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "steps.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    chmod_tree(d)
    return result


def main():
    global MODEL_DIR_ABS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", default=None, help="comma-separated run names (main,nosmooth,ga1,padded)")
    ap.add_argument("--check", action="store_true",
                    help="rerun every Trainer run (bit-identical?) and measure the default fused optimizer")
    args = ap.parse_args()
    if torch.__version__.split("+")[0] != EXPECTED_TORCH or transformers.__version__ != EXPECTED_TRANSFORMERS:
        print(f"warning: expected torch {EXPECTED_TORCH} / transformers {EXPECTED_TRANSFORMERS}, have "
              f"{torch.__version__} / {transformers.__version__}", file=sys.stderr)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    out = args.out
    model_dir = os.path.join(out, "trainer_model")
    data_dir = os.path.join(out, "trainer_data")
    MODEL_DIR_ABS = os.path.abspath(model_dir)
    build_fixture_model(model_dir)
    write_data(data_dir)
    for fn, h in (("tokenized.json", BASE), ("tokenized_64_64.json", RUNS["padded"])):
        data = tokenize(data_dir, h)
        with open(os.path.join(data_dir, fn), "w") as f:
            f.write("[\n" + ",\n".join(json.dumps({"input_ids": e["input_ids"], "labels": e["labels"]}) for e in data)
                    + "\n]\n")
    chmod_tree(model_dir)
    chmod_tree(data_dir)

    only = set(args.only.split(",")) if args.only else None
    results = {}
    with tempfile.TemporaryDirectory(prefix="hf_trainer_fixture_") as tmp:
        for name, h in RUNS.items():
            if only and name not in only:
                continue
            results[name] = do_run(name, h, out, data_dir, args.check, tmp)

    print(f"\n{'run':<9} {'step':>4} {'loss':>20} {'grad_norm':>20} {'learning_rate':>22} {'epoch':>20} "
          f"{'N':>4} micro-batch losses")
    for name, res in results.items():
        for s in res["steps"]:
            print(f"{name:<9} {s['step']:>4} {s['loss']!r:>20} {s['grad_norm']!r:>20} {s['learning_rate']!r:>22} "
                  f"{s['epoch']!r:>20} {s['num_items_in_batch']:>4} "
                  + ", ".join(repr(m["loss"]) for m in s["micro_batches"]))
        print(f"{name:<9} train_loss {res['train_loss']!r}  recompute max rel diff "
              + " ".join(f"{k}={v:.1e}" for k, v in res["recompute_max_rel_diff"].items())
              + ("  rerun identical" if res.get("deterministic_rerun_identical") else ""))
        if "fused_optimizer_max_rel_diff" in res:
            fz = res["fused_optimizer_max_rel_diff"]
            print(f"{'':<9} default optim adamw_torch_fused vs adamw_torch: loss {fz['loss']:.1e} "
                  f"grad_norm {fz['grad_norm']:.1e} weights {fz['weights']:.1e}")
    hf = next(iter(results.values()))["hf"] if results else {}
    print("\nTrainer:", json.dumps(hf))
    total = 0
    for d in [model_dir, data_dir] + [os.path.join(out, "trainer_" + n) for n in results]:
        for root, _, files in os.walk(d):
            total += sum(os.path.getsize(os.path.join(root, fn)) for fn in files)
    print(f"total size written: {total} bytes")


if __name__ == "__main__":
    main()
