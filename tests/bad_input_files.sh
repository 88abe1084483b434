#!/usr/bin/env bash
# tests/bad_input_files.sh: issue 35's families "JSON read unlike Python" and "non-regular
# files block forever", on the AddressSanitizer build, every run under a 10 s limit (a hang
# is exit 124: a failure, not a stuck test).
#  - JSON: every JSON file train_t5 reads (config.json, generation_config.json, the shard
#    index, safetensors headers, JSON lines data, the DeepSpeed config, a checkpoint's
#    trainer_state.json and zero_index.json) read as Python's json reads it: the last of
#    duplicate keys (with a NOTICE), or refused where the reader of reference refuses them;
#    "\u0000" refused naming the key; what Python refuses (a BOM, 08, a raw tab, invalid
#    UTF-8, text after the document) refused. Before issue 35 each loaded, silently, the
#    first duplicate, a cut string, or a text no other tool reads.
#  - files: every path train_t5 opens given as a FIFO (and a socket, /dev/zero, /dev/null
#    where they apply): one line "PATH: is a FIFO (a pipe), not a regular file", exit 1.
#    Before issue 35 most waited forever on the open or read.
# Each error case: exit 1, no sanitizer report, one "error:" line (and optionally "HINT:"),
# naming what it should.
#   TRAIN_T5=path/to/binary tests/bad_input_files.sh    (default ./build-asan/train_t5)
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${TRAIN_T5:-./build-asan/train_t5}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "OK     $1"; }
notok() { fail=$((fail + 1)); echo "NOT OK $1"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

if [ ! -x "$BIN" ]; then
  notok "$BIN is not built (make test-asan builds it with AddressSanitizer)"
  finish
fi
for tool in python3 mkfifo timeout; do
  command -v $tool >/dev/null 2>&1 || { notok "$tool is needed"; finish; }
done
T=$(mktemp -d /tmp/t5_bad_files.XXXXXX) || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT

TM=tests/fixtures/trainer_model
TOK=data/sample/spiece.model
LIMIT=10
n_out=0  # every run its own --output_dir

# ---- running ---------------------------------------------------------------------------------
run() { # run ARGS...: the train_t5 command line, stdin closed, at most $LIMIT seconds
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 timeout -k 2 "$LIMIT" "$BIN" "$@" \
    >"$T/out" 2>"$T/err" </dev/null
  rc=$?
}
sanitizer_report() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|UndefinedBehaviorSanitizer' "$T/err"; }
show() { sed -n '1,8s/^/       | /p' "$T/err"; }

# expect_error NAME NEEDLE ARGS...: exit 1 within the limit, one error line (plus a HINT line)
# naming NEEDLE; NOTICE lines before it are allowed when NOTICES=1
expect_error() {
  local name=$1 needle=$2 why=""
  shift 2
  run "$@"
  grep -v '^NOTICE: ' "$T/err" >"$T/err1" || true
  [ "${NOTICES:-0}" = 1 ] || cp "$T/err" "$T/err1"
  local lines first second
  lines=$(wc -l <"$T/err1")
  first=$(sed -n 1p "$T/err1")
  second=$(sed -n 2p "$T/err1")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="hung: killed after $LIMIT s"
  elif [ "$rc" -ne 1 ]; then why="exit code $rc, want 1"
  elif sanitizer_report; then why="sanitizer report"
  elif [ "${first#error:}" = "$first" ]; then why="stderr does not start with \"error:\""
  elif [ "$lines" -gt 2 ] || { [ "$lines" -eq 2 ] && [ "${second#HINT:}" = "$second" ]; }; then
    why="stderr has $lines lines (want one error line, optionally a HINT line)"
  elif ! grep -qF -- "$needle" "$T/err1"; then why="message does not name \"$needle\""
  fi
  if [ -z "$why" ]; then ok "$(printf '%-30s %.170s' "$name" "$first")"
  else notok "$name: $why"; show; fi
}

# expect_ok NAME FILE PATTERN ARGS...: exit 0, no sanitizer report, grep -E PATTERN in out or err
expect_ok() {
  local name=$1 file=$2 pattern=$3 why=""
  shift 3
  run "$@"
  if [ "$rc" -ne 0 ]; then why="exit code $rc, want 0"
  elif sanitizer_report; then why="sanitizer report"
  elif ! grep -qE -- "$pattern" "$T/$file"; then why="$file does not match /$pattern/"
  fi
  if [ -z "$why" ]; then ok "$(printf '%-30s %.170s' "$name" "$(grep -E -- "$pattern" "$T/$file" | head -n 1)")"
  else notok "$name: $why"; show; sed -n '1,6s/^/       o /p' "$T/out"; fi
}

# ---- inputs ----------------------------------------------------------------------------------
mkdir -p "$T/d_ok"
head -n 8 data/sample/train.source >"$T/d_ok/train.source"; head -n 8 data/sample/train.target >"$T/d_ok/train.target"
TRAIN=(--model "$TM" --tokenizer_name "$TOK" --cache_dir "$T/cache" --per_device_train_batch_size 4 --max_steps 1)
# a copy of the fixture model whose config.json the case writes (python: $1 dir, $2 the text)
model_with_config() {
  rm -rf "$1"; cp -r "$TM" "$1"
  printf '%s' "$2" >"$1/config.json"
}
# the fixture config's text with "key": value pairs replaced / added at the end (raw JSON text)
cfg_text() { # cfg_text 'python expression of the extra text after the last key'
  python3 - "$TM/config.json" "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.pop("scale_decoder_outputs", None)  # the head's scaling then follows tie_word_embeddings
body = json.dumps(c, indent=2)[:-2]
print(body + sys.argv[2] + "\n}", end="")
PY
}

# ================= JSON read as Python reads it ===============================================
# -- config.json (transformers: json.load, the last duplicate wins)
model_with_config "$T/m_tie" "$(cfg_text ', "tie_word_embeddings": false')"
expect_ok "config: duplicate key, last" out "lm head .*no output scaling" info --model "$T/m_tie"
if grep -q 'NOTICE: .*config.json: key "tie_word_embeddings" appears twice; the last value is used' "$T/err"; then
  ok "config: duplicate key NOTICE       $(grep NOTICE "$T/err" | head -n 1 | cut -c1-150)"
else notok "config: duplicate key: no NOTICE naming \"tie_word_embeddings\""; show; fi
model_with_config "$T/m_nul" "$(cfg_text ', "feed_forward_proj": "relu\u0000 gated"')"
NOTICES=1 expect_error "config: \\u0000 in a value" 'key "feed_forward_proj": a string holding \u0000' info --model "$T/m_nul"
model_with_config "$T/m_nulkey" "$(cfg_text ', "d_model\u0000x": 16')"
expect_error "config: \\u0000 in a key" 'key "d_model\u0000x"' info --model "$T/m_nulkey"
model_with_config "$T/m_bom" "$(printf '\xef\xbb\xbf'; cat "$TM/config.json")"
expect_error "config: byte-order mark" "config.json: malformed JSON at byte 0" info --model "$T/m_bom"
model_with_config "$T/m_08" "$(sed 's/"num_heads": 2/"num_heads": 02/' "$TM/config.json")"
expect_error "config: number 02" "config.json: malformed JSON at byte" info --model "$T/m_08"
model_with_config "$T/m_tab" "$(cfg_text ', "_name_or_path": "a	b"')"
expect_error "config: raw tab in a string" "config.json: malformed JSON at byte" info --model "$T/m_tab"
model_with_config "$T/m_utf8" "$(cfg_text ', "_name_or_path": "caf'$'\xe9''"')"
expect_error "config: invalid UTF-8" "config.json: invalid UTF-8" info --model "$T/m_utf8"
# -- generation_config.json (transformers: json.load)
rm -rf "$T/m_gen"; cp -r "$TM" "$T/m_gen"
printf '{"num_beams": 1, "max_length": 12, "num_beams": 3}' >"$T/m_gen/generation_config.json"
EXPLAIN=(--tokenizer_name "$TOK" --do_train --data_dir "$T/d_ok" --max_steps 1 --per_device_train_batch_size 4
         --predict_with_generate --explain)
expect_ok "generation: duplicate, last" out "num_beams 3 from .*generation_config.json" --model "$T/m_gen" \
  --output_dir "$T/o$((n_out += 1))" "${EXPLAIN[@]}"
printf '{"num_beams": 2} {"num_beams": 5}' >"$T/m_gen/generation_config.json"
expect_error "generation: two documents" "generation_config.json: malformed JSON at byte 17" --model "$T/m_gen" \
  --output_dir "$T/o$((n_out += 1))" "${EXPLAIN[@]}"
printf '{"num_beams": 2, "decoder_start_token_id": 0, "pad_token_id": 0, "bos": "\\u0000"}' \
  >"$T/m_gen/generation_config.json"
expect_error "generation: \\u0000" 'generation_config.json: key "bos"' --model "$T/m_gen" --output_dir "$T/o$((n_out += 1))" \
  "${EXPLAIN[@]}"
# -- safetensors headers (the Rust library: serde refuses a duplicate key)
python3 - "$TM/model.safetensors" "$T" <<'PY' || notok "python3 could not write the safetensors cases"
import json, os, shutil, struct, sys
src, root = sys.argv[1], sys.argv[2]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr, data = b[8:8 + n].decode().rstrip(" "), b[8 + n:]
def model(name, text):
    d = os.path.join(root, name)
    shutil.copytree(os.path.dirname(src), d)
    h = text.encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(os.path.join(d, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + data)
model("st_nul", hdr.replace('"shared.weight"', '"shared.weight\\u0000x"'))
i = hdr.index('"dtype":"F32"') if '"dtype":"F32"' in hdr else hdr.index('"dtype": "F32"')
model("st_dup_dtype", hdr[:i] + '"dtype":"F16",' + hdr[i:])
model("st_dup_meta", hdr[:-1] + ',"__metadata__":{"format":"pt"}}' if "__metadata__" in hdr else
      hdr[:-1] + ',"__metadata__":{"format":"pt"},"__metadata__":{"format":"np"}}')
import re
model("st_00", re.sub(r'"data_offsets": ?\[0,', '"data_offsets":[00,', hdr, count=1))
PY
expect_error "safetensors: \\u0000 in a name" 'key "shared.weight\u0000x"' info --model "$T/st_nul"
expect_error "safetensors: dtype twice" "appears twice" info --model "$T/st_dup_dtype"
expect_error "safetensors: metadata twice" 'key "__metadata__" appears twice' info --model "$T/st_dup_meta"
expect_error "safetensors: number 00" "model.safetensors: header is not valid JSON" info --model "$T/st_00"
# -- model.safetensors.index.json (transformers: json.load, the last duplicate wins)
python3 - "$TM" "$T/m_idx" <<'PY' || notok "python3 could not write the sharded model"
import json, os, shutil, struct, sys
src, d = sys.argv[1], sys.argv[2]
os.makedirs(d)
shutil.copy(os.path.join(src, "config.json"), d)
b = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n]); data = b[8 + n:]
names = [k for k in hdr if k != "__metadata__"]
parts = [names[: len(names) // 2], names[len(names) // 2:]]
for s, part in enumerate(parts):
    h, blob, off = {}, b"", 0
    for k in part:
        a, e = hdr[k]["data_offsets"]
        h[k] = dict(hdr[k], data_offsets=[off, off + e - a]); blob += data[a:e]; off += e - a
    t = json.dumps(h).encode(); t += b" " * ((8 - len(t) % 8) % 8)
    open(os.path.join(d, f"model-0000{s + 1}-of-00002.safetensors"), "wb").write(struct.pack("<Q", len(t)) + t + blob)
wm = {k: f"model-0000{1 + (k in parts[1])}-of-00002.safetensors" for k in names}
# a second "weight_map", last, naming shard 1 for every tensor: Python's dict keeps that one
wrong = {k: "model-00001-of-00002.safetensors" for k in names}
text = '{"metadata": {}, "weight_map": %s, "weight_map": %s}' % (json.dumps(wm), json.dumps(wrong))
open(os.path.join(d, "model.safetensors.index.json"), "w").write(text)
shutil.copytree(d, d + "_trailing")
shutil.copytree(d, d + "_good")
open(os.path.join(d + "_good", "model.safetensors.index.json"), "w").write(json.dumps({"weight_map": wm}))
open(os.path.join(d + "_trailing", "model.safetensors.index.json"), "w").write(json.dumps({"weight_map": wm}) + "\n]")
PY
NOTICES=1 expect_error "index: weight_map twice, last" 'is not in shard "model-00001-of-00002.safetensors"' \
  info --model "$T/m_idx"
expect_error "index: text after" "model.safetensors.index.json: malformed JSON" info --model "$T/m_idx_trailing"
# -- JSON lines data (HF datasets' pyarrow: a duplicate key is an error)
jl() { printf '%s\n' "$@" >"$T/data.jsonl"; }
line='{"translation": {"en": "Good morning.", "ro": "Buna dimineata."}}'
jl "$line" "$line" "$line" '{"translation": {"en": "Hello\u0000 world", "ro": "Salut lume"}}' "$line"
expect_error "jsonl: \\u0000 in a text" 'data.jsonl:4: key "translation.en": a string holding \u0000' \
  "${TRAIN[@]}" --do_train --train_file "$T/data.jsonl" --output_dir "$T/o$((n_out += 1))"
jl "$line" '{"translation": {"en": "Hello", "ro": "Salut", "en": "Bye"}}' "$line" "$line"
expect_error "jsonl: duplicate language" 'data.jsonl:2: key "translation.en" appears twice' \
  "${TRAIN[@]}" --do_train --train_file "$T/data.jsonl" --output_dir "$T/o$((n_out += 1))"
jl "$line" "$line" '{"translation": {"en": "a", "ro": "b"}, "translation": {"en": "c", "ro": "d"}}' "$line"
expect_error "jsonl: duplicate object" 'data.jsonl:3: key "translation" appears twice' \
  "${TRAIN[@]}" --do_train --train_file "$T/data.jsonl" --output_dir "$T/o$((n_out += 1))"
jl "$line" '{"translation": {"en": "Tab	inside", "ro": "Salut"}}' "$line" "$line"
expect_error "jsonl: raw tab in a text" 'data.jsonl:2: a raw control character inside a string' \
  "${TRAIN[@]}" --do_train --train_file "$T/data.jsonl" --output_dir "$T/o$((n_out += 1))"
jl "$line" '{"id": 01, "translation": {"en": "a", "ro": "b"}}' "$line" "$line"
expect_error "jsonl: number 01" 'data.jsonl:2: a number spelled as JSON does not' \
  "${TRAIN[@]}" --do_train --train_file "$T/data.jsonl" --output_dir "$T/o$((n_out += 1))"
jl "$line" '{"translation": {"en\u0000": "a", "ro": "b", "en": "c"}}' "$line" "$line"
expect_error "jsonl: \\u0000 in a key" 'data.jsonl:2: key "translation.en\u0000"' \
  "${TRAIN[@]}" --do_train --train_file "$T/data.jsonl" --output_dir "$T/o$((n_out += 1))"
# -- the DeepSpeed config (DeepSpeed: json.load with dict_raise_error_on_duplicate_keys)
printf '{"optimizer": {"type": "AdamW\\u0000 or anything", "params": {"lr": 5e-5}}}' >"$T/ds_nul.json"
expect_error "deepspeed: \\u0000" 'ds_nul.json: key "optimizer.type": a string holding \u0000' --model "$TM" \
  --output_dir "$T/o$((n_out += 1))" --deepspeed "$T/ds_nul.json" "${EXPLAIN[@]}"
printf '{"train_micro_batch_size_per_gpu": 04}' >"$T/ds_04.json"
expect_error "deepspeed: number 04" "ds_04.json: invalid JSON at line 1" --model "$TM" --output_dir "$T/o$((n_out += 1))" \
  --deepspeed "$T/ds_04.json" "${EXPLAIN[@]}"
printf '\xef\xbb\xbf{"zero_optimization": {"stage": 2}}' >"$T/ds_bom.json"
expect_error "deepspeed: byte-order mark" "ds_bom.json: invalid JSON at line 1" --model "$TM" --output_dir "$T/o$((n_out += 1))" \
  --deepspeed "$T/ds_bom.json" "${EXPLAIN[@]}"
# -- all_results.json, which the run merges its metrics into (HF: json.load, then json.dump)
mkdir -p "$T/o_res"; printf '{"eval_loss": 1.5, "note": "a", "eval_loss": 2.5}' >"$T/o_res/all_results.json"
expect_ok "all_results: duplicate, last" err 'all_results.json: key "eval_loss" appears twice; the last value' \
  "${TRAIN[@]}" --do_train --data_dir "$T/d_ok" --output_dir "$T/o_res" --overwrite_output_dir
if python3 -c 'import sys; t=open(sys.argv[1]).read(); import json; sys.exit(not (t.count("\"eval_loss\"") == 1 and json.loads(t)["eval_loss"] == 2.5))' \
     "$T/o_res/all_results.json"; then ok "all_results: the merged file holds eval_loss once, 2.5"
else notok "all_results: the merged file: $(tr -d '\n' <"$T/o_res/all_results.json" | cut -c1-200)"; fi
# -- a checkpoint's JSON (trainer_state.json: HF's json.load; zero_index.json: train_t5's own)
LIMIT=120 run "${TRAIN[@]}" --do_train --data_dir "$T/d_ok" --max_steps 2 --save_steps 2 --output_dir "$T/ck"
CK=$T/ck/checkpoint-2
cached=$(find "$T/cache" -name '*.t5ds' | head -n 1)  # this run's tokenized train split
if [ "$rc" -ne 0 ] || [ ! -d "$CK" ]; then notok "training the checkpoint for the resume cases: exit $rc"; show; fi
damaged() { rm -rf "$T/ck_$1"; cp -r "$CK" "$T/ck_$1"; echo "$T/ck_$1"; }
RESUME=("${TRAIN[@]}" --do_train --data_dir "$T/d_ok" --max_steps 4)
d=$(damaged state_dup)
python3 -c 'import sys; p=sys.argv[1]; s=open(p).read().rstrip(); open(p,"w").write(s[:-1] + ", \"global_step\": 1e300}")' \
  "$d/trainer_state.json"
NOTICES=1 expect_error "trainer_state: duplicate, last" '"global_step" is 1e+300' "${RESUME[@]}" \
  --output_dir "$T/o_r1" --resume_from_checkpoint "$d"
d=$(damaged index_dup)
python3 -c 'import sys; p=sys.argv[1]; s=open(p).read().rstrip(); open(p,"w").write(s[:-1] + ", \"global_step\": 2}")' \
  "$d/global_step2/zero_index.json"
expect_error "zero_index: duplicate key" 'zero_index.json: key "global_step" appears twice' "${RESUME[@]}" \
  --output_dir "$T/o_r2" --resume_from_checkpoint "$d"
d=$(damaged index_nul)
sed -i 's/"rank_00000.safetensors"/"rank_00000.safetensors\\u0000.old"/' "$d/global_step2/zero_index.json"
expect_error "zero_index: \\u0000" 'key "shards[0].file": a string holding \u0000' "${RESUME[@]}" \
  --output_dir "$T/o_r3" --resume_from_checkpoint "$d"

# ================= every opened path as a FIFO, socket or device ===============================
mkfifo "$T/fifo"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$T/sock" ||
  notok "python3 could not make a unix socket"
# -- flags naming a file
for kind in fifo sock /dev/zero; do
  p=$kind; [ "${kind#/}" = "$kind" ] && p=$T/$kind
  what=$(case $kind in fifo) echo "is a FIFO (a pipe), not a regular file";; sock) echo "is a socket, not a regular file";;
         *) echo "is a character device, not a regular file";; esac)
  expect_error "--deepspeed $kind" "$p: $what (the DeepSpeed config, --deepspeed)" --model "$TM" \
    --output_dir "$T/o$((n_out += 1))" --deepspeed "$p" "${EXPLAIN[@]}"
  expect_error "--tokenizer_name $kind" "$p: $what (the tokenizer model, --tokenizer_name)" --model "$TM" \
    --tokenizer_name "$p" --cache_dir "$T/cache" --do_train --data_dir "$T/d_ok" --max_steps 1 \
    --per_device_train_batch_size 4 --output_dir "$T/o$((n_out += 1))"
  expect_error "--train_file $kind" "$p: $what" "${TRAIN[@]}" --do_train --train_file "$p" --output_dir "$T/o$((n_out += 1))"
done
printf '%s\n' '{"translation": {"en": "Good morning.", "ro": "Buna dimineata."}}' >"$T/ok.jsonl"
expect_error "--validation_file FIFO" "$T/fifo: is a FIFO" "${TRAIN[@]}" --do_train --do_eval --train_file "$T/ok.jsonl" \
  --validation_file "$T/fifo" --output_dir "$T/o$((n_out += 1))"
expect_error "--train_file /dev/null" "/dev/null: is a character device" "${TRAIN[@]}" --do_train \
  --train_file /dev/null --output_dir "$T/o$((n_out += 1))"
# -- files inside --data_dir, the model directory, a checkpoint, the cache
for f in train.source train.target; do
  rm -rf "$T/d_$f"; cp -r "$T/d_ok" "$T/d_$f"; rm "$T/d_$f/$f"; mkfifo "$T/d_$f/$f"
  expect_error "data_dir $f FIFO" "$f: is a FIFO" "${TRAIN[@]}" --do_train --data_dir "$T/d_$f" --output_dir "$T/o$((n_out += 1))"
done
rm -rf "$T/d_zero"; cp -r "$T/d_ok" "$T/d_zero"; ln -sf /dev/zero "$T/d_zero/train.source"
expect_error "train.source -> /dev/zero" "train.source: is a character device" "${TRAIN[@]}" --do_train \
  --data_dir "$T/d_zero" --output_dir "$T/o$((n_out += 1))"
fifo_in_model() { # NAME FILE: a copy of the fixture model with FILE a FIFO
  rm -rf "$T/mf_$1"; cp -r "$TM" "$T/mf_$1"; cp "$TOK" "$T/mf_$1/"; rm -f "$T/mf_$1/$2"; mkfifo "$T/mf_$1/$2"
  echo "$T/mf_$1"
}
expect_error "model: config.json FIFO" "config.json: is a FIFO" info --model "$(fifo_in_model cfg config.json)"
expect_error "model: model.safetensors FIFO" "model.safetensors: is a FIFO" info \
  --model "$(fifo_in_model st model.safetensors)"
m=$(fifo_in_model bin model.safetensors); rm "$m/model.safetensors"; mkfifo "$m/pytorch_model.bin"
expect_error "model: pytorch_model.bin FIFO" "pytorch_model.bin: is a FIFO" info --model "$m"
expect_error "model: a shard FIFO" "model-00002-of-00002.safetensors: is a FIFO" info \
  --model "$(rm -rf "$T/m_idx_f"; cp -r "$T/m_idx_good" "$T/m_idx_f"; rm "$T/m_idx_f/model-00002-of-00002.safetensors"
             mkfifo "$T/m_idx_f/model-00002-of-00002.safetensors"; echo "$T/m_idx_f")"
expect_error "model: spiece.model FIFO" "spiece.model: is a FIFO" --model "$(fifo_in_model spm spiece.model)" \
  --cache_dir "$T/cache" --do_train --data_dir "$T/d_ok" --max_steps 1 --per_device_train_batch_size 4 \
  --output_dir "$T/o$((n_out += 1))"
expect_error "model: generation_config FIFO" "generation_config.json: is a FIFO" \
  --model "$(fifo_in_model gen generation_config.json)" --output_dir "$T/o$((n_out += 1))" "${EXPLAIN[@]}"
for f in trainer_state.json latest global_step2/zero_index.json global_step2/rank_00000.safetensors config.json; do
  d=$(damaged "fifo_${f//\//_}"); rm "$d/$f"; mkfifo "$d/$f"
  expect_error "checkpoint: $f FIFO" "$f: is a FIFO" "${RESUME[@]}" --output_dir "$T/o$((n_out += 1))" --resume_from_checkpoint "$d"
done
if [ -n "$cached" ]; then
  rm -rf "$T/cache_f"; cp -r "$T/cache" "$T/cache_f"; c2=$T/cache_f/${cached#"$T/cache/"}; rm "$c2"; mkfifo "$c2"
  expect_error "cache: a .t5ds FIFO" ".t5ds: is a FIFO" "${TRAIN[@]}" --cache_dir "$T/cache_f" --do_train \
    --data_dir "$T/d_ok" --output_dir "$T/o$((n_out += 1))"
else notok "cache: no .t5ds file was cached by the checkpoint run"; fi
rm -rf "$T/d_t5ds"; mkdir "$T/d_t5ds"; mkfifo "$T/d_t5ds/train.t5ds"
expect_error "data_dir train.t5ds FIFO" "train.t5ds: is a FIFO" "${TRAIN[@]}" --do_train --data_dir "$T/d_t5ds" \
  --output_dir "$T/o$((n_out += 1))"
# -- the other commands
printf 'a b c\n' >"$T/ref.txt"
expect_error "bleu: HYP a FIFO nobody writes" "has 0 lines but reference file" bleu "$T/fifo" "$T/ref.txt"
expect_error "bleu: REF /dev/zero" "/dev/zero: is a character device" bleu "$T/ref.txt" /dev/zero
expect_error "loss --batch FIFO" "$T/fifo: is a FIFO" loss --model "$TM" --batch "$T/fifo"
rm -rf "$T/ds_f"; cp -r tests/fixtures/ds_ckpt/zero3/checkpoint "$T/ds_f"; rm "$T/ds_f/latest"; mkfifo "$T/ds_f/latest"
expect_error "import-deepspeed: latest FIFO" "latest: is a FIFO" import-deepspeed "$T/ds_f" "$T/o_imp"
d=$(damaged export_cfg); rm "$d/config.json"; mkfifo "$d/config.json"
expect_error "export: config.json FIFO" "config.json: is a FIFO" export "$d" "$T/o_exp"
# -- what train_t5 writes: a FIFO at the target or its .tmp, the --output_dir lock
mkfifo "$T/plan.png.tmp"
expect_error "--explain_png .tmp FIFO" "plan.png.tmp: is a FIFO" --model "$TM" --output_dir "$T/o$((n_out += 1))" \
  "${EXPLAIN[@]}" --explain_png "$T/plan.png"
expect_error "--explain_png onto a FIFO" "$T/fifo: is a FIFO (a pipe), where train_t5 writes a file" --model "$TM" \
  --output_dir "$T/o$((n_out += 1))" "${EXPLAIN[@]}" --explain_png "$T/fifo"
mkdir -p "$T/o_lock"; mkfifo "$T/o_lock/.train_t5.lock"
expect_error "--output_dir lock FIFO" ".train_t5.lock: is a FIFO" "${TRAIN[@]}" --do_train --data_dir "$T/d_ok" \
  --output_dir "$T/o_lock" --overwrite_output_dir
[ -p "$T/o_lock/.train_t5.lock" ] || notok "--output_dir lock FIFO: the FIFO was replaced or removed"

finish
