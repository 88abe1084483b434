#!/usr/bin/env python3
"""tools/make_ds_checkpoint.py: checkpoints written by DeepSpeed itself, and HF .bin twins,
as reference fixtures for train_t5's importers (issue 19).

Runs on the GPU machine (torch 2.11 + transformers 5.17 there; DeepSpeed 0.19.8 from the
wheels, see bench/ds_env.sh), one process:

    torchrun --standalone --nproc_per_node 1 tools/make_ds_checkpoint.py --out DIR [--preset tiny|t5-small]

For each ZeRO stage in --stages (default 2 3) it trains a random-init T5 (bf16, a torch AdamW
handed to deepspeed.initialize, so no op is JIT-built) for --steps steps on random tokens, then
    DIR/zero{S}/checkpoint/            engine.save_checkpoint(tag="global_step{N}"): latest,
                                       global_step{N}/*_model_states.pt, *_optim_states.pt,
                                       zero_to_fp32.py (as HF Trainer + DeepSpeed write them)
    DIR/zero{S}/zero_to_fp32.safetensors   DeepSpeed's own zero_to_fp32 output (fp32 master
                                       weights, HF names): what an import must equal
    DIR/zero{S}/moments.safetensors    each parameter's AdamW moments as DeepSpeed's
                                       safe_get_full_optimizer_state gives them, named
                                       "NAME.exp_avg" / "NAME.exp_avg_sq" (the moments' oracle)
and, once:
    DIR/hf_bin_zip/      pytorch_model.bin: torch.save of the state dict (torch's zip format)
    DIR/hf_bin_legacy/   the same state dict through torch.save(_use_new_zipfile_serialization=False)
    DIR/hf_bin_sharded/  pytorch_model-0000i-of-0000n.bin + pytorch_model.bin.index.json
    DIR/hf_safetensors/  the safetensors twin (model.safetensors) of the same weights
DIR/summary.json lists the files, the losses and DeepSpeed's version.
"""
import argparse
import glob
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from transformers import T5Config, T5ForConditionalGeneration

PRESETS = {
    # tiny: small enough to commit (a few hundred KB per stage)
    "tiny": dict(vocab_size=96, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
                 relative_attention_num_buckets=8, relative_attention_max_distance=16, feed_forward_proj="relu"),
    "t5-small": dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6,
                     num_heads=8, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                     feed_forward_proj="relu"),
}


def make_model(preset, seed):
    torch.manual_seed(seed)
    cfg = T5Config(**PRESETS[preset], dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return T5ForConditionalGeneration(cfg)


def batch(cfg, b, s, t, gen):
    src = torch.randint(2, cfg.vocab_size, (b, s), generator=gen)
    tgt = torch.randint(2, cfg.vocab_size, (b, t), generator=gen)
    src[:, -1] = 1
    tgt[:, -1] = 1
    return src, tgt


def write_bin_twins(out, preset, seed):
    # transformers 5.17's save_pretrained writes safetensors only (safe_serialization=False
    # included), so the .bin files are torch.save'd here the way transformers 4.x wrote them:
    # the whole state dict (tied tensors sharing one storage), or shards + the .bin index
    model = make_model(preset, seed)
    sd = model.state_dict()
    model.save_pretrained(os.path.join(out, "hf_safetensors"))
    dirs = {}
    for kind in ("hf_bin_zip", "hf_bin_legacy", "hf_bin_sharded"):
        d = os.path.join(out, kind)
        os.makedirs(d, exist_ok=True)
        model.config.save_pretrained(d)
        dirs[kind] = d
    torch.save(sd, os.path.join(dirs["hf_bin_zip"], "pytorch_model.bin"))
    torch.save(sd, os.path.join(dirs["hf_bin_legacy"], "pytorch_model.bin"), _use_new_zipfile_serialization=False)
    limit = 40 * 1024 if preset == "tiny" else 100 * 1024 * 1024
    shards, cur, size = [], {}, 0
    for k, v in sd.items():
        nbytes = v.numel() * v.element_size()
        if cur and size + nbytes > limit:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = v
        size += nbytes
    shards.append(cur)
    weight_map, total = {}, 0
    for i, sh in enumerate(shards):
        fname = f"pytorch_model-{i + 1:05d}-of-{len(shards):05d}.bin"
        torch.save(sh, os.path.join(dirs["hf_bin_sharded"], fname))
        for k, v in sh.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(dirs["hf_bin_sharded"], "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return {k: sorted(os.listdir(os.path.join(out, k))) for k in
            ("hf_safetensors", "hf_bin_zip", "hf_bin_sharded", "hf_bin_legacy")}


def run_stage(out, preset, stage, steps, seed):
    import deepspeed
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    model = make_model(preset, seed)
    cfg = model.config
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    ds_cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": stage},
        "steps_per_print": 1000000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_cfg)
    gen = torch.Generator().manual_seed(seed + stage)
    losses = []
    for _ in range(steps):
        src, tgt = batch(cfg, 2, 12, 8, gen)
        loss = engine(input_ids=src.cuda(), labels=tgt.cuda()).loss
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    sd = os.path.join(out, f"zero{stage}")
    ck = os.path.join(sd, "checkpoint")
    if os.path.exists(sd):
        shutil.rmtree(sd)
    tag = f"global_step{steps}"
    engine.save_checkpoint(ck, tag=tag)
    cfg.save_pretrained(ck)  # HF Trainer writes the model's config.json beside global_stepN/
    fp32 = get_fp32_state_dict_from_zero_checkpoint(ck, tag=tag)
    # the tied lm_head comes back as its own entry; safetensors refuses shared storage
    fp32 = {k: v.detach().clone().contiguous().float() for k, v in fp32.items()}
    save_file(fp32, os.path.join(sd, "zero_to_fp32.safetensors"), metadata={"format": "pt"})
    result = {"stage": stage, "tag": tag, "losses": losses, "files": sorted(
        os.path.relpath(p, sd) for p in glob.glob(os.path.join(ck, "**"), recursive=True) if os.path.isfile(p)),
        "zero_to_fp32_tensors": len(fp32)}
    # the moments through DeepSpeed's own per-parameter API (safe_get_full_optimizer_state
    # reassembles a parameter's state from the partitions): the importer's oracle
    from deepspeed.utils import safe_get_full_optimizer_state
    moments = {}
    for name, prm in engine.module.named_parameters():
        for k in ("exp_avg", "exp_avg_sq"):
            t = safe_get_full_optimizer_state(prm, k)
            if t is None:
                raise RuntimeError(f"DeepSpeed has no {k} for {name}")
            moments[f"{name}.{k}"] = t.detach().float().cpu().contiguous().clone()
    save_file(moments, os.path.join(sd, "moments.safetensors"), metadata={"format": "pt"})
    result["moments"] = f"{len(moments)} tensors"
    engine.destroy()
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import deepspeed
    summary = {"deepspeed": deepspeed.__version__, "torch": torch.__version__, "preset": a.preset,
               "config": PRESETS[a.preset], "bin_twins": write_bin_twins(a.out, a.preset, a.seed), "stages": []}
    for s in a.stages:
        summary["stages"].append(run_stage(a.out, a.preset, s, a.steps, a.seed))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
