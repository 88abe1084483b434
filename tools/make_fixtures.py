#!/usr/bin/env python3
"""Reference fixtures for train_t5, computed with HF transformers on the CPU (fp32).

    python3 tools/make_fixtures.py --out tests/fixtures

Needs torch==2.11.0, transformers==5.17.0, safetensors (the versions on the GPU machine).
Writes one directory per variant (relu_tied, gated_noscale, untied), each holding an HF model
directory (config.json + model.safetensors) plus reference.safetensors / reference.json.
See tools/README.md for the file format.

What is reproduced from transformers 5.17 (read from the installed sources):
  * loss with label smoothing: transformers/trainer_pt_utils.py, class LabelSmoother.__call__,
    called as Trainer.compute_loss does for a non-causal-LM model (trainer.py, compute_loss):
    labels popped from the inputs, model(**inputs) without labels (the seq2seq collator supplies
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels = _shift_right(labels)),
    then label_smoother(outputs, labels) with shift_labels=False and num_items_in_batch = number
    of labels != -100 (Trainer._get_num_items_in_batch), which equals LabelSmoother's own
    denominator for a single batch without gradient accumulation.
  * without label smoothing: the model's own loss (CrossEntropyLoss(ignore_index=-100), mean).
  * weight-decay groups: trainer.py, Trainer.get_decay_parameter_names ->
    trainer_pt_utils.get_parameter_names(model, [nn.LayerNorm],
    [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]);
    Trainer.create_optimizer then puts named_parameters() (deduplicated) whose name is in that
    list into the decay group. NB: the pattern "bias" also matches T5's
    "relative_attention_bias.weight", so the relative position tables get NO weight decay;
    "layer_norm"/"final_layer_norm" match "_norm(?:$|\\.)".
  * untied lm_head: transformers 5.17's T5Config always sets tie_word_embeddings=True
    (tie_word_embeddings=False only turns into scale_decoder_outputs=False). On load,
    PreTrainedModel.tie_weights(missing_keys=...) (modeling_utils.py) finds both shared.weight
    and lm_head.weight in the checkpoint; if they differ (torch.equal false) it logs "... both
    are present in the checkpoints with different values, so we will NOT tie them" and keeps
    lm_head.weight untied, loaded from the file. So the untied fixture loads back untied.
    (If the two tensors in the file are bit-identical, it ties them.)
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file, load_file

import transformers
from transformers import T5Config, T5ForConditionalGeneration, Trainer, get_scheduler
from transformers.trainer_pt_utils import LabelSmoother
from transformers.models.t5.modeling_t5 import T5Attention

EXPECTED_TORCH = "2.11.0"
EXPECTED_TRANSFORMERS = "5.17.0"

VARIANTS = [
    dict(
        name="relu_tied",
        config=dict(feed_forward_proj="relu", vocab_size=80, d_model=16, d_kv=6, num_heads=3, d_ff=24,
                    num_layers=2, num_decoder_layers=3, relative_attention_num_buckets=8,
                    relative_attention_max_distance=16),  # tie_word_embeddings default -> scaled head
        untied=False, S=13, T=9, src_lens=[13, 9, 5], tgt_lens=[9, 6, 3], seed=1234,
        label_smoothing=0.1, learning_rate=1e-2, weight_decay=0.1, lr_scheduler_type="linear",
        warmup_steps=2, num_training_steps=6, max_grad_norm=0.5,
    ),
    dict(
        name="gated_noscale",
        config=dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False, vocab_size=96, d_model=20,
                    d_kv=4, num_heads=4, d_ff=28, num_layers=3, num_decoder_layers=2,
                    relative_attention_num_buckets=16, relative_attention_max_distance=24),
        untied=False, S=30, T=17, src_lens=[30, 21, 11], tgt_lens=[17, 12, 6], seed=2345,
        label_smoothing=0.0, learning_rate=5e-3, weight_decay=0.01, lr_scheduler_type="cosine",
        warmup_steps=1, num_training_steps=5, max_grad_norm=1.0,
    ),
    dict(
        name="untied",
        config=dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False, vocab_size=64, d_model=12,
                    d_kv=5, num_heads=2, d_ff=18, num_layers=2, num_decoder_layers=2,
                    relative_attention_num_buckets=8, relative_attention_max_distance=12),
        untied=True, S=11, T=7, src_lens=[11, 8, 4], tgt_lens=[7, 5, 2], seed=3456,
        label_smoothing=0.1, learning_rate=1e-2, weight_decay=0.0, lr_scheduler_type="constant_with_warmup",
        warmup_steps=2, num_training_steps=6, max_grad_norm=1.0,
    ),
]

NUM_STEPS = 3
ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON = 0.9, 0.999, 1e-8  # HF TrainingArguments defaults


def make_batch(v, V, gen):
    """Random ids in [2, V), eos (1) at the end of each sequence, pad 0 / -100 after."""
    B = len(v["src_lens"])
    input_ids = torch.zeros(B, v["S"], dtype=torch.long)
    attention_mask = torch.zeros(B, v["S"], dtype=torch.long)
    labels = torch.full((B, v["T"]), -100, dtype=torch.long)
    for b in range(B):
        n = v["src_lens"][b]
        input_ids[b, :n - 1] = torch.randint(2, V, (n - 1,), generator=gen)
        input_ids[b, n - 1] = 1
        attention_mask[b, :n] = 1
        m = v["tgt_lens"][b]
        labels[b, :m - 1] = torch.randint(2, V, (m - 1,), generator=gen)
        labels[b, m - 1] = 1
    return input_ids, attention_mask, labels


def compute_loss(model, batch, eps):
    """Returns (loss, plain CE, logits) the way HF Trainer computes the training loss."""
    input_ids, attention_mask, labels, dec_in = batch
    if eps > 0:
        out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec_in, use_cache=False)
        loss = LabelSmoother(epsilon=eps)(out, labels, shift_labels=False)
    else:
        out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec_in,
                    labels=labels, use_cache=False)
        loss = out.loss
    logits = out.logits
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    return loss, nll, logits


def label_smoothed_by_formula(logits, labels, eps):
    """Independent re-statement of LabelSmoother's formula (cross-check only)."""
    logp = F.log_softmax(logits.double(), dim=-1)
    active = labels != -100
    n = active.sum()
    nll = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[active].sum() / n
    smooth = -logp.sum(-1)[active].sum() / (n * logits.shape[-1])
    return (1 - eps) * nll + eps * smooth


def bucket_usage(cfg, S, T):
    """Buckets hit by the encoder (bidirectional, S x S) and the decoder (causal, T x T)."""
    nb, md = cfg.relative_attention_num_buckets, cfg.relative_attention_max_distance
    out = {}
    for what, L, bidir in (("encoder", S, True), ("decoder", T, False)):
        pos = torch.arange(L)
        rel = pos[None, :] - pos[:, None]  # memory - query
        b = T5Attention._relative_position_bucket(rel, bidirectional=bidir, num_buckets=nb, max_distance=md)
        half = nb // 2 if bidir else nb
        max_exact = half // 2
        used = sorted(set(b.flatten().tolist()))
        log_dirs = []
        if bidir:
            if any(max_exact <= u < half for u in used):
                log_dirs.append("neg")
            if any(u >= half + max_exact for u in used):
                log_dirs.append("pos")
        elif any(u >= max_exact for u in used):
            log_dirs.append("causal")
        out[what] = {"buckets_used": used, "log_buckets_in": log_dirs}
    return out


def build_model(v):
    cfg = T5Config(dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **v["config"])
    model = T5ForConditionalGeneration(cfg)
    if v["untied"]:
        # A truly separate head as hub T5 1.1 / FLAN checkpoints have. HF init for an untied head is
        # normal(0, initializer_factor * 1.0) (T5PreTrainedModel._init_weights). The forward calls
        # self.lm_head(sequence_output), so replacing the Parameter is enough.
        w = torch.empty(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(w, mean=0.0, std=cfg.initializer_factor * 1.0)
        model.lm_head.weight = nn.Parameter(w)
        assert model.lm_head.weight is not model.shared.weight
        assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()
        assert model.encoder.embed_tokens.weight is model.shared.weight
    else:
        assert model.lm_head.weight is model.shared.weight
    return model


def model_state_for_file(model, untied):
    skip = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    if not untied:
        skip.add("lm_head.weight")
    return {k: t.detach().clone().contiguous() for k, t in model.state_dict().items() if k not in skip}


def write_config(model, v, path):
    model.config.to_json_file(path)
    j = json.load(open(path))
    assert j["decoder_start_token_id"] == 0 and j["pad_token_id"] == 0 and j["eos_token_id"] == 1
    if v["untied"]:
        # transformers would write tie_word_embeddings true; say false, as hub T5 1.1 configs do,
        # so a reader knows the head is separate. transformers reads it back as tied=True (ignored,
        # it keeps lm_head untied because the file carries a different lm_head.weight) and
        # scale_decoder_outputs=False.
        j["tie_word_embeddings"] = False
        with open(path, "w") as f:
            json.dump(j, f, indent=2, sort_keys=True)
            f.write("\n")
    return j


def run_variant(v, outdir):
    torch.manual_seed(v["seed"])
    model = build_model(v)
    model.train()
    cfg = model.config
    V = cfg.vocab_size
    gen = torch.Generator().manual_seed(v["seed"] + 1)
    input_ids, attention_mask, labels = make_batch(v, V, gen)
    dec_in = model._shift_right(labels)
    assert torch.equal(dec_in, model.prepare_decoder_input_ids_from_labels(labels))
    batch = (input_ids, attention_mask, labels, dec_in)
    eps = v["label_smoothing"]

    d = os.path.join(outdir, v["name"])
    os.makedirs(d, exist_ok=True)
    cfg_json = write_config(model, v, os.path.join(d, "config.json"))
    init_state = model_state_for_file(model, v["untied"])
    save_file(init_state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

    named = list(model.named_parameters())  # deduplicated: shared.weight once
    names = [n for n, _ in named]
    decay_names_all = Trainer.get_decay_parameter_names(None, model)
    decay_names = [n for n in names if n in decay_names_all]
    groups = [
        {"params": [p for n, p in named if n in decay_names_all and p.requires_grad], "weight_decay": v["weight_decay"]},
        {"params": [p for n, p in named if n not in decay_names_all and p.requires_grad], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=v["learning_rate"], betas=(ADAM_BETA1, ADAM_BETA2), eps=ADAM_EPSILON,
                            foreach=False, fused=False)
    sched = get_scheduler(v["lr_scheduler_type"], opt, num_warmup_steps=v["warmup_steps"],
                          num_training_steps=v["num_training_steps"])

    ref = {}
    steps = []
    for step in range(1, NUM_STEPS + 1):
        opt.zero_grad(set_to_none=True)
        loss, nll, logits = compute_loss(model, batch, eps)
        loss.backward()
        if step == 1:
            ref["logits"] = logits.detach().clone()
            ref["loss"] = loss.detach().clone().reshape(())
            ref["loss_nll"] = nll.detach().clone().reshape(())
            for n, p in named:
                ref["grad." + n] = p.grad.detach().clone()
            if eps > 0:
                alt = label_smoothed_by_formula(logits.detach(), labels, eps).item()
                assert abs(alt - loss.item()) < 1e-5 * max(1.0, abs(alt)), (alt, loss.item())
            else:
                alt = F.cross_entropy(logits.detach().reshape(-1, V), labels.reshape(-1)).item()
                assert abs(alt - loss.item()) < 1e-6 * max(1.0, abs(alt))
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), v["max_grad_norm"])
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        steps.append({"step": step, "loss": loss.item(), "loss_nll": nll.item(), "grad_norm": grad_norm.item(),
                      "learning_rate": lr, "clipped": bool(grad_norm.item() > v["max_grad_norm"])})
    for n, p in named:
        ref["final." + n] = p.detach().clone()
    ref["input_ids"] = input_ids
    ref["attention_mask"] = attention_mask
    ref["labels"] = labels
    ref["decoder_input_ids"] = dec_in
    ref = {k: (t.to(torch.int64) if not t.is_floating_point() else t.to(torch.float32)).contiguous()
           for k, t in ref.items()}
    save_file(ref, os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})
    for fn in ("model.safetensors", "reference.safetensors"):
        os.chmod(os.path.join(d, fn), 0o644)  # save_file creates 0600

    info = {
        "variant": v["name"],
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "vocab_size": V,
        "batch_size": input_ids.shape[0],
        "source_length": v["S"],
        "target_length": v["T"],
        "label_smoothing": eps,
        "learning_rate": v["learning_rate"],
        "weight_decay": v["weight_decay"],
        "adam_beta1": ADAM_BETA1,
        "adam_beta2": ADAM_BETA2,
        "adam_epsilon": ADAM_EPSILON,
        "max_grad_norm": v["max_grad_norm"],
        "lr_scheduler_type": v["lr_scheduler_type"],
        "warmup_steps": v["warmup_steps"],
        "num_training_steps": v["num_training_steps"],
        "untied_lm_head": v["untied"],
        "scale_decoder_outputs": bool(cfg.scale_decoder_outputs),
        "config_tie_word_embeddings": cfg_json["tie_word_embeddings"],
        "relative_buckets": bucket_usage(cfg, v["S"], v["T"]),
        "parameter_names": names,
        "decay_parameter_names": decay_names,
        "no_decay_parameter_names": [n for n in names if n not in decay_names_all],
        "steps": steps,
    }
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")

    # Reload the written directory as transformers would and check the loss.
    check = reload_check(d, v, batch, eps, init_state, ref)
    nparams = sum(p.numel() for p in model.parameters())
    return info, nparams, check


def reload_check(d, v, batch, eps, init_state, ref):
    m2 = T5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32)
    m2.train()  # dropout is 0; same mode as the reference
    tied = m2.lm_head.weight is m2.shared.weight
    if v["untied"]:
        assert not tied, "transformers re-tied lm_head on load"
        assert torch.equal(m2.lm_head.weight.detach(), init_state["lm_head.weight"])
    else:
        assert tied
    assert bool(m2.config.scale_decoder_outputs) == (not v["untied"] and v["name"] == "relu_tied")
    # Grad mode on purpose: under torch.no_grad() the CPU matmul path differs and logits move by
    # ~1e-5 (relative ~1e-6); with grad enabled the reload reproduces the reference bit for bit.
    loss, nll, logits = compute_loss(m2, batch, eps)
    dl = abs(loss.item() - ref["loss"].item())
    dlog = (logits.detach() - ref["logits"]).abs().max().item()
    assert dl <= 1e-6 * max(1.0, abs(ref["loss"].item())), dl
    assert dlog <= 1e-6 * max(1.0, ref["logits"].abs().max().item()), dlog
    return {"reload_loss_diff": dl, "reload_logits_maxdiff": dlog, "reload_tied": tied,
            "reload_scale_decoder_outputs": bool(m2.config.scale_decoder_outputs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    args = ap.parse_args()
    if torch.__version__.split("+")[0] != EXPECTED_TORCH or transformers.__version__ != EXPECTED_TRANSFORMERS:
        print(f"warning: expected torch {EXPECTED_TORCH} / transformers {EXPECTED_TRANSFORMERS}, have "
              f"{torch.__version__} / {transformers.__version__}", file=sys.stderr)
    torch.set_num_threads(1)
    try:
        torch.use_deterministic_algorithms(True)
    except Exception as e:  # pragma: no cover
        print("warning: use_deterministic_algorithms:", e, file=sys.stderr)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    os.makedirs(args.out, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None

    rows = []
    for v in VARIANTS:
        if only and v["name"] not in only:
            continue
        info, nparams, check = run_variant(v, args.out)
        rows.append((info, nparams, check))

    print(f"{'variant':<14} {'#params':>7} {'loss(step1)':>12} {'grad_norm per step (max_grad_norm)':<44} "
          f"{'lr per step':<26} clipped  reload")
    for info, nparams, check in rows:
        gn = ", ".join(f"{s['grad_norm']:.4f}" for s in info["steps"])
        lrs = ", ".join(f"{s['learning_rate']:.3g}" for s in info["steps"])
        cl = ",".join("y" if s["clipped"] else "n" for s in info["steps"])
        print(f"{info['variant']:<14} {nparams:>7} {info['steps'][0]['loss']:>12.6f} "
              f"{gn + ' (' + str(info['max_grad_norm']) + ')':<44} {lrs:<26} {cl:<8} "
              f"dloss={check['reload_loss_diff']:.1e} tied={check['reload_tied']}")
    print()
    for info, _, _ in rows:
        rb = info["relative_buckets"]
        print(f"{info['variant']:<14} log buckets: encoder {rb['encoder']['log_buckets_in']} "
              f"decoder {rb['decoder']['log_buckets_in']}")
    print()
    print(f"{'variant':<14} {'loss per step':<40} {'loss_nll step1':>14}")
    for info, _, _ in rows:
        losses = ", ".join("%.6f" % s["loss"] for s in info["steps"])
        print(f"{info['variant']:<14} {losses:<40} {info['steps'][0]['loss_nll']:>14.6f}")
    total = 0
    for root, _, files in os.walk(args.out):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    print(f"\ntotal size of {args.out}: {total} bytes")


if __name__ == "__main__":
    main()
