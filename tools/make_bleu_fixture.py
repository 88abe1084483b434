#!/usr/bin/env python3
"""tools/make_bleu_fixture.py: sacreBLEU reference scores for tests/test_bleu.c.

    python3 tools/make_bleu_fixture.py [--out tests/fixtures/bleu] [--no-cli-check]

Needs `pip install sacrebleu==2.6.0` (the version eval/bleu.h reproduces; the script
refuses another one). Run from the repository root. Writes, deterministically:
  - hypothesis files derived from data/sample/test.target (1999 Romanian lines, WMT16
    newstest2016) and a few tiny hand-made hypothesis/reference pairs, under --out;
  - cases.json: per case the file names (relative to the repository root), the line count,
    the BLEU score (full float), its statistics and printed string (str(BLEUScore)), the chrF
    score, statistics and string, the two signatures and the sacrebleu version; plus
    `tokenizer`: inputs and their Tokenizer13a output.
Files are read exactly as the sacrebleu CLI reads them (utf-8, newline="\\n", rstrip()),
and each case is also run through the real `sacrebleu` command (-f text -w 2) to check that
the CLI prints the same numbers (skip with --no-cli-check). ~20 s (~2 s without the CLI
check).
"""
import argparse
import json
import logging
import os
import random
import subprocess
import sys

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

SACREBLEU_VERSION = "2.6.0"
REF = "data/sample/test.target"
SRC = "data/sample/test.source"


def read_lines(path):
    """The sacrebleu CLI's reading: strict utf-8, lines split on '\\n' only, rstrip()."""
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip() for line in f]


def write_lines(path, lines, final_newline=True):
    data = "\n".join(lines) + ("\n" if final_newline and lines else "")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(data)


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---- hypothesis sets derived from the reference (deterministic) ----------------------------

def perturb_words(lines, seed):
    """Drop ~12% of words, swap ~10% of adjacent pairs, alter ~8% of words."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        words = [w for w in words if rng.random() >= 0.12]
        for i in range(len(words) - 1):
            if rng.random() < 0.10:
                words[i], words[i + 1] = words[i + 1], words[i]
        for i, w in enumerate(words):
            r = rng.random()
            if r < 0.03:  # lose diacritics (a frequent MT error in Romanian)
                words[i] = w.translate(str.maketrans("ăâîșțşţĂÂÎȘȚ", "aaistst" "AAIST"))
            elif r < 0.06 and len(w) > 3:
                words[i] = w[:-1]
            elif r < 0.08:
                words[i] = w.upper()
        out.append(" ".join(words))
    return out


def with_empty_lines(lines, seed):
    """~10% empty lines; the others mildly perturbed."""
    rng = random.Random(seed)
    base = perturb_words(lines, seed + 1)
    return ["" if rng.random() < 0.10 else line for line in base]


def punct_numbers(lines, seed):
    """Punctuation and numbers altered: digits changed, separators swapped, spacing
    around punctuation, quotes replaced, dashes and percent signs moved."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        chars = []
        for c in line:
            r = rng.random()
            if c.isdigit() and r < 0.3:
                c = str((int(c) + 1) % 10)
            elif c == "," and r < 0.5:
                c = " ," if r < 0.25 else "."
            elif c == "." and r < 0.5:
                c = " ." if r < 0.25 else ","
            elif c in "„”\"" and r < 0.7:
                c = "&quot;" if r < 0.2 else '"'
            elif c == "-" and r < 0.5:
                c = " - "
            elif c == "%" and r < 0.5:
                c = " %"
            chars.append(c)
        line = "".join(chars)
        if rng.random() < 0.2:
            line += rng.choice([" 1,000.50", " (2016)", " 10-20", " U.S.", " e-mail:", " 3.14%", " &amp;"])
        out.append(line)
    return out


def first_words(lines, k):
    return [" ".join(line.split()[:k]) for line in lines]


def longer(lines):
    """Each hypothesis = its reference plus the first half of the next one (longer than the
    reference: BP 1, ratio > 1)."""
    out = []
    for i, line in enumerate(lines):
        nxt = lines[(i + 1) % len(lines)].split()
        out.append(line + " " + " ".join(nxt[: len(nxt) // 2]))
    return out


# ---- tiny hand cases: (name, hypothesis bytes, reference bytes) -----------------------------

TINY = [
    ("one_line", "Șeful ONU declară că nu există soluții militare în Siria.\n",
     "Șeful ONU declară că nu există soluții militare în Siria\n"),
    ("all_empty_hyp", "\n\n\n", "O propoziție.\nÎncă una, cu 2 numere: 3,5.\nA treia\n"),
    ("all_empty_both", "\n\n", "\n  \n"),
    ("zero_4gram", "a b c x d e f y g\nh i z j\n", "a b c d e f g\nh i j k\n"),
    ("short_lines", "da\nnu .\nbine\n", "da\nnu\nbine ?\n"),
    ("hyp_longer_tiny", "pisica stă pe covor și doarme liniștită toată ziua\n", "pisica stă pe covor\n"),
    ("unicode_heavy",
     "\ufeffȘi țara își păstrează stațiile, şi ţara (cu sedilă) — „citat” «altul» …\n"
     "naïve café — 東京 の 天気 😀 👍🏽 e\u0301 \u00a0spațiu\u2009subțire\u3000ideografic\n"
     "linie\u2028separator și\u0085NEL, «ghilimele» ‹simple› „jos”\n",
     "Și țara își păstrează stațiile, și țara (cu virgulă) — „citat” «altul»…\n"
     "naive cafe - 東京の天気 😀 👍 é spațiu subțire ideografic\n"
     "linie separator și NEL, „ghilimele” ‹simple› «jos»\n"),
    ("punct_numbers_entities",
     "Prețul a crescut cu 3,5% (de la 1.000,50 la 1.035,52 lei) în 2015-2016 &amp; U.S.A. &quot;ok&quot;\n"
     "e-mail: test@example.com; <skipped> 10-20 km/h, 5.5 kg.\n"
     "Costul: $1,000.00!!! ... (a) [b] {c} 'd' \"e\" `f` ^g^ _h_ |i| ~j~\n",
     "Prețul a crescut cu 3,5 % (de la 1.000,50 la 1.035,52 lei) în 2015 - 2016 & U.S.A. \"ok\"\n"
     "e-mail : test@example.com ; 10 - 20 km / h , 5.5 kg .\n"
     "Costul : $ 1,000.00 ! ... ( a ) [ b ] { c } ' d ' \" e \" ` f ` ^ g ^ _ h _ | i | ~ j ~\n"),
    ("crlf_trailing_space",
     "primul rând \r\nal doilea\t\r\n  al treilea  \r\n",
     "primul rând\nal doilea rând\nal treilea\n"),
    ("no_final_newline", "unu doi trei\npatru cinci", "unu doi trei\npatru cinci șase"),
    ("control_chars",
     "a\x00b c\x0bd e\x0cf g\x1ch i\x1fj\n",
     "a\x00b c d e f g h i j\n"),
]

# Strings for the 13a tokenizer unit checks (no NUL: they travel through JSON into C strings).
TOKENIZER_INPUTS = [
    "Hello, world.",
    "The U.S. economy grew 3.5% in 2015-2016.",
    "1,000,000.50 and 1.000.000,50",
    "e-mail: a@b.c; x/y (z) [w] {v}",
    "&quot;quoted&quot; &amp;amp; &lt;tag&gt; &amp;lt;",
    "word<skipped>word <skipped> end",
    "line-\nbreak and\nnewline",
    "trailing dot .",
    "...,,,.,",
    "9-5 a-b 9 - 5 -9",
    "Șeful ONU declară: „nu există soluții militare”.",
    "naïve café, 東京。 😀!",
    "tab\there\u00a0nbsp\u2009thin\u3000ideo",
    "   leading and trailing   ",
    "",
    "$5.00, €5,00, £5.",
    "'single' `back` ^caret^ _under_ |pipe| ~tilde~",
    "a.b,c 1.b 1,b a.1 a,1",
    "\\backslash\\ and /slash/",
    "?!#%*+=:;<>@",
    "Mr. Smith's car (1990's) cost 2,500$.",
    "x\u0085y\u2028z\x1cw",
    "&quot &amp &lt &gt; & ;",
    "-\n-\n\n-",
]


def stats_bleu(hyps, refs):
    m = BLEU()
    st = m._extract_corpus_statistics(hyps, [refs])
    tot = [sum(col) for col in zip(*st)]
    return m, m.corpus_score(hyps, [refs]), tot


def stats_chrf(hyps, refs):
    m = CHRF()
    st = m._extract_corpus_statistics(hyps, [refs])
    tot = [sum(col) for col in zip(*st)]
    return m, m.corpus_score(hyps, [refs]), tot


def cli_check(hyp_path, ref_path, bleu_line, chrf_line, bleu_sig, chrf_sig):
    out = subprocess.run(
        ["sacrebleu", ref_path, "-i", hyp_path, "-m", "bleu", "chrf", "-f", "text", "-w", "2", "-q"],
        capture_output=True, text=True, check=True).stdout
    got = [line.strip() for line in out.strip().split("\n")]
    want = [f"BLEU|{bleu_sig} = " + bleu_line[len("BLEU = "):],
            f"chrF2|{chrf_sig} = " + chrf_line[len("chrF2 = "):]]
    if got != want:
        sys.exit(f"sacrebleu CLI disagrees on {hyp_path}:\n  {got}\n  {want}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/bleu")
    ap.add_argument("--no-cli-check", action="store_true")
    args = ap.parse_args()
    if sacrebleu.__version__ != SACREBLEU_VERSION:
        sys.exit(f"sacrebleu {sacrebleu.__version__} installed; eval/bleu.h reproduces {SACREBLEU_VERSION}: "
                 f"pip install sacrebleu=={SACREBLEU_VERSION}")
    # the "100 lines end in a tokenized period" warning is about punct_numbers, on purpose
    logging.getLogger("sacrebleu").setLevel(logging.ERROR)
    out = args.out
    os.makedirs(out, exist_ok=True)

    ref = read_lines(REF)
    assert len(ref) == 1999, len(ref)
    ref300 = os.path.join(out, "ref300.txt")
    write_lines(ref300, ref[:300])

    cases = []  # (name, hyp path, ref path, what)
    cases.append(("reference", REF, REF, "the reference itself"))
    p = os.path.join(out, "perturbed.txt")
    write_lines(p, perturb_words(ref, 1))
    cases.append(("perturbed", p, REF, "words dropped, swapped, diacritics lost, truncated, upper-cased"))
    p = os.path.join(out, "empty10.txt")
    write_lines(p, with_empty_lines(ref, 2))
    cases.append(("empty10", p, REF, "~10% empty lines, the others perturbed"))
    p = os.path.join(out, "punct_numbers.txt")
    write_lines(p, punct_numbers(ref, 3))
    cases.append(("punct_numbers", p, REF, "punctuation, quotes, dashes and digits altered"))
    cases.append(("source", SRC, REF, "the English source as hypothesis"))
    p = os.path.join(out, "first3.txt")
    write_lines(p, first_words(ref, 3))
    cases.append(("first3", p, REF, "every line truncated to its first 3 words"))
    p = os.path.join(out, "longer300.txt")
    write_lines(p, longer(ref[:300]))
    cases.append(("longer300", p, ref300, "first 300 lines, each longer than its reference"))
    for name, h, r in TINY:
        hp, rp = os.path.join(out, f"tiny_{name}.hyp"), os.path.join(out, f"tiny_{name}.ref")
        write_bytes(hp, h.encode("utf-8"))
        write_bytes(rp, r.encode("utf-8"))
        cases.append((name, hp, rp, "hand case"))

    rows = []
    for name, hp, rp, what in cases:
        hyps, refs = read_lines(hp), read_lines(rp)
        assert len(hyps) == len(refs), (name, len(hyps), len(refs))
        bm, b, bst = stats_bleu(hyps, refs)
        cm, c, cst = stats_chrf(hyps, refs)
        bsig, csig = bm.get_signature().format(), cm.get_signature().format()
        row = {
            "name": name, "what": what, "hyp": hp, "ref": rp, "lines": len(hyps),
            "bleu": b.score, "bleu_string": str(b), "bleu_signature": bsig,
            "bleu_stats": {"sys_len": bst[0], "ref_len": bst[1], "correct": bst[2:6], "total": bst[6:10]},
            "chrf": c.score, "chrf_string": str(c), "chrf_signature": csig,
            "chrf_stats": {"hyp": cst[0::3], "ref": cst[1::3], "match": cst[2::3]},
        }
        if not args.no_cli_check:
            cli_check(hp, rp, str(b), str(c), bsig, csig)
        rows.append(row)
        print(f"{name:24s} {len(hyps):5d} lines  {b}  {c}")

    tok = Tokenizer13a()
    fixture = {
        "sacrebleu_version": sacrebleu.__version__,
        "generator": "tools/make_bleu_fixture.py",
        "reading": "utf-8, newline='\\n', line.rstrip() (as the sacrebleu CLI)",
        "cases": rows,
        "tokenizer": [{"input": s, "output": tok(s)} for s in TOKENIZER_INPUTS],
    }
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"wrote {len(rows)} cases, {len(TOKENIZER_INPUTS)} tokenizer strings to {out} ({size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
