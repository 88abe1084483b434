#!/usr/bin/env python3
"""tools/make_token_fixture.py: reference tokenization for tests/test_tokenize.c.

    python3 tools/make_token_fixture.py [--model data/sample/spiece.model]
        [--text tests/fixtures/tatoeba.en] [--out tests/fixtures] [--check-hf]

Uses the python `sentencepiece` package only (HF's T5 tokenizer gives `sp.encode(text) + [1]`,
see docs/DEVICE.md). Writes, under --out:
  tatoeba.ids.txt       one line per input line: `<count> <fnv1a64 hex of the int32 LE ids>`,
                        ids = sp.encode(line) + [1] (</s>)
  tatoeba.head.ids.txt  the full ids of the first 300 lines, space-separated
  tatoeba.decode.txt    `ids<TAB>text`: ids of 20 lines with pad/</s>/<unk> and extra ids
                        (32000..32127) mixed in; text = sp.decode of the ids without them,
                        which is HF's decode(skip_special_tokens=True)
  tokenize_cases.jsonl  {"prefix", "text", "ids"} for the T5 task prefix and edge cases
                        (whitespace, NFKC, unknown characters, long text), and
                        {"decode": ids, "text"} cases; first line {"sentencepiece": version}
Input lines: split on "\\n" only (nothing else stripped). Every .txt starts with "#" lines
naming the sentencepiece version.

--check-hf: also build transformers' T5Tokenizer (the tokenizers backend) from the model's
pieces, scores and charsmap, and report where it differs from the references.
"""
import argparse
import json
import os
import struct
import sys

import sentencepiece as spm

PREFIX = "translate English to Romanian: "
HEAD_LINES = 300
DECODE_LINES = 20
EOS = 1
EXTRA_IDS = 100
VOCAB = 32128  # 32000 pieces + 100 extra ids, padded to a multiple of 128


def fnv1a64(data):
    h = 14695981039346656037
    for b in data:
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def ids_hash(ids):
    return fnv1a64(struct.pack("<%di" % len(ids), *ids))


def edge_cases():
    long_text = "The quick brown fox jumps over the lazy dog. " * 200
    return [
        ("", ""),
        ("", " "),
        ("", "   leading and trailing spaces   "),
        ("", "multiple     spaces\tand\ttabs"),
        ("", "a line\nbreak and a\r\ncarriage return"),
        ("", "NFKC: ﬁne ① ＡＢＣ ½ ™ …"),
        ("", "combining e\u0301 vs é, caf\u00e9"),
        ("", "Română: ș ț ă î â Ș Ț ş ţ"),
        ("", "unknown: 😀 中文 Ελληνικά ï"),
        ("", "literal </s> <pad> <unk> <extra_id_0> text"),
        ("", "no\u00a0break\u2003em\u200bzero width"),
        ("", "control \x01\x7f chars"),
        ("", long_text),
        (PREFIX, ""),
        ("summarize: ", "A short text."),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="data/sample/spiece.model")
    ap.add_argument("--text", default="tests/fixtures/tatoeba.en")
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--check-hf", action="store_true")
    args = ap.parse_args()

    sp = spm.SentencePieceProcessor(model_file=args.model)
    pieces = sp.get_piece_size()
    assert (sp.pad_id(), sp.eos_id(), sp.unk_id()) == (0, EOS, 2), "not a T5 sentencepiece model"
    model_hash = fnv1a64(open(args.model, "rb").read())
    raw = open(args.text, "rb").read().decode("utf-8")
    lines = raw.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header = "# tools/make_token_fixture.py: sentencepiece %s (python), %s (%d pieces, fnv1a64 %016x), %s (%d lines)\n" % (
        spm.__version__, args.model, pieces, model_hash, args.text, len(lines))

    all_ids = [sp.encode(line) + [EOS] for line in lines]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tatoeba.ids.txt"), "w") as f:
        f.write(header)
        f.write("# per line: <count> <fnv1a64 of the ids as int32 little-endian>; ids = sp.encode(line) + [1]\n")
        for ids in all_ids:
            f.write("%d %016x\n" % (len(ids), ids_hash(ids)))
    with open(os.path.join(args.out, "tatoeba.head.ids.txt"), "w") as f:
        f.write(header)
        f.write("# the ids of the first %d lines: sp.encode(line) + [1]\n" % HEAD_LINES)
        for ids in all_ids[:HEAD_LINES]:
            f.write(" ".join(map(str, ids)) + "\n")

    # Decode references: lines spread over the file, plus both lines with an unknown
    # character ("naïve": sentencepiece itself would print " ⁇ " for <unk>, HF drops it).
    picks = [i * len(lines) // DECODE_LINES for i in range(DECODE_LINES - 2)]
    picks += [i for i, ids in enumerate(all_ids) if 2 in ids][:2]
    decode_rows = []
    for k, i in enumerate(picks):
        ids = all_ids[i]
        mixed = [0] + ids[:2] + [32099 - k, 2] + ids[2:-1] + [32000 + k, 32100 + k % 28, EOS, 0, 0]
        kept = [t for t in mixed if 2 < t < pieces]
        decode_rows.append((mixed, sp.decode(kept)))
    with open(os.path.join(args.out, "tatoeba.decode.txt"), "w") as f:
        f.write(header)
        f.write("# ids<TAB>text: text = sp.decode(ids without 0, 1, 2 and ids >= %d)\n" % pieces)
        for ids, text in decode_rows:
            assert "\t" not in text and "\n" not in text
            f.write(" ".join(map(str, ids)) + "\t" + text + "\n")

    cases = [(PREFIX, lines[i]) for i in range(0, len(lines), len(lines) // 12)] + edge_cases()
    dec_cases = [
        [], [0, 1, 2], [8774, 2, 1150, 55, 1], [32099, 8774, 32000, 1150, 32127, 55, 1, 0],
        sp.encode("Hello World!") + sp.encode(" again"),
    ]
    with open(os.path.join(args.out, "tokenize_cases.jsonl"), "w") as f:
        f.write(json.dumps({"sentencepiece": spm.__version__, "model_fnv1a64": "%016x" % model_hash}) + "\n")
        for prefix, text in cases:
            f.write(json.dumps({"prefix": prefix, "text": text, "ids": sp.encode(prefix + text) + [EOS]}) + "\n")
        for ids in dec_cases:
            f.write(json.dumps({"decode": ids, "text": sp.decode([t for t in ids if 2 < t < pieces])}) + "\n")

    total = sum(len(x) for x in all_ids)
    sizes = {n: os.path.getsize(os.path.join(args.out, n)) for n in
             ("tatoeba.ids.txt", "tatoeba.head.ids.txt", "tatoeba.decode.txt", "tokenize_cases.jsonl")}
    print("sentencepiece %s, %d pieces; %d lines, %d ids (with </s>); %d encode + %d decode cases" % (
        spm.__version__, pieces, len(lines), total, len(cases), len(dec_cases)))
    for n, s in sizes.items():
        print("  %-24s %7d bytes" % (n, s))

    if args.check_hf:
        check_hf(args.model, sp, lines, all_ids, decode_rows, cases, dec_cases)


def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b):
    i = 0
    while i < len(b):
        k, i = _varint(b, i)
        f, t = k >> 3, k & 7
        if t == 0:
            v, i = _varint(b, i)
        elif t == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif t == 5:
            v, i = b[i:i + 4], i + 4
        elif t == 1:
            v, i = b[i:i + 8], i + 8
        else:
            raise ValueError("protobuf wire type %d" % t)
        yield f, v


def check_hf(model_path, sp, lines, all_ids, decode_rows, cases, dec_cases):
    """Compare with transformers' T5Tokenizer built from the model's pieces and charsmap
    (ModelProto.normalizer_spec = field 3, its precompiled_charsmap = field 2; parsed by
    hand since the protobuf package may be missing)."""
    import transformers
    from transformers import T5Tokenizer
    raw = open(model_path, "rb").read()
    norm = [v for f, v in _fields(raw) if f == 3][0]
    charsmap = [v for f, v in _fields(norm) if f == 2][0]
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    tok = T5Tokenizer(vocab=vocab, _spm_precompiled_charsmap=charsmap, extra_ids=EXTRA_IDS)
    bad = [i for i, line in enumerate(lines) if tok(line).input_ids != all_ids[i]]
    print("HF T5Tokenizer (transformers %s): encode differs on %d/%d lines %s" % (
        transformers.__version__, len(bad), len(lines), bad[:10]))
    for ids, text in decode_rows:
        got = tok.decode(ids, skip_special_tokens=True)
        if got != text:
            print("  decode differs: %r vs %r" % (got, text))
    for prefix, text in cases:
        want = sp.encode(prefix + text) + [EOS]
        got = tok(prefix + text).input_ids
        if got != want:
            print("  encode differs on %r: HF %s, sentencepiece %s" % ((prefix + text)[:60], got[:24], want[:24]))
    for ids in dec_cases:
        want = sp.decode([t for t in ids if 2 < t < sp.get_piece_size()])
        got = tok.decode(ids, skip_special_tokens=True)
        if got != want:
            print("  decode differs on %s: HF %r, sentencepiece %r" % (ids, got, want))


if __name__ == "__main__":
    sys.exit(main())
