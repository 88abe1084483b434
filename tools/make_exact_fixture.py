#!/usr/bin/env python3
"""Full-vocabulary fixtures ("a drift from transformers after the first AdamW step"): HF Seq2SeqTrainer
runs of tiny T5s with the full T5 vocabulary (32128), where torch's fp32 rounding shows.

    python3 tools/make_exact_fixture.py [--out tests/fixtures/exact] [--only relu_3dec,...] [--check]

Needs ./train_t5 (built; it makes the initial weights) and torch==2.11.0, transformers==5.17.0,
accelerate, sentencepiece, safetensors. Everything runs on the CPU in fp32, one thread,
torch.use_deterministic_algorithms(True). What torch computes depends on its CPU kernels: the
figures were made with torch's AVX2 kernels (printed as cpu_capability), which train_t5's CPU
backend follows (kernels/cpu/crossentropy.c, kernels/cpu/optimizer.c).

Writes (KBs: the weights are not stored)
  data/            train.source / train.target: the first 16 lines of wmt_en_ro val.source/val.target
                   (--wmt_dir, default /work/shared/data/wmt_en_ro), bytes unchanged
  <case>/config.json   the architecture (HF T5Config, transformers 5.17)
  <case>/args.json     the initial weights: `./train_t5 convert --model <case> --init random --seed S
                       --output_dir MODEL` (train_t5's counter-based init, params.c) and the checksum of
                       MODEL/model.safetensors; train_t5_flags (with {model} for MODEL); tolerances
  <case>/steps.json    per step: loss, grad_norm, learning_rate, epoch (log_history, unrounded), clipped,
                       num_items_in_batch, grad_norms (torch.linalg.vector_norm of every parameter's
                       gradient before clipping, the values clip_grad_norm_ stacks); final_norms (L2 norm
                       of every parameter after the run, float64 of the fp32 weights); with --check:
                       rerun_threads2 (the same Trainer run on 2 threads: transformers' own noise)

Each case is a real transformers.Seq2SeqTrainer.train() (tools/make_trainer_fixture.py: optim
"adamw_torch", sequential sampler, dropout 0, the T5 tokenizer data/sample/spiece.model), batch 4,
max lengths 32/32, 4 steps (the 16 examples once), logging every step; the per-step figures are
checked against make_trainer_fixture.manual_run (a plain PyTorch loop), which must agree bit for bit.

| case | FFN | head | enc/dec | d_model / heads x d_kv / d_ff | buckets | smoothing | lr, schedule | wd | clip |
| relu_3dec       | relu  | tied, scaled   | 2/3 | 24 / 3x16 / 64 | 32/128 | 0   | 1e-3 constant   | 0    | 1.0 |
| relu_3dec_ls    | relu  | tied, scaled   | 2/3 | 24 / 3x16 / 64 | 32/128 | 0.1 | 1e-3 constant   | 0    | 1.0 |
| relu_3enc       | relu  | tied, scaled   | 3/2 | 32 / 2x20 / 64 | 32/128 | 0   | 2e-3 constant   | 0    | 1.0 |
| gated_noscale_ls| gated | tied, unscaled | 2/2 | 32 / 4x8 / 64  | 8/20   | 0.1 | 1e-3 linear, warmup 1 | 0.01 | 0.5 |
| gated_noscale   | gated | tied, unscaled | 2/2 | 32 / 4x8 / 64  | 8/20   | 0   | 1e-3 linear, warmup 1 | 0.01 | 0.5 |
| gated_scaled_3dec_ls | gated | tied, scaled | 2/3 | 24 / 3x16 / 64 | 8/20 | 0.1 | 1e-3 constant | 0.01 | 1.0 |
"tied, unscaled" is what transformers 5.17 makes of tie_word_embeddings false: the config says
tie_word_embeddings true and scale_decoder_outputs false (one shared.weight in the file).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
import transformers
from safetensors.torch import load_file
from transformers import T5Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_trainer_fixture as M  # noqa: E402  (hf_run, manual_run, tokenize, train_t5_flags)

N_EXAMPLES = 16
WMT_FILES = ("val.source", "val.target")
COMMON_CONFIG = dict(vocab_size=32128, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
RELU_24 = dict(d_model=24, d_kv=16, num_heads=3, d_ff=64, num_layers=2, num_decoder_layers=3,
               feed_forward_proj="relu")
BASE = dict(M.BASE, max_source_length=32, max_target_length=32, per_device_train_batch_size=4,
            gradient_accumulation_steps=1, max_steps=4, learning_rate=1e-3, weight_decay=0.0, adam_epsilon=1e-8,
            max_grad_norm=1.0, lr_scheduler_type="constant", warmup_steps=0, label_smoothing_factor=0.0)
GATED_H = dict(BASE, weight_decay=0.01, max_grad_norm=0.5, lr_scheduler_type="linear", warmup_steps=1,
               label_smoothing_factor=0.1)
INNER32_D24 = dict(d_model=24, d_kv=8, num_heads=4, d_ff=40, num_layers=2, num_decoder_layers=2,
                   feed_forward_proj="gated-gelu", relative_attention_num_buckets=8, relative_attention_max_distance=20,
                   tie_word_embeddings=False)
H_24_20 = dict(GATED_H, max_source_length=24, max_target_length=20)
CASES = {
    "relu_3dec": dict(config=RELU_24, seed=1234, h=BASE),
    "relu_3dec_ls": dict(config=RELU_24, seed=1234, h=dict(BASE, label_smoothing_factor=0.1)),
    "relu_3enc": dict(config=dict(d_model=32, d_kv=20, num_heads=2, d_ff=64, num_layers=3, num_decoder_layers=2,
                                  feed_forward_proj="relu"), seed=1, h=dict(BASE, learning_rate=2e-3)),
    "gated_noscale_ls": dict(config=dict(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, num_decoder_layers=2,
                                         feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
                                         relative_attention_max_distance=20, tie_word_embeddings=False),
                             seed=2, h=GATED_H),
    "gated_noscale": dict(config=dict(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, num_decoder_layers=2,
                                      feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
                                      relative_attention_max_distance=20, tie_word_embeddings=False),
                          seed=2, h=dict(GATED_H, label_smoothing_factor=0.0)),
    "gated_scaled_3dec_ls": dict(config=dict(RELU_24, feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
                                             relative_attention_max_distance=20),
                                 seed=7, h=dict(BASE, weight_decay=0.01, label_smoothing_factor=0.1)),
    # issue 35's exactness family: inner size (heads x d_kv) unlike d_model, unscaled tied head,
    # gated-gelu, 8/20 buckets, label smoothing, lengths 24/20 (truncation inside the batch), and
    # its neighbours: accumulation, a larger batch, relu with a scaled head, an inner size below
    # d_model, a third decoder layer
    "inner32_d24_ls": dict(config=INNER32_D24, seed=3, h=H_24_20),
    "inner32_d24_ls_ga2": dict(config=INNER32_D24, seed=3,
                               h=dict(H_24_20, per_device_train_batch_size=2, gradient_accumulation_steps=2)),
    "inner32_d24_ls_b8": dict(config=INNER32_D24, seed=3, h=dict(H_24_20, per_device_train_batch_size=8, max_steps=2)),
    "inner40_d24_relu_ls": dict(config=dict(INNER32_D24, num_heads=5, feed_forward_proj="relu",
                                            tie_word_embeddings=True), seed=4, h=H_24_20),
    "inner16_d32_ls": dict(config=dict(INNER32_D24, d_model=32, num_heads=2), seed=5, h=H_24_20),
    "inner32_d24_3dec_ls": dict(config=dict(INNER32_D24, num_decoder_layers=3), seed=6, h=H_24_20),
}
# early steps tight, later ones loose: AdamW's first steps turn ulp-level differences of
# near-zero gradients (|g| ~ eps) into lr-sized ones, and transformers drifts from itself (other
# thread counts, machines) by ~3e-4 in grad_norm at step 4
TOL = {"loss": 1e-6, "grad_norm_early": 1e-6, "early_steps": 2, "grad_norm_late": 1e-3,
       "tensor_grad_norm_step1": 2e-6, "tensor_grad_norm_step2": 1e-5, "final_norms": 1e-5}


def checksum(path):
    """Sum of the file's bytes read as little-endian uint32 words (zero-padded), mod 2^64."""
    b = open(path, "rb").read()
    b += b"\0" * (-len(b) % 4)
    return int(np.frombuffer(b, dtype="<u4").astype(np.uint64).sum(dtype=np.uint64))


def write_data(wmt_dir, data_dir):
    os.makedirs(data_dir, exist_ok=True)
    for src, dst in zip(WMT_FILES, ("train.source", "train.target")):
        with open(os.path.join(wmt_dir, src), "rb") as f:
            lines = [f.readline() for _ in range(N_EXAMPLES)]
        assert all(l.endswith(b"\n") for l in lines)
        with open(os.path.join(data_dir, dst), "wb") as f:
            f.write(b"".join(lines))


def make_model(case_dir, seed, out_dir):
    cmd = ["./train_t5", "convert", "--model", case_dir, "--init", "random", "--seed", str(seed),
           "--output_dir", out_dir]
    subprocess.run(cmd, check=True, capture_output=True)
    path = os.path.join(out_dir, "model.safetensors")
    st = load_file(path)
    assert "lm_head.weight" not in st, "the fixture models tie the head"
    return cmd, checksum(path), os.path.getsize(path)


class NormTrainer(M.SeqTrainer):
    """Records every parameter's gradient norm right before clip_grad_norm_ (the values it stacks)."""

    def _clip_grad_norm(self, model):
        self.grad_norm_records.append({n: torch.linalg.vector_norm(p.grad).item()
                                       for n, p in model.named_parameters() if p.grad is not None})
        return super()._clip_grad_norm(model)


def hf_case(model_dir, data, h, out_dir):
    records = NormTrainer.grad_norm_records = []
    saved, M.SeqTrainer = M.SeqTrainer, NormTrainer  # hf_run builds its trainer from this name
    try:
        r = M.hf_run(model_dir, data, h, out_dir)
    finally:
        M.SeqTrainer = saved
    r["grad_norms"] = records
    return r


def run_case(name, c, out, tmp, check):
    h = c["h"]
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    T5Config(**COMMON_CONFIG, **c["config"]).to_json_file(os.path.join(d, "config.json"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["tie_word_embeddings"] is True  # 5.17: tie_word_embeddings=False means unscaled, still tied
    assert cfg["scale_decoder_outputs"] is c["config"].get("tie_word_embeddings", True)
    model_dir = os.path.join(tmp, name + "_model")
    init_cmd, csum, size = make_model(d, c["seed"], model_dir)
    data = M.tokenize(os.path.join(out, "data"), h)
    r = hf_case(model_dir, data, h, os.path.join(tmp, name + "_hf"))
    logs = [l for l in r["logs"] if "loss" in l and "grad_norm" in l]
    assert len(logs) == h["max_steps"] and len(r["grad_norms"]) == h["max_steps"]
    man_steps, man_final = M.manual_run(model_dir, data, h)
    for l, m in zip(logs, man_steps):
        for k in ("loss", "grad_norm", "learning_rate", "epoch"):
            assert l[k] == m[k], (name, l["step"], k, l[k], m[k])
    assert all(torch.equal(r["final"][k], man_final[k]) for k in man_final), name
    names = [n for n in r["grad_norms"][0]]
    steps = []
    for l, m, g in zip(logs, man_steps, r["grad_norms"]):
        steps.append({"step": l["step"], "loss": l["loss"], "grad_norm": l["grad_norm"],
                      "learning_rate": l["learning_rate"], "epoch": l["epoch"],
                      "clipped": l["grad_norm"] > h["max_grad_norm"], "num_items_in_batch": m["num_items_in_batch"],
                      "grad_norms": g})
    skip = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}
    final_norms = {k: float(np.linalg.norm(v.double().numpy().reshape(-1))) for k, v in r["final"].items()
                   if k not in skip}
    result = {"note": "loss, grad_norm, learning_rate, epoch: Trainer's log_history (unrounded); grad_norms: "
                      "torch.linalg.vector_norm of each parameter's gradient before clipping (fp32), in "
                      "model.parameters() order; final_norms: L2 norm of each parameter after the run (float64)",
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "steps": steps, "final_norms": final_norms, "train_loss": r["train_loss"], "hf": r["info"]}
    if check:  # transformers' own noise: the same run on 2 threads
        torch.set_num_threads(2)
        try:
            r2 = M.hf_run(model_dir, data, h, os.path.join(tmp, name + "_hf2"))
        finally:
            torch.set_num_threads(1)
        l2 = [l for l in r2["logs"] if "loss" in l and "grad_norm" in l]
        result["rerun_threads2"] = {
            "loss": [abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(l2, logs)],
            "grad_norm": [abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(l2, logs)],
            "final_max_abs_diff": max((r2["final"][k] - r["final"][k]).abs().max().item() for k in r["final"])}
    # placeholders, not this machine's paths (--out may be a scratch directory): tests/test_exact.c
    # fills in {model} (its initial weights), {case_dir} (tests/fixtures/exact/<case>) and
    # {data_dir} (tests/fixtures/exact/data)
    flags = M.train_t5_flags(h)
    flags[flags.index("--model") + 1] = "{model}"
    flags[flags.index("--data_dir") + 1] = "{data_dir}"
    init_cmd = [("{case_dir}" if a == d else a) for a in init_cmd[:-1]] + ["{model}"]
    args = {"case": name, "torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "hyperparameters": h, "init": {"seed": c["seed"], "command": " ".join(init_cmd),
                                           "checksum_u32_sum": str(csum), "size": size},
            "train_t5_flags": flags, "tolerances": TOL}
    with open(os.path.join(d, "args.json"), "w") as f:
        json.dump(args, f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "steps.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/exact")
    ap.add_argument("--wmt_dir", default="/work/shared/data/wmt_en_ro")
    ap.add_argument("--only", default=None, help="comma-separated case names")
    ap.add_argument("--check", action="store_true", help="also rerun each case on 2 threads (transformers' own noise)")
    args = ap.parse_args()
    if not os.access("./train_t5", os.X_OK):
        sys.exit("error: ./train_t5 not built (it makes the initial weights); run make first, from the repository root")
    if torch.__version__.split("+")[0] != M.EXPECTED_TORCH or transformers.__version__ != M.EXPECTED_TRANSFORMERS:
        print(f"warning: expected torch {M.EXPECTED_TORCH} / transformers {M.EXPECTED_TRANSFORMERS}", file=sys.stderr)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    M.N_EXAMPLES = N_EXAMPLES
    data_dir = os.path.join(args.out, "data")
    if os.path.isdir(args.wmt_dir):
        write_data(args.wmt_dir, data_dir)
    elif not os.path.exists(os.path.join(data_dir, "train.source")):
        sys.exit(f"error: {args.wmt_dir} not found and {data_dir} has no data; pass --wmt_dir")
    only = set(args.only.split(",")) if args.only else None
    with tempfile.TemporaryDirectory(prefix="exact_fixture_") as tmp:
        for name, c in CASES.items():
            if only and name not in only:
                continue
            res = run_case(name, c, args.out, tmp, args.check)
            for s in res["steps"]:
                print(f"{name:<22} step {s['step']} loss {s['loss']!r:<20} grad_norm {s['grad_norm']!r:<20} "
                      f"lr {s['learning_rate']!r}")
            if "rerun_threads2" in res:
                rr = res["rerun_threads2"]
                print(f"{'':<22} 2 threads: loss " + " ".join(f"{x:.1e}" for x in rr["loss"]) + "  grad_norm "
                      + " ".join(f"{x:.1e}" for x in rr["grad_norm"]) + f"  final max abs {rr['final_max_abs_diff']:.1e}")
            sys.stdout.flush()
    total = sum(os.path.getsize(os.path.join(root, fn)) for root, _, fs in os.walk(args.out) for fn in fs)
    print(f"cpu capability {torch.backends.cpu.get_cpu_capability()}; total size written: {total} bytes")


if __name__ == "__main__":
    main()
