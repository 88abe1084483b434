#!/usr/bin/env python3
"""bench/blog_table_md.py: bench/blog_table.sh's table, from OUT/rowdefs.txt and OUT/rowN/{train_t5,hf}.json.

    python3 bench/blog_table_md.py OUT DATE MACHINE N_TRAIN N_VAL FAKE

Writes OUT/blog_table.md (the post's figures, HF + DeepSpeed today and train_t5 side by side, and
issue 20's acceptance 2 and 3 decided per row) and OUT/blog_table.json (the same rows, for
build/bench/blog_chart); prints the markdown. Standard library only.
"""
import json
import os
import sys


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return {"error": "no result"}


def num(v, fmt="{:.1f}"):
    return fmt.format(v) if isinstance(v, (int, float)) else "-"


def main():
    out, date, machine, n_train, n_val, fake = sys.argv[1:7]
    rows = []
    for line in open(os.path.join(out, "rowdefs.txt"), encoding="utf-8"):
        f = line.rstrip("\n").split("|")
        if len(f) < 9:
            continue
        rid = f[0]
        d = os.path.join(out, "row" + rid)
        if not os.path.isdir(d):
            continue
        rows.append({"id": int(rid), "label": f[1], "gpus": int(f[2]), "model": f[3],
                     "post": {"batch": f[4], "train_s": float(f[5]) if f[5] else None,
                              "eval_s": float(f[6]) if f[6] else None},
                     "train_t5_flags": f[7], "hf_flags": f[8],
                     "train_t5": load(os.path.join(d, "train_t5.json")), "hf": load(os.path.join(d, "hf.json"))})
    lines = [f"# The 2021 post's table, re-measured ({date}, {machine})", ""]
    if fake == "1":
        lines += ["**FAKE RESULTS** (BENCH_FAKE=1: the plumbing check, nothing ran on a GPU)", ""]
    fewer = "" if (n_train, n_val) == ("2000", "500") else " (**fewer than the post's 2000 / 500, to fit one call**)"
    lines += [f"t5-large rows: {n_train} train / {n_val} validation pairs{fewer}; t5-3b rows: 60 / 10 (the post's). "
              "Every GPU capped at 24 GiB (train_t5 `--max_gpu_memory 24`, HF "
              "`torch.cuda.set_per_process_memory_fraction`). One random init per model, loaded by both. "
              "Batch: per GPU, train = eval. train_t5's from its memory plan (`--explain --find_max_batch`), "
              "HF's from its `--auto_find_batch_size` started above ours (≥: the start itself fit, so HF's "
              "largest is at least that). Eval = 4-beam generation + BLEU. The post's times are 2x Titan RTX "
              "(2021), not comparable to today's GPUs; its batches are.", "",
              "| # | row | the post: batch, train s, eval s | HF + DeepSpeed today: batch, train s, eval s, samples/s, peak GiB "
              "| train_t5: batch, train s, eval s, samples/s, peak GiB | batch ≥ HF's | train, eval faster |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        p, h, t = r["post"], r["hf"], r["train_t5"]
        post = f"{p['batch']}, {num(p['train_s'])}, {num(p['eval_s'])}" if p["batch"] else "-"
        if "error" in h:
            hf = f"{h['error']}"
        else:
            hb = ("≥" if h.get("batch_is_lower_bound") else "") + str(h.get("batch"))
            hf = (f"{hb}, {num(h.get('train_s'))}, {num(h.get('eval_s'))}, {num(h.get('train_samples_per_second'))}, "
                  f"{num(h.get('peak_gib'), '{:.2f}')}")
        if "error" in t or not t.get("batch"):
            t5 = t.get("error", "does not fit: batch 1 over the cap")
        else:
            t5 = (f"{t['batch']}, {num(t.get('train_s'))}, {num(t.get('eval_s'))}, "
                  f"{num(t.get('train_samples_per_second'))}, {num(t.get('peak_gib'), '{:.2f}')}")
        # acceptance 2: our batch at least HF's (a lower bound that equals ours does not decide it),
        # and both times lower; where HF did not run at all, ours wins only if ours ran
        if "error" in t or not t.get("batch"):
            big, fast = ("FAIL" if "error" not in h else "-"), "-"
        elif "error" in h:
            big, fast = "PASS (HF did not run)", "PASS (HF did not run)"
        else:
            lb = h.get("batch_is_lower_bound")
            big = "PASS" if t["batch"] > h["batch"] or (t["batch"] == h["batch"] and not lb) else \
                ("FAIL" if t["batch"] < h["batch"] else "undecided (HF ≥)")
            ok_t = isinstance(t.get("train_s"), (int, float)) and t["train_s"] < h.get("train_s", 0)
            ok_e = isinstance(t.get("eval_s"), (int, float)) and t["eval_s"] < h.get("eval_s", 0)
            fast = f"{'PASS' if ok_t else 'FAIL'}, {'PASS' if ok_e else 'FAIL'}"
        r["accept"] = {"batch": big, "faster": fast}
        lines.append(f"| {r['id']} | {r['label']} | {post} | {hf} | {t5} | {big} | {fast} |")
    t3b = next((r for r in rows if r["id"] == 8), None)
    if t3b:
        b = t3b["train_t5"].get("batch") or 0
        lines += ["", f"t5-3b on one GPU under the cap (acceptance 3: batch 20 or more): train_t5 batch {b}: "
                      f"{'PASS' if b >= 20 and 'error' not in t3b['train_t5'] else 'FAIL'}"]
    lines += ["", "Rows 3-4: FairScale's --sharded_ddp is gone from transformers; HF runs FSDP SHARD_GRAD_OP "
                  "there, train_t5 runs `--sharded_ddp` as ZeRO stage 2. Rows 9-11 are ours (not in the post)."]
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "blog_table.md"), "w", encoding="utf-8").write(text)
    json.dump({"date": date, "machine": machine, "fake": fake == "1", "rows": rows},
              open(os.path.join(out, "blog_table.json"), "w"), indent=1)
    print(text, end="")


if __name__ == "__main__":
    main()
