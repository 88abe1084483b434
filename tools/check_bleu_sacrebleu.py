#!/usr/bin/env python3
"""Compare `train_t5 bleu` with the sacreBLEU installed where this runs, on every case of
tests/fixtures/bleu/cases.json (hypothesis sets against WMT16 newstest2016 and tiny cases).

    python3 tools/check_bleu_sacrebleu.py [./train_t5]

Prints one line per case: SAME/DIFF, the BLEU and chrF scores of both, their difference.
Exit status 1 if any score differs by more than 0.01 BLEU or 0.01 chrF.
"""
import json
import subprocess
import sys

import sacrebleu

BIN = sys.argv[1] if len(sys.argv) > 1 else "./train_t5"


def lines(path):
    # the same reading as sacreBLEU's CLI: split on \n, drop the last empty piece
    text = open(path, encoding="utf-8", newline="").read()
    out = text.split("\n")
    if out and out[-1] == "":
        out.pop()
    return out


cases = json.load(open("tests/fixtures/bleu/cases.json"))["cases"]
bad = 0
print(f"sacrebleu {sacrebleu.__version__}")
for c in cases:
    h, r = lines(c["hyp"]), lines(c["ref"])
    if len(h) != len(r) or not h:
        continue
    b = sacrebleu.corpus_bleu(h, [r])
    f = sacrebleu.corpus_chrf(h, [r])
    out = subprocess.run([BIN, "bleu", c["hyp"], c["ref"]], capture_output=True, text=True)
    ours = out.stdout.splitlines()
    ob = float(ours[0].split()[2]) if ours else float("nan")
    of = float(ours[1].split()[2]) if len(ours) > 1 else float("nan")
    same = ours[:2] == [str(b), str(f)]
    ok = abs(ob - b.score) <= 0.01 and abs(of - f.score) <= 0.01
    bad += not ok
    print(f"{'SAME' if same else 'DIFF'} {'ok' if ok else 'NOT OK'} {c['name']:<24} BLEU {ob:.2f} vs {b.score:.2f}  "
          f"chrF {of:.2f} vs {f.score:.2f}  (|d| {abs(ob - b.score):.4f}, {abs(of - f.score):.4f})")
sys.exit(1 if bad else 0)
