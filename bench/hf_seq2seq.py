#!/usr/bin/env python3
"""bench/hf_seq2seq.py: the HF side of bench/quality_parity.sh (issue 21): a Seq2SeqTrainer
fine-tune of a T5 directory on source/target line files, as train_t5 runs it with the same flags.

Inputs are tokenized the way HF's T5 tokenizer does for T5 checkpoints (sentencepiece ids of
prefix + text, cut to max_len - 1, then </s> = 1; transformers 5.17's T5Tokenizer(vocab_file=)
does not load the model, see docs), padded per batch (input pad 0, label pad -100).
Training: Seq2SeqTrainer with HF's defaults (AdamW, linear decay after warm-up, the random
sampler seeded by --data_seed), label smoothing, dropout from the model's config, bf16 autocast.
Evaluation: eval_loss every --eval_steps on the validation pairs; at the end --beams-beam
generation of the validation sources, scored with sacrebleu (BLEU and chrF).
Writes OUT/trainer_state.json (HF's log_history: `train_t5 plot` reads it),
OUT/generated_predictions.txt and OUT/result.json (eval loss, BLEU, chrF, wall times).
"""
import argparse
import json
import os
import time

import sacrebleu
import sentencepiece as spm
import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, T5ForConditionalGeneration


def read_lines(paths):
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            out += [line.rstrip("\n") for line in f]
    return out


def encode(sp, text, max_len):
    return sp.encode(text)[: max_len - 1] + [1]


class Pairs(torch.utils.data.Dataset):
    def __init__(self, sp, src, tgt, prefix, max_src, max_tgt):
        self.rows = [(encode(sp, prefix + s, max_src), encode(sp, t, max_tgt)) for s, t in zip(src, tgt)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i][0], "labels": self.rows[i][1]}


def collate(rows):
    ls = max(len(r["input_ids"]) for r in rows)
    lt = max(len(r["labels"]) for r in rows)
    ids = torch.tensor([r["input_ids"] + [0] * (ls - len(r["input_ids"])) for r in rows])
    lab = torch.tensor([r["labels"] + [-100] * (lt - len(r["labels"])) for r in rows])
    # the decoder's inputs as DataCollatorForSeq2Seq makes them (labels shifted right after the
    # start id 0, -100 as pad 0): with label smoothing the Trainer pops "labels" before the
    # forward, so the model cannot derive them itself
    dec = torch.cat([torch.zeros_like(lab[:, :1]), lab[:, :-1]], 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": lab, "decoder_input_ids": dec}


def decode_row(sp, row):
    """A generated row as HF's T5 tokenizer decodes it with skip_special_tokens: after the start id,
    up to the first </s> (1), without pad (0) and the <extra_id_*> ids past the SentencePiece
    vocabulary (32000-32127, which a random model can emit), -100 fillers dropped."""
    ids = [t for t in row[1:] if t >= 0]
    if 1 in ids:
        ids = ids[: ids.index(1)]
    return sp.decode([t for t in ids if 1 < t < sp.get_piece_size()])


def generate(model, sp, src, prefix, max_src, beams, max_len, batch, bf16=True):
    model.eval()
    enc = [encode(sp, prefix + s, max_src) for s in src]
    order = sorted(range(len(enc)), key=lambda i: -len(enc[i]))
    out = [None] * len(enc)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):  # as the training precision
        for k in range(0, len(order), batch):
            idx = order[k:k + batch]
            b = collate([{"input_ids": enc[i], "labels": [1]} for i in idx])
            g = model.generate(input_ids=b["input_ids"].cuda(), attention_mask=b["attention_mask"].cuda(),
                               num_beams=beams, max_length=max_len, decoder_start_token_id=0, eos_token_id=1,
                               pad_token_id=0)
            for i, row in zip(idx, g.tolist()):
                out[i] = decode_row(sp, row)
    return out


def add_attn_argument(ap):
    """--attn_implementation, for this driver and bench/hf_nan_probe.py."""
    ap.add_argument("--attn_implementation", default="sdpa", choices=("sdpa", "eager"),
                    help="transformers 5.17's T5 runs torch SDPA by default (position bias as a float mask that "
                         "needs its gradient); eager is the matmul-softmax path")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--spm", required=True)
    ap.add_argument("--train_source", nargs="+", required=True)
    ap.add_argument("--train_target", nargs="+", required=True)
    ap.add_argument("--val_source", required=True)
    ap.add_argument("--val_target", required=True)
    ap.add_argument("--prefix", default="translate English to Romanian: ")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data_seed", type=int, default=42)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup_steps", type=int, default=200)
    ap.add_argument("--epochs", type=float, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--eval_batch", type=int, default=64)
    ap.add_argument("--eval_steps", type=int, default=250)
    ap.add_argument("--logging_steps", type=int, default=50)
    ap.add_argument("--label_smoothing", type=float, default=0.1)
    ap.add_argument("--max_source_length", type=int, default=128)
    ap.add_argument("--max_target_length", type=int, default=128)
    ap.add_argument("--beams", type=int, default=4)
    ap.add_argument("--gen_max_length", type=int, default=128)
    ap.add_argument("--bf16", action="store_true")
    add_attn_argument(ap)
    a = ap.parse_args()
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 runs: plain fp32 GEMMs, as train_t5's
    sp = spm.SentencePieceProcessor(model_file=a.spm)
    tr = Pairs(sp, read_lines(a.train_source), read_lines(a.train_target), a.prefix, a.max_source_length,
               a.max_target_length)
    vs, vt = read_lines([a.val_source]), read_lines([a.val_target])
    va = Pairs(sp, vs, vt, a.prefix, a.max_source_length, a.max_target_length)
    model = T5ForConditionalGeneration.from_pretrained(a.model, attn_implementation=a.attn_implementation)
    args = Seq2SeqTrainingArguments(
        output_dir=a.out, per_device_train_batch_size=a.batch, per_device_eval_batch_size=a.eval_batch,
        learning_rate=a.lr, warmup_steps=a.warmup_steps, lr_scheduler_type="linear", num_train_epochs=a.epochs,
        label_smoothing_factor=a.label_smoothing, eval_strategy="steps", eval_steps=a.eval_steps,
        logging_steps=a.logging_steps, save_strategy="no", report_to="none", bf16=a.bf16, seed=a.seed,
        data_seed=a.data_seed, dataloader_num_workers=2, remove_unused_columns=False)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=tr, eval_dataset=va, data_collator=collate)
    t_train = time.time()
    trainer.train()
    t_train = time.time() - t_train
    final = trainer.evaluate()
    t_gen = time.time()
    preds = generate(trainer.model, sp, vs, a.prefix, a.max_source_length, a.beams, a.gen_max_length,
                     a.eval_batch, a.bf16)
    t_gen = time.time() - t_gen
    bleu = sacrebleu.corpus_bleu(preds, [vt]).score
    chrf = sacrebleu.corpus_chrf(preds, [vt]).score
    os.makedirs(a.out, exist_ok=True)
    trainer.state.save_to_json(os.path.join(a.out, "trainer_state.json"))
    with open(os.path.join(a.out, "generated_predictions.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(preds) + "\n")
    res = {"eval_loss": final["eval_loss"], "bleu": bleu, "chrf": chrf, "train_s": t_train, "generate_s": t_gen,
           "total_s": time.time() - t0, "steps": trainer.state.global_step, "seed": a.seed, "data_seed": a.data_seed}
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("RESULT " + " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()))


if __name__ == "__main__":
    main()
