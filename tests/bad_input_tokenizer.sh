#!/usr/bin/env bash
# tests/bad_input_tokenizer.sh: issue 35's tokenizer and text families at the binary level,
# under the AddressSanitizer build. Damaged spiece.model files (the normalizer's
# precompiled_charsmap trie, the denormalizer's, pieces, trainer_spec, the wire format),
# written by plain python3 from data/sample/spiece.model, given to `train_t5 prepare` and to
# a training run as --tokenizer_name: exit 1 and ONE stderr line "error: ..." (optionally a
# "HINT: ..." line) naming the file, no signal, no sanitizer report, no hang, and no
# train.t5ds or *.tmp file left. std::bad_alloc under `ulimit -v` (the release build: an
# ASan binary cannot run under an address-space limit) is one line, not "terminate called".
# A SIGTERM while a split is tokenized leaves no *.tmp. Text files read as Python's universal
# newlines read them (CR-only, mixed ends: the example count python3 gives); a pipe, FIFO or
# device as a data file or tokenizer is refused in one line saying what it is.
#   TRAIN_T5=path/to/binary TRAIN_T5_RELEASE=path/to/release T5_TEST_TIMEOUT=seconds \
#     tests/bad_input_tokenizer.sh    (defaults ./build-asan/train_t5, ./train_t5, 60 s a command)
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${TRAIN_T5:-./build-asan/train_t5}
REL=${TRAIN_T5_RELEASE:-./train_t5}
LIMIT=${T5_TEST_TIMEOUT:-60}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "OK     $1"; }
notok() { fail=$((fail + 1)); echo "NOT OK $1"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

if [ ! -x "$BIN" ]; then
  notok "$BIN is not built (make test builds it with AddressSanitizer)"
  finish
fi
if ! command -v python3 >/dev/null 2>&1; then
  notok "python3 is needed to write the test models"
  finish
fi
T=$(mktemp -d /tmp/t5_bad_tok.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
TOK=data/sample/spiece.model
TM=tests/fixtures/trainer_model

# ---- damaged tokenizer models ---------------------------------------------------------------
python3 - "$T" "$TOK" <<'PY' || { notok "python3 could not write the test models"; finish; }
import os, struct, sys

root, src = sys.argv[1], sys.argv[2]
model = open(src, "rb").read()

def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7F) << s; s += 7
        if c < 0x80:
            return r, i

def fields(b):
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        elif w == 5:
            v = b[i:i + 4]; i += 4
        elif w == 1:
            v = b[i:i + 8]; i += 8
        else:
            raise ValueError(w)
        out.append((f, w, v))
    return out

def enc_varint(v):
    o = bytearray()
    while True:
        c, v = v & 0x7F, v >> 7
        o.append(c | 0x80 if v else c)
        if not v:
            return bytes(o)

def enc(fs):
    o = bytearray()
    for f, w, v in fs:
        o += enc_varint(f << 3 | w)
        o += enc_varint(v) if w == 0 else (enc_varint(len(v)) + v if w == 2 else v)
    return bytes(o)

top = fields(model)
assert enc(top) == model
spec = [v for f, w, v in top if f == 3][0]
cm = [v for f, w, v in fields(spec) if f == 2][0]
trie = struct.unpack("<I", cm[:4])[0]
units = list(struct.unpack("<%dI" % (trie // 4), cm[4:4 + trie]))
strs = cm[4 + trie:]

def with_charsmap(new, field=3):
    ns = enc([(f, w, new if f == 2 else v) for f, w, v in fields(spec)])
    return enc([(f, w, ns if f == field else v) for f, w, v in top])

def charsmap(units_, strs_, size=None):
    size = 4 * len(units_) if size is None else size
    return struct.pack("<I", size) + struct.pack("<%dI" % len(units_), *units_) + strs_

def offset(u):
    return (u >> 10) << ((u & (1 << 9)) >> 6)

def chain(depth, cycle=False, value=0, strs_=b"x\0"):
    """A trie for the key "aaa...": node i in block i+1 with a leaf; free units match nothing."""
    n = 256 * (depth + 2)
    u = [1 << 31] * n
    u[0] = 256 << 10
    for i in range(depth):
        base = 256 * (i + 1)
        node = base ^ ord("a")
        nxt = base if (cycle and i == depth - 1) else base + 256
        u[node] = ((node ^ nxt) << 10) | (1 << 8) | ord("a")
        u[nxt] = (1 << 31) | value
    return charsmap(u, strs_)

def write(name, data):
    with open(os.path.join(root, name + ".model"), "wb") as f:
        f.write(data)

# the issue's example: the root unit's offset points far outside the trie
u = list(units); u[0] = (0x3FFFFF << 10) | (1 << 9)
write("root_offset", with_charsmap(charsmap(u, strs)))
# an inner unit (the root's first child from " " on) whose children lie past the trie's end
child = next(offset(units[0]) ^ c for c in range(0x20, 0x100)
             if units[offset(units[0]) ^ c] & ((1 << 31) | 0xFF) == c)
u = list(units); u[child] = (u[child] & 0x1FF) | (((len(units) + 512) ^ child) << 10)
write("inner_offset", with_charsmap(charsmap(u, strs)))
write("trie_cut", with_charsmap(charsmap(units, strs, size=1024 * 4)))                   # size says 1024 units
write("trie_past_end", with_charsmap(struct.pack("<I", len(cm)) + cm[4:]))              # size past the blob
write("trie_unaligned", with_charsmap(struct.pack("<I", trie - 2) + cm[4:]))
write("no_strings", with_charsmap(cm[:4 + trie]))                                        # strings region cut off
write("cycle", with_charsmap(chain(3, cycle=True)))                                      # "a" loops, a match each time
write("matches_33", with_charsmap(chain(33)))                                            # 33 matches along "a"*33
write("value_outside", with_charsmap(chain(4, value=9)))
write("string_no_nul", with_charsmap(chain(4, strs_=b"xy")))
write("denorm_root", enc(top + [(5, 2, enc([(2, 2, charsmap([(0x3FFFFF << 10) | (1 << 9)] + units[1:], strs))]))]))
write("piece_nul", enc(top + [(1, 2, enc([(1, 2, b"ab\0cd"), (2, 5, struct.pack("<f", -3.0)), (3, 0, 1)]))]))
write("piece_nan", enc(top + [(1, 2, enc([(1, 2, b"\xe2\x96\x81zz"), (2, 5, struct.pack("<f", float("nan")))]))]))
write("piece_type9", enc(top + [(1, 2, enc([(1, 2, b"\xe2\x96\x81zz"), (3, 0, 9)]))]))
write("model_type5", enc(top + [(2, 2, enc([(3, 0, 5)]))]))
write("truncated", model[: len(model) // 2])
# the library's own refusals, one line too: a failed self-test (it logs the samples), a duplicate piece
write("self_test", enc(top + [(4, 2, enc([(1, 2, enc([(1, 2, b"Hello"), (2, 2, b"wrong")]))]))]))
write("dup_piece", enc(top + [(1, 2, enc([(1, 2, b"<unk>"), (3, 0, 2)]))]))
# valid, but big: 40 MB of an unknown field, for the address-space limit
write("big", model + enc([(1000, 2, bytes(40 << 20))]))
PY

# ---- run ---------------------------------------------------------------------------------------
PRE=()
run() { # run ENV_ASAN_OPTIONS ARGS... (the train_t5 command line, at most LIMIT seconds)
  local opts=$1; shift
  ASAN_OPTIONS=$opts UBSAN_OPTIONS=print_stacktrace=1 timeout -s KILL "$LIMIT" ${PRE[@]+"${PRE[@]}"} "$RUN_BIN" "$@" \
    >"$T/out" 2>"$T/err" </dev/null
  rc=$?
}
RUN_BIN=$BIN
sanitizer_report() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|UndefinedBehaviorSanitizer' "$T/err"; }

expect_error_cmd() { # expect_error_cmd NAME NEEDLE ARGS...
  local name=$1 needle=$2 why=""
  shift 2
  run "detect_leaks=0" "$@"
  local lines first second
  lines=$(wc -l <"$T/err")
  first=$(sed -n 1p "$T/err")
  second=$(sed -n 2p "$T/err")
  if [ "$rc" -eq 137 ]; then why="no answer in $LIMIT s (killed)"
  elif [ "$rc" -ne 1 ]; then why="exit code $rc, want 1"
  elif sanitizer_report; then why="sanitizer report"
  elif [ "${first#error:}" = "$first" ]; then why="stderr does not start with \"error:\""
  elif [ "$lines" -gt 2 ] || { [ "$lines" -eq 2 ] && [ "${second#HINT:}" = "$second" ]; }; then
    why="stderr has $lines lines (want one error line, optionally a HINT line)"
  elif ! grep -qF -- "$needle" "$T/err"; then why="message does not name \"$needle\""
  fi
  if [ -z "$why" ]; then
    ok "$(printf '%-22s %.300s' "$name" "$first")"
  else
    notok "$name: $why"
    sed -n '1,12s/^/       | /p' "$T/err"
  fi
}

no_leftovers() { # NAME DIR: no *.tmp and no .t5ds file under DIR
  local left
  left=$(find "$2" \( -name '*.tmp' -o -name '*.t5ds' \) 2>/dev/null | tr '\n' ' ')
  [ -z "$left" ] || notok "$1: left behind: $left"
}

# Data: 8 lines of the sample, plus a line of 40 "a"s (the synthetic tries match only "a").
mkdir -p "$T/d"
{ head -n 7 data/sample/train.source; printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n'; } >"$T/d/train.source"
head -n 8 data/sample/train.target >"$T/d/train.target"

n=0
prep_error() { # NAME MODEL NEEDLE: train_t5 prepare with that --tokenizer_name
  n=$((n + 1))
  expect_error_cmd "$1" "$3" prepare --data_dir "$T/d" --tokenizer_name "$2" --output_dir "$T/p$n"
  grep -qF -- "$2" "$T/err" || notok "$1: the message does not name $2"
  no_leftovers "$1" "$T/p$n"
}
M=$T
prep_error "trie: root offset" "$M/root_offset.model" "the root's children"
prep_error "trie: inner offset" "$M/inner_offset.model" "lie outside the trie's"
prep_error "trie: size cut" "$M/trie_cut.model" "lie outside the trie's 1024 units"
prep_error "trie: size past end" "$M/trie_past_end.model" "the trie size says"
prep_error "trie: size unaligned" "$M/trie_unaligned.model" "not a multiple of the 4-byte units"
prep_error "trie: no strings" "$M/no_strings.model" "strings region"
prep_error "trie: a cycle" "$M/cycle.model" "(a cycle)"
prep_error "trie: 33 matches" "$M/matches_33.model" "more than the 32"
prep_error "trie: value outside" "$M/value_outside.model" "outside the 2-byte strings region"
prep_error "trie: string w/o NUL" "$M/string_no_nul.model" "has no NUL"
prep_error "denormalizer trie" "$M/denorm_root.model" "denormalizer_spec.precompiled_charsmap"
prep_error "piece with NUL" "$M/piece_nul.model" "holds a NUL byte"
prep_error "piece score NaN" "$M/piece_nan.model" "score nan"
prep_error "piece type 9" "$M/piece_type9.model" "type 9"
prep_error "model_type 5" "$M/model_type5.model" "trainer_spec.model_type"
prep_error "truncated model" "$M/truncated.model" "truncated file?"
prep_error "self-test fails" "$M/self_test.model" "self_test_data samples do not encode"
prep_error "duplicate piece" "$M/dup_piece.model" "<unk> is already defined"

# the same through a training run: refused before --output_dir is made
train_error() { # NAME MODEL NEEDLE
  n=$((n + 1))
  expect_error_cmd "$1" "$3" --model "$TM" --tokenizer_name "$2" --do_train --data_dir "$T/d" --cache_dir "$T/c$n" \
    --output_dir "$T/o$n" --max_steps 1 --per_device_train_batch_size 2
  [ -e "$T/o$n" ] && notok "$1: --output_dir $T/o$n was made"
  no_leftovers "$1" "$T/c$n"
}
train_error "train: root offset" "$M/root_offset.model" "the root's children"
train_error "train: a cycle" "$M/cycle.model" "(a cycle)"
train_error "train: piece with NUL" "$M/piece_nul.model" "holds a NUL byte"

# a tokenizer that is not a regular file: said at once, never waited on
mkfifo "$T/fifo.model"
prep_error "tokenizer a FIFO" "$T/fifo.model" "is a FIFO (a pipe)"
prep_error "tokenizer /dev/null" /dev/null "is a character device"
prep_error "tokenizer /dev/zero" /dev/zero "is a character device"

# std::bad_alloc out of the shim under an address-space limit: one line, exit 1
# The limit: what a prepare with the sample model needs (found by bisection: a CUDA build maps
# NCCL and cuBLASLt at load, ~1 GB of address space, a CPU build far less) plus 32 MB; the
# 40 MB model needs more than that (the file and its parsed copy).
ulimit_ok() { bash -c 'ulimit -v "$1" && shift && exec "$@"' _ "$1" "$REL" prepare --data_dir "$T/d" \
  --tokenizer_name "$TOK" --output_dir "$T/ulimit_probe" >/dev/null 2>&1; }
if [ -x "$REL" ]; then
  lo=16384; hi=8388608  # KiB
  if ulimit_ok $hi; then
    while [ $((hi - lo)) -gt 8192 ]; do mid=$(((lo + hi) / 2)); if ulimit_ok $mid; then hi=$mid; else lo=$mid; fi; done
  fi
  VLIM=$((hi + 32768))
  RUN_BIN=$REL
  PRE=(bash -c 'ulimit -v '$VLIM' && exec "$@"' _)
  prep_error "ulimit -v $VLIM (the sample model's need + 32 MB)" "$M/big.model" "out of memory loading the sentencepiece model"
  PRE=()
  RUN_BIN=$BIN
  grep -q "terminate called" "$T/err" && notok "ulimit -v: \"terminate called\" on stderr"
else
  notok "ulimit -v: $REL is not built (make all; an AddressSanitizer binary cannot run under ulimit -v)"
fi

# the sample model loads (ASan, leak checking on)
run "detect_leaks=1" prepare --data_dir "$T/d" --tokenizer_name "$TOK" --output_dir "$T/good"
if [ "$rc" -eq 0 ] && ! sanitizer_report && grep -q "train        8 examples" "$T/out"; then
  ok "the sample spiece.model: prepare writes 8 examples, no sanitizer report"
else notok "the sample spiece.model: exit code $rc"; sed -n '1,12s/^/       | /p' "$T/err"; fi

# ---- a signal while a split is tokenized: no *.tmp left ---------------------------------------
mkdir -p "$T/big"
for _ in $(seq 1 40); do cat data/sample/train.source; done >"$T/big/train.source"
for _ in $(seq 1 40); do cat data/sample/train.target; done >"$T/big/train.target"
sigterm_case() { # NAME DIR-WHERE-THE-TMP-APPEARS ARGS...
  local name=$1 dir=$2; shift 2
  ASAN_OPTIONS=detect_leaks=0 "$BIN" "$@" >"$T/sig.out" 2>"$T/sig.err" &
  local pid=$! seen=""
  for _ in $(seq 1 1000); do
    seen=$(find "$dir" -name '*.tmp' 2>/dev/null | head -n 1)
    [ -n "$seen" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  local code=$?
  local left
  left=$(find "$dir" -name '*.tmp' 2>/dev/null | tr '\n' ' ')
  if [ -z "$seen" ]; then notok "$name: no *.tmp appeared while tokenizing (exit code $code)"
  elif [ -n "$left" ]; then notok "$name: SIGTERM (exit code $code) left $left"
  else ok "$(printf '%-22s SIGTERM while %s existed: exit code %d, removed' "$name" "${seen##*/}" "$code")"; fi
}
sigterm_case "SIGTERM in prepare" "$T/sp" prepare --data_dir "$T/big" --tokenizer_name "$TOK" --output_dir "$T/sp"
sigterm_case "SIGTERM in training" "$T/sc" --model "$TM" --tokenizer_name "$TOK" --do_train --data_dir "$T/big" \
  --cache_dir "$T/sc" --output_dir "$T/so" --max_steps 1 --per_device_train_batch_size 2

# ---- text files read as Python reads them (universal newlines) -------------------------------
prep_count() { # NAME WANT ARGS...: prepare's train line says WANT examples
  local name=$1 want=$2; shift 2
  run "detect_leaks=0" prepare --tokenizer_name "$TOK" "$@"
  local got
  got=$(grep -oE '^train +[0-9]+ examples' "$T/out" | grep -oE '[0-9]+')
  if [ "$rc" -eq 0 ] && ! sanitizer_report && [ "$got" = "$want" ]; then ok "$(printf '%-22s %s examples' "$name" "$got")"
  else notok "$name: exit code $rc, ${got:-no} examples, want $want"; sed -n '1,6s/^/       | /p' "$T/err"; fi
}
# the issue's example: 8 pairs with CR-only ends
mkdir -p "$T/cr"
head -n 8 data/sample/train.source | tr '\n' '\r' >"$T/cr/train.source"
head -n 8 data/sample/train.target | tr '\n' '\r' >"$T/cr/train.target"
prep_count "CR-only pairs" 8 --data_dir "$T/cr" --output_dir "$T/cr_out"
# random mixes of "\n", "\r", "\r\n" and a last line with or without an end: python3's count
for seed in 1 2 3 4 5; do
  mkdir -p "$T/mix$seed"
  want=$(python3 - "$T/mix$seed" "$seed" <<'PY'
import random, sys
d, seed = sys.argv[1], int(sys.argv[2])
random.seed(seed)
src = open("data/sample/train.source", encoding="utf-8").read().split("\n")[:30]
tgt = open("data/sample/train.target", encoding="utf-8").read().split("\n")[:30]
for name, lines in (("train.source", src), ("train.target", tgt)):
    out = "".join(l + random.choice(["\n", "\r", "\r\n"]) for l in lines[:-1]) + lines[-1]
    if random.random() < 0.5:
        out += random.choice(["\n", "\r", "\r\n"])
    open(f"{d}/{name}", "w", newline="").write(out)
# as HF reads them: text mode, universal newlines
print(len(open(f"{d}/train.source", encoding="utf-8").readlines()))
PY
)
  prep_count "mixed line ends ($seed)" "$want" --data_dir "$T/mix$seed" --output_dir "$T/mix${seed}_out"
done
# JSON lines with CR-only ends
printf '{"translation": {"en": "Hi.", "ro": "Salut."}}\r{"translation": {"en": "Bye.", "ro": "Pa."}}\r{"translation": {"en": "Yes.", "ro": "Da."}}' \
  >"$T/cr.jsonl"
prep_count "CR-only JSON lines" 3 --train_file "$T/cr.jsonl" --task translation_en_to_ro --output_dir "$T/crj_out"
# "\r\r\n" is two line ends: line 2 is empty, as Python reads it
mkdir -p "$T/crcrlf"
printf 'Hello.\r\r\nWorld.\r\n' >"$T/crcrlf/train.source"; printf 'Salut.\nLume.\nBine.\n' >"$T/crcrlf/train.target"
expect_error_cmd "\\r\\r\\n: an empty line" "train.source:2: empty line" prepare --data_dir "$T/crcrlf" \
  --tokenizer_name "$TOK" --output_dir "$T/crcrlf_out"

# a data file that is not a regular file: said in one line, never read half or waited on
expect_error_train_stdin() {
  printf '{"translation": {"en": "Hi.", "ro": "Salut."}}\n' |
    ASAN_OPTIONS=detect_leaks=0 timeout -s KILL "$LIMIT" "$BIN" --model "$TM" --tokenizer_name "$TOK" --do_train \
      --train_file /dev/stdin --task translation_en_to_ro --cache_dir "$T/stdin_c" --output_dir "$T/stdin_o" \
      --max_steps 1 --per_device_train_batch_size 1 >"$T/out" 2>"$T/err"
  rc=$?
  local first
  first=$(sed -n 1p "$T/err")
  if [ "$rc" -eq 1 ] && ! sanitizer_report && grep -q "^error: /dev/stdin: is a FIFO (a pipe)" "$T/err" &&
     ! grep -q "changed while" "$T/err" && [ "$(wc -l <"$T/err")" -le 2 ]; then
    ok "$(printf '%-22s %.300s' "--train_file /dev/stdin" "$first")"
  else notok "--train_file /dev/stdin: exit code $rc"; sed -n '1,6s/^/       | /p' "$T/err"; fi
  [ -e "$T/stdin_o" ] && notok "--train_file /dev/stdin: --output_dir was made"
}
expect_error_train_stdin
mkdir -p "$T/fifo_d"
mkfifo "$T/fifo_d/train.source"; cp "$T/d/train.target" "$T/fifo_d/"
expect_error_cmd "train.source a FIFO" "train.source: is a FIFO (a pipe)" prepare --data_dir "$T/fifo_d" \
  --tokenizer_name "$TOK" --output_dir "$T/fifo_out"
mkfifo "$T/fifo.jsonl"
expect_error_cmd "--train_file a FIFO" "fifo.jsonl: is a FIFO (a pipe)" prepare --train_file "$T/fifo.jsonl" \
  --task translation_en_to_ro --tokenizer_name "$TOK" --output_dir "$T/fifoj_out"
expect_error_cmd "--train_file /dev/zero" "/dev/zero: is a character device" prepare --train_file /dev/zero \
  --task translation_en_to_ro --tokenizer_name "$TOK" --output_dir "$T/zero_out"

finish
