#!/usr/bin/env python3
"""HF transformers T5 generation speed: the evaluation baseline train_t5 has to beat (issue 15).

Measures T5ForConditionalGeneration.generate the way Seq2SeqTrainer's predict_with_generate
runs it, on the shipped validation sources: random init from a named T5 config (nothing is
downloaded; bench/hf_baseline.py's presets), model.eval(), the weights in the run's dtype
(model.to(bfloat16) for --precision bf16: HF's fastest generate, faster than fp32 weights
under autocast), sources tokenized as the HF T5 tokenizer does for T5 checkpoints
(sentencepiece ids[:max_source_length-1] + [</s>]), batches of --batch in file order padded
to the batch's longest source (DataCollatorForSeq2Seq), generate(num_beams, max_length,
early_stopping False, length_penalty 1.0: HF's defaults). One untimed warm-up batch
(max_length 8) first; then every batch, timed with torch.cuda.synchronize around the loop.

Output: INFO lines and one line for scripts:
  RESULT impl=hf model=<name> precision=<p> n=<N> batch=<B> beams=<k> max_length=<L>
         seconds=<s> samples_per_s=<x> gen_len=<mean returned width incl. start> peak_gib=<x>
Example (GPU machine): python3 bench/hf_generate.py --model t5-large --precision bf16 --n 500 --batch 64 --beams 4
CPU check: python3 bench/hf_generate.py --tiny --device cpu --n 4 --batch 2 --max-length 6
With --save DIR the model is also written as a Hugging Face directory, so that bench/eval_vs_hf.sh
runs train_t5 on the very same weights: the same tokens are generated, so both searches run the
same number of steps (two different random inits stop at different lengths, greedy especially).
--load DIR generates with such a directory's weights instead of a random init (in --precision:
the fp32 run of a bf16-saved model holds the same values). --predictions FILE writes the decoded
predictions, one a line, as Seq2SeqTrainer's predict_with_generate + run_translation decode them
(tokens after the decoder start, pad / </s> / <unk> and the extra ids skipped, stripped), for
comparing with train_t5's generated_predictions.txt. metric_gen_len in RESULT is run_translation's
gen_len (the mean count of non-pad ids of each returned row), the figure train_t5's eval_gen_len is.
"""
import argparse
import os
import sys
import time

import torch
from transformers import T5ForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_baseline import PRESETS, make_config  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="t5-large", choices=[k for k in PRESETS if k != "tiny"])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--source", default="data/sample/val.source")
    ap.add_argument("--spm", default="data/sample/spiece.model")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--beams", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--max-source-length", type=int, default=128)
    ap.add_argument("--source-prefix", default="", help="text put before every source, as run_translation's "
                    "--source_prefix (train_t5 --task translation_en_to_ro puts 'translate English to Romanian: ')")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--save", metavar="DIR", help="save_pretrained the (random) model to DIR, so that train_t5 "
                    "generates with the same weights (--model DIR)")
    ap.add_argument("--load", metavar="DIR", help="from_pretrained DIR (a --save directory) instead of a random init")
    ap.add_argument("--predictions", metavar="FILE", help="write the decoded predictions, one a line")
    ap.add_argument("--blas", choices=["default", "cublas", "cublaslt"], default="default",
                    help="torch.backends.cuda.preferred_blas_library: the same products on other GEMM kernels "
                    "(bench/eval_vs_hf.sh HF_SELF=1: how far rounding alone moves the predictions)")
    a = ap.parse_args()
    if a.blas != "default":
        torch.backends.cuda.preferred_blas_library(a.blas)
        print(f"INFO: GEMMs on {torch.backends.cuda.preferred_blas_library()}")

    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=a.spm)
    lines = [l.rstrip("\n") for l in open(a.source, encoding="utf-8")][: a.n]
    if len(lines) < a.n:
        sys.exit(f"error: {a.source} has {len(lines)} lines, --n {a.n}")
    ids = [sp.encode(a.source_prefix + l)[: a.max_source_length - 1] + [1] for l in lines]

    torch.manual_seed(a.seed)
    name = "tiny" if a.tiny else a.model
    dev = torch.device(a.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    if a.load:
        model = T5ForConditionalGeneration.from_pretrained(a.load, dtype=dtype).to(dev).eval()
        name = a.load
    else:
        model = T5ForConditionalGeneration(make_config(name)).to(dev, dtype=dtype).eval()
    if a.save:
        model.save_pretrained(a.save)
        print(f"INFO: weights saved to {a.save}")

    batches = []
    for s in range(0, len(ids), a.batch):
        chunk = ids[s : s + a.batch]
        L = max(len(x) for x in chunk)
        inp = torch.tensor([x + [0] * (L - len(x)) for x in chunk], dtype=torch.long, device=dev)
        att = torch.tensor([[1] * len(x) + [0] * (L - len(x)) for x in chunk], dtype=torch.long, device=dev)
        batches.append((inp, att))
    gen = dict(num_beams=a.beams, max_length=a.max_length, early_stopping=False, length_penalty=1.0, do_sample=False)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    with torch.inference_mode():
        model.generate(input_ids=batches[0][0], attention_mask=batches[0][1], **dict(gen, max_length=8))
        sync()
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        width, outs = 0, []
        t0 = time.perf_counter()
        for inp, att in batches:
            out = model.generate(input_ids=inp, attention_mask=att, **gen)
            width += out.shape[1] * out.shape[0]
            outs.append(out)  # read after the timing: no host copy inside the loop
        sync()
        secs = time.perf_counter() - t0
    rows = [r for out in outs for r in out.tolist()]
    nonpad = sum(sum(1 for t in r if t != 0) for r in rows)  # run_translation: count_nonzero(pred != pad)
    if a.predictions:
        pieces = sp.get_piece_size()
        with open(a.predictions, "w", encoding="utf-8") as f:
            for r in rows:  # batch_decode(skip_special_tokens=True) + strip; r[0] is the decoder start
                f.write(sp.decode([t for t in r[1:] if 2 < t < pieces]).strip() + "\n")
        print(f"INFO: {len(rows)} predictions written to {a.predictions}")
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else 0.0
    print(f"INFO: {len(batches)} batches of {a.batch}, {a.beams} beams, max_length {a.max_length}: {secs:.2f} s")
    print(f"RESULT impl=hf model={name} precision={a.precision} n={a.n} batch={a.batch} beams={a.beams} "
          f"max_length={a.max_length} seconds={secs:.3f} samples_per_s={a.n / secs:.2f} "
          f"gen_len={width / a.n:.2f} metric_gen_len={nonpad / a.n:.4f} peak_gib={peak:.2f}")


if __name__ == "__main__":
    main()
