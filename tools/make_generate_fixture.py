#!/usr/bin/env python3
"""Generation fixtures for train_t5 (tests/test_generate.c), made with HF transformers on the CPU.

    python3 tools/make_generate_fixture.py --out tests/fixtures

Needs torch==2.11.0, transformers==5.17.0, safetensors. Trains two tiny T5s (CPU, single
thread, about a minute each) on a synthetic seq2seq task: the source is a random token sequence
(2..14 tokens from [3, 64), then </s>), the target is the source reversed with every token
mapped through a fixed permutation of [3, 64), then </s>. The models learn it well enough that greedy
outputs are mostly right and differ from input to input. The fixture batch holds 4 such sources
and 4 out-of-distribution ones (longer than any training source, or with repeats) on which the
model is unsure, each picked so that some search setting matters: beam search vs greedy,
length_penalty 0.6 vs 2.0, early_stopping True vs False, and 5.17's early-stop heuristic
(build_batch; the rows where each matters are listed in reference.json and checked).

Writes tests/fixtures/generate_<name>/ for
  relu:  feed_forward_proj relu, tied head, scaled decoder outputs (T5 1.0 style), V = 64
  gated: feed_forward_proj gated-gelu, tie_word_embeddings False -> scale_decoder_outputs False
         (transformers 5.17 still ties the head: only shared.weight is saved), V = 128 (so the
         beam step's torch.topk takes its partial_sort path: k * 64 <= num_beams * V)
each holding config.json + model.safetensors (no lm_head.weight), reference.safetensors
(input_ids, attention_mask as I64, a padded batch of 8) and reference.json: for every case
the generation arguments and the exact `model.generate(...)` output, row by row, as HF
returns it (padded to the longest row: pad 0 after eos for greedy, eos 1 for beam search).
And tests/fixtures/generate_topk/reference.json: torch.topk index order on tie-heavy
vectors (torch's CPU topk is not stable; the C code reproduces its order).
"""
import argparse
import json
import os
import sys
import time

import torch
from safetensors.torch import save_file

import transformers
from transformers import T5Config, T5ForConditionalGeneration
from transformers.generation.utils import GenerationMixin

EXPECTED_TORCH = "2.11.0"
EXPECTED_TRANSFORMERS = "5.17.0"

MODELS = [
    dict(name="relu", V=64, seed=11, steps=1000, lr=5e-3,
         config=dict(feed_forward_proj="relu")),
    dict(name="gated", V=128, seed=12, steps=1000, lr=1e-2,
         config=dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
]
COMMON = dict(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, num_decoder_layers=2,
              relative_attention_num_buckets=16, relative_attention_max_distance=32, dropout_rate=0.0,
              decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
MIN_SRC, MAX_SRC = 2, 14   # training source tokens (before </s>)
BATCH_LENS = [3, 7, 10, 13]  # in-distribution source tokens of the fixture batch
GREEDY_MAX = 24

# name, num_beams, max_length, length_penalty, early_stopping
CASES = [
    ("greedy", 1, GREEDY_MAX, 1.0, False),
    ("beam4", 4, GREEDY_MAX, 1.0, False),
    ("beam4_early", 4, GREEDY_MAX, 1.0, True),
    ("beam3_lp0.6", 3, GREEDY_MAX, 0.6, False),
    ("beam3_lp2.0", 3, GREEDY_MAX, 2.0, False),
    ("beam4_lp2.0", 4, GREEDY_MAX, 2.0, False),
    ("beam4_lp2.0_early", 4, GREEDY_MAX, 2.0, True),
    ("beam2_lp0.6_early", 2, GREEDY_MAX, 0.6, True),
    ("greedy_cut8", 1, 8, 1.0, False),
    ("beam4_cut8", 4, 8, 1.0, False),
]


ALPHABET = 64  # tokens of the task: [3, ALPHABET); the V = 128 model never sees the rest


def target_of(src):
    """Reversed, each token through the permutation t -> 3 + ((t - 3) * 7 + 5) mod 61 of [3, 64)."""
    return [3 + ((t - 3) * 7 + 5) % (ALPHABET - 3) for t in reversed(src)] + [1]


def sample_pair(gen):
    n = int(torch.randint(MIN_SRC, MAX_SRC + 1, (1,), generator=gen))
    src = torch.randint(3, ALPHABET, (n,), generator=gen).tolist()
    return src + [1], target_of(src)


def pad_batch(seqs, fill):
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), fill, dtype=torch.long)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask


def train(spec):
    V = spec["V"]
    torch.manual_seed(spec["seed"])
    cfg = T5Config(vocab_size=V, **COMMON, **spec["config"])
    model = T5ForConditionalGeneration(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"])
    steps = spec["steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100) * max(0.05, 1 - s / steps))
    gen = torch.Generator().manual_seed(spec["seed"] + 100)
    model.train()
    t0 = time.time()
    for step in range(steps):
        pairs = [sample_pair(gen) for _ in range(64)]
        ids, mask = pad_batch([s for s, _ in pairs], 0)
        labels, _ = pad_batch([t for _, t in pairs], -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    # accuracy of greedy decoding on fresh in-distribution inputs
    pairs = [sample_pair(gen) for _ in range(200)]
    ids, mask = pad_batch([s for s, _ in pairs], 0)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_length=GREEDY_MAX)
    exact = 0
    for i, (_, tgt) in enumerate(pairs):
        row = out[i, 1:].tolist()
        row = row[:row.index(1) + 1] if 1 in row else row
        exact += row == tgt
    return model, loss.item(), exact / len(pairs), time.time() - t0


def generate(model, ids, mask, num_beams, max_length, length_penalty, early_stopping):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, num_beams=num_beams, max_length=max_length,
                              length_penalty=length_penalty, early_stopping=early_stopping, do_sample=False)


class NoEarlyStopHeuristic:
    """Within this block beam search runs without 5.17's early-stop heuristic (its result is forced to
    "improvement possible"): used only to find an input on which that heuristic decides the output."""

    def __enter__(self):
        self.orig = GenerationMixin.__dict__["_check_early_stop_heuristic"]
        f = self.orig.__func__
        GenerationMixin._check_early_stop_heuristic = staticmethod(lambda *a, **k: torch.ones_like(f(*a, **k)))

    def __exit__(self, *exc):
        GenerationMixin._check_early_stop_heuristic = self.orig


def heuristic_rows(model, ids, mask):
    """Rows whose beam4 / length_penalty 2.0 / early_stopping False output changes without the heuristic."""
    a = generate(model, ids, mask, 4, GREEDY_MAX, 2.0, False).tolist()
    with NoEarlyStopHeuristic():
        b = generate(model, ids, mask, 4, GREEDY_MAX, 2.0, False).tolist()
    return [i for i in range(len(a)) if upto_eos(a[i]) != upto_eos(b[i])]


def upto_eos(s):
    """A generated row up to and including its eos (the rest is filler)."""
    return s[:s.index(1, 1) + 1] if 1 in s[1:] else s


def build_batch(model, gen):
    """4 in-distribution sources, then three out-of-distribution ones chosen by generating inside the batch:
    the first candidate on which beam search (4 beams) and greedy disagree, the first on which beam search
    with length_penalty 0.6 and 2.0 (3 beams) disagree (after 150 tries: another greedy/beam one), and the
    first on which early_stopping True and False disagree (4 beams, length_penalty 2.0; a token repeated
    many times leaves the model unsure how many copies to emit); then, where one turns up within 150 long
    random candidates, one on which the early-stop heuristic decides the beam4 / length_penalty 2.0 output
    (both models have one; the search is optional only so that a retrained model cannot fail it)."""
    base = [torch.randint(3, ALPHABET, (n,), generator=gen).tolist() + [1] for n in BATCH_LENS]
    chosen = []
    tried = 0

    def candidate(kind):
        if kind == 0:    # longer than any training source
            n = int(torch.randint(16, 20, (1,), generator=gen))
            return torch.randint(3, ALPHABET, (n,), generator=gen).tolist()
        if kind == 1:    # two distinct tokens, repeated in pairs
            a, b = torch.randint(3, ALPHABET, (2,), generator=gen).tolist()
            n = int(torch.randint(8, 15, (1,), generator=gen))
            return [a if (i // 2) % 2 == 0 else b for i in range(n)]
        if kind == 2:    # a run of one token inside a training-length source
            n = int(torch.randint(9, 14, (1,), generator=gen))
            src = torch.randint(3, ALPHABET, (n,), generator=gen).tolist()
            src[2:7] = [src[2]] * 5
            return src
        a = int(torch.randint(3, ALPHABET, (1,), generator=gen))  # one token, repeated
        return [a] * int(torch.randint(10, 22, (1,), generator=gen))

    for want in ("greedy_vs_beam", "length_penalty", "early_stopping", "heuristic"):
        for attempt in range(300):
            if want == "heuristic" and attempt >= 150:
                break  # optional
            tried += 1
            kind = {"early_stopping": 3, "heuristic": 0}.get(want, tried % 3)
            src = candidate(kind) + [1]
            ids, mask = pad_batch(base + chosen + [src], 0)
            r = len(base) + len(chosen)
            if want == "heuristic":
                if r in heuristic_rows(model, ids, mask):
                    chosen.append(src)
                    break
                continue
            if want == "greedy_vs_beam" or (want == "length_penalty" and attempt >= 150):
                a = generate(model, ids, mask, 1, GREEDY_MAX, 1.0, False)[r].tolist()
                b = generate(model, ids, mask, 4, GREEDY_MAX, 1.0, False)[r].tolist()
            elif want == "length_penalty":
                a = generate(model, ids, mask, 3, GREEDY_MAX, 0.6, False)[r].tolist()
                b = generate(model, ids, mask, 3, GREEDY_MAX, 2.0, False)[r].tolist()
            else:
                a = generate(model, ids, mask, 4, GREEDY_MAX, 2.0, False)[r].tolist()
                b = generate(model, ids, mask, 4, GREEDY_MAX, 2.0, True)[r].tolist()
            if upto_eos(a) != upto_eos(b):
                chosen.append(src)
                break
        else:
            if want != "heuristic":
                sys.exit(f"no out-of-distribution input found for {want}")
    return base + chosen, tried


def write_model_dir(model, d):
    os.makedirs(d, exist_ok=True)
    model.config.to_json_file(os.path.join(d, "config.json"))
    skip = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}
    assert model.lm_head.weight is model.shared.weight  # transformers 5.17 always ties T5
    state = {k: t.detach().clone().contiguous() for k, t in model.state_dict().items() if k not in skip}
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def run_model(spec, outdir):
    V = spec["V"]
    model, last_loss, exact, secs = train(spec)
    d = os.path.join(outdir, "generate_" + spec["name"])
    write_model_dir(model, d)
    # reload as a user would, and generate from the reloaded model
    model = T5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    assert model.lm_head.weight is model.shared.weight
    gen = torch.Generator().manual_seed(spec["seed"] + 200)
    seqs, tried = build_batch(model, gen)
    ids, mask = pad_batch(seqs, 0)
    save_file({"input_ids": ids.contiguous(), "attention_mask": mask.contiguous()},
              os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})
    cases = []
    t0 = time.time()
    for name, nb, L, lp, es in CASES:
        out = generate(model, ids, mask, nb, L, lp, es)
        cases.append({"name": name, "num_beams": nb, "max_length": L, "length_penalty": lp, "early_stopping": es,
                      "sequences": out.tolist()})
    gen_secs = time.time() - t0
    by = {c["name"]: c["sequences"] for c in cases}

    diverge = [i for i in range(len(seqs)) if upto_eos(by["greedy"][i]) != upto_eos(by["beam4"][i])]
    lp_differ = [i for i in range(len(seqs)) if upto_eos(by["beam3_lp0.6"][i]) != upto_eos(by["beam3_lp2.0"][i])]
    es_differ = [i for i in range(len(seqs))
                 if upto_eos(by["beam4_lp2.0"][i]) != upto_eos(by["beam4_lp2.0_early"][i])]
    assert diverge, "beam search and greedy agree on every row"
    assert lp_differ and es_differ, "length_penalty or early_stopping changes no row"
    heur = heuristic_rows(model, ids, mask)
    cut_rows = [i for i in range(len(seqs)) if 1 not in by["greedy_cut8"][i][1:]]
    assert cut_rows, "max_length 8 cuts no greedy row before eos"
    correct = [upto_eos(by["greedy"][i])[1:] == target_of(seqs[i][:-1]) for i in range(len(seqs))]
    info = {
        "model": spec["name"],
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "vocab_size": V,
        "feed_forward_proj": model.config.feed_forward_proj,
        "scale_decoder_outputs": bool(model.config.scale_decoder_outputs),
        "task": "target = reversed source (tokens in [3, 64)) mapped by t -> 3 + ((t - 3) * 7 + 5) mod 61, then </s>",
        "train_steps": spec["steps"],
        "train_last_loss": last_loss,
        "greedy_exact_on_fresh_inputs": exact,
        "batch_sources": seqs,
        "greedy_row_correct": correct,
        "rows_where_beam4_differs_from_greedy": diverge,
        "rows_where_lp0.6_differs_from_lp2.0": lp_differ,
        "rows_where_early_stopping_matters": es_differ,
        "rows_where_the_early_stop_heuristic_matters": heur,
        "rows_cut_by_max_length_8": cut_rows,
        "cases": cases,
    }
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    for fn in ("model.safetensors", "reference.safetensors", "reference.json", "config.json"):
        os.chmod(os.path.join(d, fn), 0o644)
    return info, secs, gen_secs, tried


def topk_cases():
    """torch.topk order on vectors with many equal values, through both CPU paths."""
    g = torch.Generator().manual_seed(7)
    out = []
    for n, k, levels in [(3, 1, 2), (2, 1, 1), (8, 4, 2), (12, 4, 3), (12, 6, 1), (24, 12, 3), (40, 7, 4),
                         (256, 8, 3), (192, 6, 5), (511, 8, 3), (512, 8, 3), (1000, 6, 4), (1024, 16, 2),
                         (300, 30, 6), (65, 1, 2), (64, 1, 2)]:
        for rep in range(2):
            x = torch.randint(0, levels, (n,), generator=g).float() - 1e9 * (rep == 1) * (torch.rand(n, generator=g) < .5)
            x = x.to(torch.float32)
            idx = torch.topk(x, k).indices.tolist()
            out.append({"x": x.tolist(), "k": k, "indices": idx})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", default=None, help="comma-separated model names")
    args = ap.parse_args()
    if torch.__version__.split("+")[0] != EXPECTED_TORCH or transformers.__version__ != EXPECTED_TRANSFORMERS:
        print(f"warning: expected torch {EXPECTED_TORCH} / transformers {EXPECTED_TRANSFORMERS}, have "
              f"{torch.__version__} / {transformers.__version__}", file=sys.stderr)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    only = set(args.only.split(",")) if args.only else None

    rows = []
    for spec in MODELS:
        if only and spec["name"] not in only:
            continue
        rows.append(run_model(spec, args.out))
    d = os.path.join(args.out, "generate_topk")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump({"torch_version": torch.__version__, "cases": topk_cases()}, f)
        f.write("\n")
    os.chmod(os.path.join(d, "reference.json"), 0o644)

    print(f"{'model':<7} {'train s':>7} {'loss':>7} {'greedy exact':>12} {'generate s (all cases)':>22} "
          f"{'beam4!=greedy rows':>18} {'lp0.6!=lp2 rows':>15} {'early matters':>13} {'heuristic':>9} "
          f"{'cut rows':>12} {'size':>8}")
    for info, secs, gen_secs, tried in rows:
        d = os.path.join(args.out, "generate_" + info["model"])
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{info['model']:<7} {secs:>7.1f} {info['train_last_loss']:>7.4f} "
              f"{info['greedy_exact_on_fresh_inputs']:>12.2f} {gen_secs:>22.2f} "
              f"{str(info['rows_where_beam4_differs_from_greedy']):>18} "
              f"{str(info['rows_where_lp0.6_differs_from_lp2.0']):>15} "
              f"{str(info['rows_where_early_stopping_matters']):>13} "
              f"{str(info['rows_where_the_early_stop_heuristic_matters']):>9} {str(info['rows_cut_by_max_length_8']):>12} "
              f"{size:>8}")
        print(f"        batch greedy rows correct: {info['greedy_row_correct']} "
              f"(divergent inputs found after {tried} candidates)")
        for c in info["cases"]:
            print(f"        {c['name']:<18} width {len(c['sequences'][0])}")


if __name__ == "__main__":
    main()
