#!/usr/bin/env bash
# tests/plot_png.sh: the pictures. `train_t5 plot` on two tiny CPU training runs (the
# tests/fixtures trainer model and lines, 6 steps, a loss logged every step) and on a
# trainer_state.json with evaluations, and `train_t5 estimate --png`: each PNG is decoded
# here by plain python3 (zlib, struct): the signature, IHDR's size = the one asked for, every
# chunk's CRC, the IDAT stream inflating to height x (1 + width x 4) bytes, the rows unfiltered,
# and the runs' colours among the pixels. Then bad input: a missing folder, no
# trainer_state.json, invalid JSON, an empty log_history, a value that is not a number, an
# --out or --png that cannot be written, a write cut short by the file-size limit: each one
# line "error: ..." naming the file, exit 1, and no PNG (nor its .tmp) left behind.
# Prints OK / NOT OK per check and "N passed, M failed"; exits non-zero on a failure.
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${TRAIN_T5:-./train_t5}
T=$(mktemp -d /tmp/t5_plot_XXXXXX); trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

# png_check.py FILE WIDTH HEIGHT [RRGGBB ...]: a valid PNG of that size (HEIGHT "any": not
# checked) holding each colour at some pixel; prints what it found, exits 1 otherwise
cat >"$T/png_check.py" <<'PY'
import struct, sys, zlib
path, want_w, want_h, colours = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
b = open(path, "rb").read()
def die(msg): print(msg); sys.exit(1)
if len(b) < 2000: die(f"{path}: only {len(b)} bytes")
if b[:8] != b"\x89PNG\r\n\x1a\n": die(f"{path}: no PNG signature")
pos, chunks = 8, []
while pos < len(b):
    if pos + 12 > len(b): die(f"{path}: truncated chunk at byte {pos}")
    n, kind = struct.unpack(">I4s", b[pos:pos + 8])
    data = b[pos + 8:pos + 8 + n]
    crc, = struct.unpack(">I", b[pos + 8 + n:pos + 12 + n])
    if zlib.crc32(kind + data) & 0xffffffff != crc: die(f"{path}: bad CRC in chunk {kind!r}")
    chunks.append((kind, data)); pos += 12 + n
kinds = [k for k, _ in chunks]
if kinds[0] != b"IHDR" or kinds[-1] != b"IEND": die(f"{path}: chunks {kinds[:3]}...{kinds[-1:]}")
w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
if w != want_w or (want_h != "any" and h != int(want_h)): die(f"{path}: {w}x{h}, asked {want_w}x{want_h}")
if depth != 8 or ctype not in (2, 6) or interlace: die(f"{path}: depth {depth}, colour type {ctype}, interlace {interlace}")
ch = 4 if ctype == 6 else 3
raw = zlib.decompress(b"".join(d for k, d in chunks if k == b"IDAT"))
if len(raw) != h * (1 + w * ch): die(f"{path}: IDAT inflates to {len(raw)} bytes, expected {h * (1 + w * ch)}")
stride, prev, seen = w * ch, bytearray(w * ch), set()
for y in range(h):  # undo the PNG row filters (none, sub, up, average, Paeth)
    f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    if f > 4: die(f"{path}: row {y} has filter {f}")
    for i in range(stride):
        a = row[i - ch] if i >= ch else 0
        c = prev[i - ch] if i >= ch else 0
        up = prev[i]
        if f == 1: row[i] = (row[i] + a) & 255
        elif f == 2: row[i] = (row[i] + up) & 255
        elif f == 3: row[i] = (row[i] + (a + up) // 2) & 255
        elif f == 4:
            p = a + up - c; pa, pb, pc = abs(p - a), abs(p - up), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else up if pb <= pc else c)) & 255
    for x in range(0, stride, ch): seen.add(bytes(row[x:x + 3]))
    prev = row
missing = [c for c in colours if bytes.fromhex(c) not in seen]
if missing: die(f"{path}: no pixel of colour {missing} ({len(seen)} colours drawn)")
if len(seen) < 20: die(f"{path}: only {len(seen)} colours: nothing drawn?")
print(f"{w}x{h} PNG, {len(b)} bytes, {len(kinds)} chunks, CRCs and IDAT right, {len(seen)} colours")
PY
png_ok() {  # LABEL FILE WIDTH HEIGHT [RRGGBB ...]
    local label=$1 out; shift
    if out=$(python3 "$T/png_check.py" "$@" 2>&1); then ok "$label: $out"; else bad "$label: $out"; fi
}

# expect_error LABEL NEEDLE ARGS...: exit 1, the first stderr line "error: ..." holding NEEDLE,
# nothing on stderr but it and an optional HINT line
expect_error() {
    local label=$1 needle=$2; shift 2
    local rc
    "$BIN" "$@" >"$T/stdout" 2>"$T/stderr"; rc=$?
    local first; first=$(head -n 1 "$T/stderr")
    local lines; lines=$(grep -vc '^HINT: ' "$T/stderr")
    if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && [[ "$first" == error:* ]] && grep -qF -- "$needle" <<<"$first"; then
        ok "$label: $first"
    else bad "$label: exit $rc, wanted one line naming '$needle'; stderr: $(head -c 400 "$T/stderr")"; fi
}
no_png() {  # LABEL FILE: neither FILE nor FILE.tmp exists
    if [ -e "$2" ] || [ -e "$2.tmp" ]; then bad "$1: $2 (or its .tmp) was left behind"; else ok "$1: nothing written"; fi
}

[ -x "$BIN" ] || { bad "$BIN is not built (make)"; finish; }
command -v python3 >/dev/null || { bad "python3 is needed to decode the PNGs"; finish; }

# ---- two tiny runs on the CPU ------------------------------------------------------------
train() {  # OUTDIR LR
    "$BIN" --device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model \
        --data_dir tests/fixtures/trainer_data --task translation_en_to_ro --max_source_length 24 \
        --max_target_length 20 --per_device_train_batch_size 4 --max_steps 6 --logging_steps 1 \
        --learning_rate "$2" --do_train --save_strategy no --output_dir "$1" --cache_dir "$T/cache" >"$1.log" 2>&1
}
if train "$T/run_a" 3e-3 && train "$T/run_b" 1e-3; then ok "two 6-step CPU runs trained"
else bad "training failed: $(tail -n 3 "$T/run_a.log" "$T/run_b.log" 2>/dev/null | tr '\n' ' ')"; finish; fi

out=$("$BIN" plot "$T/run_a" 2>&1) && [ -f "$T/run_a/training_curves.png" ] \
    && ok "plot OUTPUT_DIR writes OUTPUT_DIR/training_curves.png: $out" || bad "plot run_a: $out"
png_ok "one run (default 1200x800)" "$T/run_a/training_curves.png" 1200 800 1f77b4
out=$("$BIN" plot "$T/run_a/" "$T/run_b" --out "$T/both.png" --width 900 --height 600 2>&1) \
    && ok "plot of two runs: $out" || bad "plot of two runs: $out"
png_ok "two runs overlaid, --width 900 --height 600, one colour each" "$T/both.png" 900 600 1f77b4 ff7f0e

# ---- a state with evaluations (eval_loss, eval_bleu) and a null (NaN) loss -----------------
mkdir -p "$T/evals"
python3 - "$T/evals/trainer_state.json" <<'PY'
import json, sys
lh = []
for s in range(1, 41):
    lh.append({"epoch": s / 40, "grad_norm": 1 / s, "learning_rate": 3e-5 * (1 - s / 40), "loss": 5 / s ** 0.5 if s != 7 else None, "step": s})
    if s % 10 == 0: lh.append({"epoch": s / 40, "eval_loss": 4 / s ** 0.4, "eval_bleu": 2.5 * s / 10, "eval_runtime": 1.0, "step": s})
lh.append({"train_loss": 1.0, "train_runtime": 9.0, "step": 40})
json.dump({"global_step": 40, "log_history": lh}, open(sys.argv[1], "w"), indent=2)
PY
out=$("$BIN" plot "$T/evals" --out "$T/evals.png" 2>&1) && grep -q "4 eval_loss, 4 eval_bleu" <<<"$out" \
    && ok "eval_loss and eval_bleu read from log_history: $out" || bad "plot with evaluations: $out"
png_ok "loss, eval_loss, learning_rate 3e-5, grad_norm, eval_bleu panels" "$T/evals.png" 1200 800 1f77b4

# ---- HF's trainer_state.json of a run that diverged: Python's json writes NaN / Infinity --------
mkdir -p "$T/hf_nan"
python3 - "$T/hf_nan/trainer_state.json" <<'PY'
import json, sys
lh = [{"loss": 9.0 - s / 10, "grad_norm": 1.0 if s < 8 else float("nan"), "learning_rate": 1e-4, "step": s}
      for s in range(1, 13)]
lh.append({"eval_loss": 7.4, "step": 6}); lh.append({"eval_loss": float("nan"), "step": 12})
lh.append({"loss": float("inf"), "step": 13}); lh.append({"loss": float("-inf"), "step": 14})
json.dump({"global_step": 14, "log_history": lh, "note": "a string with NaN and Infinity in it"}, open(sys.argv[1], "w"))
PY
grep -q 'NaN' "$T/hf_nan/trainer_state.json" && grep -q -- '-Infinity' "$T/hf_nan/trainer_state.json" \
    || bad "the HF-style state has no bare NaN / -Infinity (python's json changed?)"
out=$("$BIN" plot "$T/hf_nan" --out "$T/hf_nan.png" 2>&1) && grep -q "12 loss, 1 eval_loss" <<<"$out" \
    && grep -q "8 non-finite values (NaN, inf or null) left out" <<<"$out" \
    && ok "HF's NaN / Infinity / -Infinity are left out and counted: $out" || bad "plot of a state with NaN: $out"
png_ok "the run with NaN drawn" "$T/hf_nan.png" 1200 800 1f77b4

# ---- bad input ----------------------------------------------------------------------------
expect_error "missing folder" "$T/nope" plot "$T/nope"
no_png "missing folder" "$T/nope/training_curves.png"
mkdir -p "$T/empty_dir"
expect_error "no trainer_state.json" "$T/empty_dir/trainer_state.json" plot "$T/empty_dir"
no_png "no trainer_state.json" "$T/empty_dir/training_curves.png"
mkdir -p "$T/broken"; printf '{"global_step": 3, "log_history": [{"loss": 1.0,, "step": 1}]}\n' >"$T/broken/trainer_state.json"
expect_error "invalid JSON" "$T/broken/trainer_state.json: not valid JSON (line 1" plot "$T/broken"
no_png "invalid JSON" "$T/broken/training_curves.png"
mkdir -p "$T/nolog"; echo '{"global_step": 0, "log_history": []}' >"$T/nolog/trainer_state.json"
expect_error "empty log_history" "log_history has 0 entries" plot "$T/nolog"
no_png "empty log_history" "$T/nolog/training_curves.png"
mkdir -p "$T/trainonly"; echo '{"log_history": [{"train_runtime": 1.5, "step": 2}]}' >"$T/trainonly/trainer_state.json"
expect_error "no logged loss" "--logging_steps" plot "$T/trainonly"
mkdir -p "$T/nokey"; echo '{"global_step": 2}' >"$T/nokey/trainer_state.json"
expect_error "no log_history" '"log_history"' plot "$T/nokey"
mkdir -p "$T/strval"; echo '{"log_history": [{"loss": "high", "step": 1}]}' >"$T/strval/trainer_state.json"
expect_error "a loss that is a string" "log_history[0].loss is a string" plot "$T/strval"
mkdir -p "$T/nostep"; echo '{"log_history": [{"loss": 2.0}]}' >"$T/nostep/trainer_state.json"
expect_error "an entry without step" 'no numeric "step"' plot "$T/nostep"
# the good run and a bad one: nothing is written
expect_error "good run + bad run" "$T/broken" plot "$T/run_a" "$T/broken" --out "$T/mixed.png"
no_png "good run + bad run" "$T/mixed.png"
expect_error "--out in a missing folder" "$T/no/such" plot "$T/run_a" --out "$T/no/such/x.png"
expect_error "--out is a folder" "is a directory" plot "$T/run_a" --out "$T/empty_dir"
touch "$T/afile"
expect_error "--out under a file" "is not a folder" plot "$T/run_a" --out "$T/afile/x.png"
expect_error "no OUTPUT_DIR" "no OUTPUT_DIR" plot --out "$T/x.png"
expect_error "bad --width" "--width 10" plot "$T/run_a" --width 10
expect_error "unknown flag" "--outt" plot "$T/run_a" --outt "$T/x.png"
# a write cut short (the file-size limit, 1 KiB): the temp file is removed, no PNG appears
( ulimit -f 1; "$BIN" plot "$T/run_a" --out "$T/cut.png" >"$T/cut.log" 2>&1 ); rc=$?
[ $rc -eq 1 ] && grep -q "cut.png.tmp" "$T/cut.log" && ok "write cut short: exit 1 naming $T/cut.png.tmp" \
    || bad "write cut short: exit $rc: $(head -c 300 "$T/cut.log")"
no_png "write cut short" "$T/cut.png"

# ---- estimate --png --------------------------------------------------------------------------
out=$("$BIN" estimate --model t5-large --bf16 --batch 16 --world_size 2 --png "$T/zero.png" 2>&1) \
    && grep -q "wrote $T/zero.png" <<<"$out" && grep -q "stage 3" <<<"$out" \
    && ok "estimate --png prints the table and writes the picture" || bad "estimate --png: $(tail -n 3 <<<"$out")"
png_ok "estimate --png, t5-large bf16 on 2 ranks (stage colours drawn)" "$T/zero.png" 1400 any 1f77b4 ff7f0e 2ca02c 9467bd
out=$("$BIN" estimate --model t5-small --world_size 8 --offload_optimizer --png "$T/zero8.png" 2>&1) \
    && ok "estimate --png, fp32, 8 ranks, offload" || bad "estimate --png offload: $(tail -n 3 <<<"$out")"
png_ok "estimate --png with host memory" "$T/zero8.png" 1400 any 1f77b4 2ca02c
expect_error "estimate --png in a missing folder" "$T/no/such" estimate --model t5-large --png "$T/no/such/z.png"
no_png "estimate --png in a missing folder" "$T/no/such/z.png"
expect_error "estimate --png is a folder" "is a directory" estimate --model t5-large --png "$T/empty_dir"

# ---- --explain_png: the trainer's dry-run plan, drawn ------------------------------------------
EXPLAIN="--device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model
  --data_dir tests/fixtures/trainer_data --task translation_en_to_ro --max_source_length 24 --max_target_length 20
  --per_device_train_batch_size 4 --do_train --cache_dir $T/cache"
out=$("$BIN" $EXPLAIN --output_dir "$T/explain" --explain --explain_png "$T/explain.png" 2>&1) \
    && grep -q "the plan drawn to $T/explain.png" <<<"$out" && [ ! -e "$T/explain" ] \
    && ok "--explain --explain_png draws the dry run's plan (and writes nothing to --output_dir)" \
    || bad "--explain_png: $(tail -n 3 <<<"$out")"
png_ok "--explain_png, the fixture model on 1 rank" "$T/explain.png" 1400 any 1f77b4 2ca02c
expect_error "--explain_png without --explain" "add --explain" $EXPLAIN --output_dir "$T/explain2" --explain_png "$T/e2.png"
no_png "--explain_png without --explain" "$T/e2.png"
finish
