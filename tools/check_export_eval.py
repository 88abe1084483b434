#!/usr/bin/env python3
"""tools/check_export_eval.py: the eval loss transformers gives for an HF directory (one that
train_t5 exported, issue 19), on the first N pairs of a source/target file pair, computed the
way HF Seq2SeqTrainer.evaluate does (the mean of the batches' mean token losses, the short last
batch weighing as a full one: tools/make_eval_loss_fixture.py),
with the inputs tokenized as train_t5 and HF's T5 tokenizer do (bench/hf_seq2seq.py).

    python3 tools/check_export_eval.py MODEL_DIR --source F --target F [--n 200] [--batch 32]
        [--prefix "translate English to Romanian: "] [--max_length 128] [--device cpu|cuda]

Prints `hf_eval_loss <x>` (%.9g); fp32 on the GPU when there is one (TF32 off), or on the
CPU with --device cpu (torch's CPU and CUDA kernels can differ; train_t5's CPU backend
follows torch's CPU steps).
"""
import argparse
import os
import sys

import sentencepiece as spm
import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, T5ForConditionalGeneration

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from hf_seq2seq import Pairs, collate, read_lines  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--source", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--spm", default=None, help="sentencepiece model (MODEL/spiece.model)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prefix", default="translate English to Romanian: ")
    ap.add_argument("--max_length", type=int, default=128)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when there is one)")
    ap.add_argument("--buckets", action="store_true",
                    help="also print the model's relative-position buckets for -127..127 on the device, in the "
                         "format of train_t5's t5_relative_position_bucket table (bidirectional, then causal)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sp = spm.SentencePieceProcessor(model_file=a.spm or os.path.join(a.model, "spiece.model"))
    src, tgt = read_lines([a.source])[: a.n], read_lines([a.target])[: a.n]
    ds = Pairs(sp, src, tgt, a.prefix, a.max_length, a.max_length)
    model = T5ForConditionalGeneration.from_pretrained(a.model, dtype=torch.float32)
    args = Seq2SeqTrainingArguments(output_dir="/tmp/check_export_eval", per_device_eval_batch_size=a.batch,
                                    report_to="none", remove_unused_columns=False, use_cpu=a.device == "cpu")
    if a.buckets:  # transformers' own bucket function, on the device the evaluation runs on
        dev = "cpu" if a.device == "cpu" or not torch.cuda.is_available() else "cuda"
        att = model.encoder.block[0].layer[0].SelfAttention
        rp = torch.arange(-127, 128, device=dev)
        for bi in (True, False):
            b = att._relative_position_bucket(rp, bidirectional=bi, num_buckets=model.config.relative_attention_num_buckets,
                                              max_distance=model.config.relative_attention_max_distance)
            print(("bidirectional:" if bi else "causal:"), " ".join(str(x) for x in b.tolist()))
    r = Seq2SeqTrainer(model=model, args=args, eval_dataset=ds, data_collator=collate).evaluate()
    print(f"hf_eval_loss {r['eval_loss']:.9g}")


if __name__ == "__main__":
    main()
