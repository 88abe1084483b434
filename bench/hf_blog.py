#!/usr/bin/env python3
"""bench/hf_blog.py: one row of the 2021 post's table run with HF Seq2SeqTrainer (transformers 5.17)
and, for its DeepSpeed rows, DeepSpeed 0.19.8: the HF side of bench/blog_table.sh (issue 20).

    torchrun --standalone --nproc_per_node G bench/hf_blog.py --model DIR|--preset t5-large --mode ddp|fsdp|deepspeed
        [--precision fp32|fp16] [--deepspeed configs/ds_config.json] --batch B [--cap_gib 24]
        [--n_train 2000] [--n_val 500] [--gradient_checkpointing] --out DIR

What the post's finetune_trainer.py did, in today's HF: random init (no weights can be downloaded;
bench/hf_baseline.py's presets, torch.manual_seed(0)), --freeze_embeds (shared and both
embed_tokens frozen: the tied head with them), label smoothing 0.1, lr 3e-5, adam eps 1e-6,
warm-up 5, one epoch of the first n_train pairs of data/sample/train.*, sortish sampler, then
evaluate with generation (4 beams, max length 128) on the first n_val pairs of data/sample/val.*,
BLEU by sacrebleu. Tokenized as train_t5 and the HF T5 tokenizer do (bench/hf_seq2seq.py).
- mode ddp: plain DistributedDataParallel (fp16: torch amp + GradScaler);
- mode fsdp: FairScale's --sharded_ddp is gone from transformers: FSDP SHARD_GRAD_OP (optimizer
  state and gradients sharded, as ZeRO-2) replaces it;
- mode deepspeed: the post's config file. Its hard values must equal TrainingArguments in
  transformers 5.17 (it refuses the config otherwise), so they are read from the file as its user
  would have to: fp16 from "fp16.enabled", Adam betas/eps/weight decay and lr from "optimizer",
  warm-up from the WarmupLR scheduler; the removed "cpu_offload": true becomes
  "offload_optimizer": {"device": "cpu"}.
The GPU is capped at --cap_gib with torch.cuda.set_per_process_memory_fraction (the post's 24 GB
cards). The batch: HF's own --auto_find_batch_size from --batch (on out-of-memory it retries at
0.9x, accelerate's find_executable_batch_size; the DeepSpeed rows run at --batch alone, see
main()); the batch it trains at is reported, and flagged as a lower bound when --batch
itself fit. The evaluation batch starts at the trained batch and takes
0.9x steps on out-of-memory the same way.
Rank 0 writes OUT/result.json: batch, batch_is_lower_bound, train_s, train_samples_per_second,
eval_s, eval_batch, bleu, peak_gib (torch's peak reserved memory on rank 0), mode, precision.
"""
import argparse
import json
import os
import sys

import sacrebleu
import sentencepiece as spm
import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, T5ForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_seq2seq import Pairs, collate, decode_row, read_lines  # noqa: E402
from hf_baseline import make_config  # noqa: E402

PREFIX = "translate English to Romanian: "


def ds_aligned(path):
    """The DeepSpeed config dict and the TrainingArguments its hard values require."""
    cfg = json.load(open(path))
    zo = cfg.get("zero_optimization", {})
    if zo.pop("cpu_offload", False):  # removed from DeepSpeed: its replacement
        zo["offload_optimizer"] = {"device": "cpu"}
    # The post's configs name no batch: transformers 4.2 set it from the flags, 5.17 fills only
    # "auto" keys and DeepSpeed then refuses a config without one (seen: "Either train_batch_size
    # or train_micro_batch_size_per_gpu needs to be provided"); "auto" is also what lets
    # auto_find_batch_size hand DeepSpeed each smaller batch it tries
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"):
        cfg.setdefault(key, "auto")
    args = {}
    for prec in ("fp16", "bf16"):  # a hard true/false decides; "auto" follows --precision
        enabled = cfg.get(prec, {}).get("enabled", "auto")
        if isinstance(enabled, bool):
            args[prec] = enabled
    opt = cfg.get("optimizer", {}).get("params", {})
    for key, name in (("lr", "learning_rate"), ("eps", "adam_epsilon"), ("weight_decay", "weight_decay")):
        if isinstance(opt.get(key), (int, float)):
            args[name] = opt[key]
    if isinstance(opt.get("betas"), list):
        args["adam_beta1"], args["adam_beta2"] = opt["betas"]
    sp = cfg.get("scheduler", {}).get("params", {})
    if isinstance(sp.get("warmup_num_steps"), int):
        args["warmup_steps"] = sp["warmup_num_steps"]
    return cfg, args


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="an HF directory (blog_table.sh's shared init); else --preset")
    ap.add_argument("--preset", default="t5-large")
    ap.add_argument("--gradient_checkpointing", action="store_true")
    ap.add_argument("--mode", choices=("ddp", "fsdp", "deepspeed"), default="ddp")
    ap.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    ap.add_argument("--deepspeed", default=None)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--cap_gib", type=float, default=24.0)
    ap.add_argument("--n_train", type=int, default=2000)
    ap.add_argument("--n_val", type=int, default=500)
    ap.add_argument("--beams", type=int, default=4)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="CPU plumbing check (tiny preset, fp32, ddp, one process)")
    a = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    if not a.cpu:
        dev = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(dev)
        total = torch.cuda.get_device_properties(dev).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gib * 2**30 / total), dev)
    sp = spm.SentencePieceProcessor(model_file="data/sample/spiece.model")
    tr = Pairs(sp, read_lines(["data/sample/train.source"])[:a.n_train], read_lines(["data/sample/train.target"])[:a.n_train],
               PREFIX, 128, 128)
    vs, vt = read_lines(["data/sample/val.source"])[:a.n_val], read_lines(["data/sample/val.target"])[:a.n_val]
    va = Pairs(sp, vs, vt, PREFIX, 128, 128)
    torch.manual_seed(0)
    model = (T5ForConditionalGeneration.from_pretrained(a.model) if a.model
             else T5ForConditionalGeneration(make_config(a.preset)))
    for p in [model.shared.weight, model.encoder.embed_tokens.weight, model.decoder.embed_tokens.weight]:
        p.requires_grad = False  # --freeze_embeds (finetune_trainer.py's freeze_embeds for T5)

    kw = dict(learning_rate=3e-5, adam_epsilon=1e-6, warmup_steps=5, fp16=a.precision == "fp16",
              bf16=a.precision == "bf16")
    if a.mode == "deepspeed":
        ds_cfg, ds_args = ds_aligned(a.deepspeed)
        kw.update(ds_args)
        kw["deepspeed"] = ds_cfg
    elif a.mode == "fsdp":
        kw["fsdp"] = "shard_grad_op auto_wrap"
        kw["fsdp_config"] = {"transformer_layer_cls_to_wrap": ["T5Block"]}

    # DeepSpeed rows run at --batch only, and bench/blog_table.sh retries smaller batches in fresh
    # processes after an out-of-memory: transformers 5.17 refuses auto_find_batch_size with ZeRO-3
    # ("isn't supported yet"), and with ZeRO-2 + CPU offload (t5-3b, 24 GiB cap) the first
    # engine's memory was not given back: after the out-of-memory at 35 every smaller batch failed
    # at once, down to "No executable batch size found, reached zero." (seen on the H200)
    auto = not a.cpu and a.mode != "deepspeed"

    def compute_metrics(pred):
        preds = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
        out, lens = [], []
        for row in preds.tolist():
            lens.append(sum(1 for t in row if t > 0))  # HF's gen_len: the non-pad ids of each row
            out.append(decode_row(sp, row))
        return {"bleu": sacrebleu.corpus_bleu(out, [vt]).score, "gen_len": sum(lens) / max(1, len(lens))}

    args = Seq2SeqTrainingArguments(
        output_dir=a.out, per_device_train_batch_size=a.batch, per_device_eval_batch_size=a.batch,
        num_train_epochs=1, label_smoothing_factor=0.1, sortish_sampler=True, predict_with_generate=True,
        generation_num_beams=a.beams, generation_max_length=128, save_strategy="no", report_to="none",
        logging_steps=1000, auto_find_batch_size=auto, remove_unused_columns=False, use_cpu=a.cpu,
        eval_strategy="no", gradient_checkpointing=a.gradient_checkpointing, **kw)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=tr, eval_dataset=va, data_collator=collate,
                             compute_metrics=compute_metrics)
    tm = trainer.train().metrics
    batch = trainer._train_batch_size  # what auto_find_batch_size settled on
    eb, em = batch, None
    while em is None:
        try:
            trainer.args.per_device_eval_batch_size = eb
            em = trainer.evaluate(max_length=128, num_beams=a.beams)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            if eb == 1:
                raise
            eb = max(1, int(eb * 0.9))
    if rank == 0:
        res = {"mode": a.mode, "precision": "fp16" if kw.get("fp16") else "bf16" if kw.get("bf16") else "fp32",
               "batch": batch, "batch_is_lower_bound": batch == a.batch and not a.cpu,
               "train_s": tm["train_runtime"], "train_samples_per_second": tm["train_samples_per_second"],
               "eval_s": em["eval_runtime"], "eval_batch": eb, "bleu": em.get("eval_bleu"),
               "gen_len": em.get("eval_gen_len"), "model": a.model or a.preset,
               "peak_gib": 0.0 if a.cpu else torch.cuda.max_memory_reserved() / 2**30,
               "world": int(os.environ.get("WORLD_SIZE", "1"))}
        os.makedirs(a.out, exist_ok=True)
        json.dump(res, open(os.path.join(a.out, "result.json"), "w"), indent=1)
        print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
