#!/usr/bin/env bash
# tests/bad_input.sh: `train_t5 info --model X` on broken model directories, under the
# AddressSanitizer build. Each bad input must end with exit code 1 (not a signal, not a
# sanitizer report) and ONE stderr line "error: ..." (optionally a second "HINT: ..."
# line) that names the offending file, key or tensor. Valid tiny models must load.
# The models are written by plain python3 (no torch): safetensors by hand.
#   TRAIN_T5=path/to/binary tests/bad_input.sh    (default ./build-asan/train_t5)
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${TRAIN_T5:-./build-asan/train_t5}
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
T=$(mktemp -d /tmp/t5_bad_input.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT

# ---- write the models ---------------------------------------------------------------
python3 - "$T" <<'PY' || { notok "python3 could not write the test models"; finish; }
import json, os, struct, sys

root = sys.argv[1]
# Tiny T5: V=32, D=8, dk=4, H=3 (inner 12 != D), F=16, 2 encoder + 2 decoder blocks.
BASE = {"vocab_size": 32, "d_model": 8, "d_kv": 4, "d_ff": 16, "num_layers": 2, "num_decoder_layers": 2,
        "num_heads": 3, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 20,
        "feed_forward_proj": "relu", "tie_word_embeddings": True, "model_type": "t5"}

def layout(cfg, untied):
    V, D, dk, H, F = cfg["vocab_size"], cfg["d_model"], cfg["d_kv"], cfg["num_heads"], cfg["d_ff"]
    I, NB = H * dk, cfg["relative_attention_num_buckets"]
    gated = cfg["feed_forward_proj"].startswith("gated-")
    t = [("shared.weight", [V, D])]
    def attn(p, rel):
        t.extend([(p + ".q.weight", [I, D]), (p + ".k.weight", [I, D]), (p + ".v.weight", [I, D]),
                  (p + ".o.weight", [D, I])])
        if rel:
            t.append((p + ".relative_attention_bias.weight", [NB, H]))
    def ffn(p):
        if gated:
            t.extend([(p + ".DenseReluDense.wi_0.weight", [F, D]), (p + ".DenseReluDense.wi_1.weight", [F, D])])
        else:
            t.append((p + ".DenseReluDense.wi.weight", [F, D]))
        t.extend([(p + ".DenseReluDense.wo.weight", [D, F]), (p + ".layer_norm.weight", [D])])
    for i in range(cfg["num_layers"]):
        attn(f"encoder.block.{i}.layer.0.SelfAttention", i == 0)
        t.append((f"encoder.block.{i}.layer.0.layer_norm.weight", [D]))
        ffn(f"encoder.block.{i}.layer.1")
    t.append(("encoder.final_layer_norm.weight", [D]))
    for i in range(cfg["num_decoder_layers"]):
        attn(f"decoder.block.{i}.layer.0.SelfAttention", i == 0)
        t.append((f"decoder.block.{i}.layer.0.layer_norm.weight", [D]))
        attn(f"decoder.block.{i}.layer.1.EncDecAttention", False)
        t.append((f"decoder.block.{i}.layer.1.layer_norm.weight", [D]))
        ffn(f"decoder.block.{i}.layer.2")
    t.append(("decoder.final_layer_norm.weight", [D]))
    if untied:
        t.append(("lm_head.weight", [V, D]))
    return t

def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n

def st_bytes(tensors, dtype_of=lambda n: "F32", header_edit=None, len_delta=0):
    """tensors: [(name, shape)]; values are small distinct floats."""
    hdr, data, off = {"__metadata__": {"format": "pt"}}, bytearray(), 0
    for k, (name, shape) in enumerate(tensors):
        dt = dtype_of(name)
        size = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[dt]
        n = numel(shape)
        if dt == "F32":
            data += struct.pack("<%df" % n, *[0.01 * ((k * 7 + j) % 50 - 25) for j in range(n)])
        else:
            data += bytes(n * size)
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n * size]}
        off += n * size
    if header_edit:
        header_edit(hdr)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h) + len_delta) + h + bytes(data)

def model(name, cfg=BASE, untied=False, config_text=None, tensors=None, blob=None, write_config=True):
    d = os.path.join(root, name)
    os.makedirs(d)
    if write_config:
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config_text if config_text is not None else json.dumps(cfg, indent=2))
    if tensors is None:
        tensors = layout(cfg, untied)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(blob if blob is not None else st_bytes(tensors))
    return d

good = layout(BASE, False)
model("good")
with open(os.path.join(root, "good.count"), "w") as f:
    f.write(str(sum(numel(s) for _, s in good)))
flan = dict(BASE, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
model("good_untied", cfg=flan, untied=True)
with open(os.path.join(root, "good_untied.count"), "w") as f:
    f.write(str(sum(numel(s) for _, s in layout(flan, True))))
# Sharded: two shards plus model.safetensors.index.json.
d = os.path.join(root, "good_sharded")
os.makedirs(d)
with open(os.path.join(d, "config.json"), "w") as f:
    json.dump(BASE, f)
half = len(good) // 2
wm = {}
for s, part in enumerate([good[:half], good[half:]]):
    fn = f"model-0000{s + 1}-of-00002.safetensors"
    with open(os.path.join(d, fn), "wb") as f:
        f.write(st_bytes(part))
    wm.update({n: fn for n, _ in part})
with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)

# config.json problems
model("no_config", write_config=False)
model("malformed_config", config_text='{"vocab_size": 32, "d_model": 8,')
model("missing_key", cfg={k: v for k, v in BASE.items() if k != "d_model"}, tensors=good)
model("wrong_type", cfg=dict(BASE, d_model="abc"), tensors=good)
model("negative_dim", cfg=dict(BASE, d_ff=-16), tensors=good)
model("bad_ffn", cfg=dict(BASE, feed_forward_proj="gated-swish"), tensors=good)
model("bad_dropout", cfg=dict(BASE, dropout_rate=1.5), tensors=good)
model("empty_config", config_text="")
# model.safetensors problems
full = st_bytes(good)
model("truncated", blob=full[:-7])
model("header_too_long", blob=struct.pack("<Q", len(full) + 100) + full[8:])
model("header_not_json", blob=struct.pack("<Q", 16) + b"this is not json" + bytes(64))
model("tiny_file", blob=b"\x01\x02\x03")
model("empty_file", blob=b"")
def to_f64(h):
    t = h["encoder.block.0.layer.0.SelfAttention.k.weight"]
    t["dtype"] = "F64"
    t["shape"] = [6, 8]  # 48 elements * 8 bytes = the same 384 bytes
model("unknown_dtype", blob=st_bytes(good, header_edit=to_f64))
def bad_offsets(h):
    h["decoder.block.1.layer.2.DenseReluDense.wo.weight"]["shape"] = [8, 15]
model("bad_offsets", blob=st_bytes(good, header_edit=bad_offsets))
def gap(h):
    h["encoder.final_layer_norm.weight"]["data_offsets"][0] += 4
model("offsets_gap", blob=st_bytes(good, header_edit=gap))
model("missing_tensor", tensors=[t for t in good if t[0] != "decoder.block.1.layer.0.SelfAttention.q.weight"])
model("shape_mismatch", tensors=[(n, [16, 8] if n == "encoder.block.1.layer.1.DenseReluDense.wo.weight" else s)
                                 for n, s in good])
model("unknown_tensor", tensors=good + [("model.decoder.layers.0.fc1.weight", [8, 8])])
# tie_word_embeddings false but no lm_head.weight (as transformers 5 saves): the head is shared.weight
model("untied_cfg_tied_file", cfg=flan, tensors=layout(flan, False))
with open(os.path.join(root, "untied_cfg_tied_file.count"), "w") as f:
    f.write(str(sum(numel(s) for _, s in layout(flan, False))))
model("bart_config", cfg=dict(BASE, model_type="bart"), tensors=good)
# numbers and weights that are not finite
model("eps_1e300", config_text=json.dumps(BASE)[:-1] + ', "layer_norm_epsilon": 1e300}', tensors=good)
def poison(blob, name, index, value):
    """The safetensors bytes with element `index` of tensor `name` set to `value` (F32)."""
    n = struct.unpack("<Q", blob[:8])[0]
    hdr = json.loads(blob[8:8 + n])
    at = 8 + n + hdr[name]["data_offsets"][0] + 4 * index
    return blob[:at] + struct.pack("<f", value) + blob[at + 4:]
model("nan_weight", blob=poison(full, "decoder.block.1.layer.0.SelfAttention.k.weight", 5, float("nan")))
model("big_weight", blob=poison(full, "decoder.block.1.layer.0.SelfAttention.k.weight", 5, 1e5))  # beyond fp16
# a directory where a file is expected
for kind in ("config.json", "model.safetensors", "model.safetensors.index.json"):
    d = os.path.join(root, "dir_" + kind.replace(".", "_"))
    os.makedirs(os.path.join(d, kind))
    if kind != "config.json":
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(BASE, f)
PY

# ---- run ---------------------------------------------------------------------------------
# ASan also runs LeakSanitizer at exit; an error exit leaves allocations behind by design
# (the process ends), so leak checking is off for the error cases and on for valid models.
run() { # run ENV_ASAN_OPTIONS ARGS... (the train_t5 command line)
  local opts=$1; shift
  ASAN_OPTIONS=$opts UBSAN_OPTIONS=print_stacktrace=1 ${PRE[@]+"${PRE[@]}"} "$BIN" "$@" >"$T/out" 2>"$T/err"
  rc=$?
}

PRE=()  # a command the run goes through: a file-size limit, another user

sanitizer_report() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|UndefinedBehaviorSanitizer' "$T/err"; }

expect_error() { # expect_error NAME MODEL_ARG NEEDLE   (runs: train_t5 info --model MODEL_ARG)
  expect_error_cmd "$1" "$3" info --model "$2"
}

expect_error_cmd() { # expect_error_cmd NAME NEEDLE ARGS...
  local name=$1 needle=$2 why=""
  shift 2
  run "detect_leaks=0" "$@"
  local lines first second
  lines=$(wc -l <"$T/err")
  first=$(sed -n 1p "$T/err")
  second=$(sed -n 2p "$T/err")
  if [ "$rc" -ne 1 ]; then why="exit code $rc, want 1"
  elif sanitizer_report; then why="sanitizer report"
  elif [ "${first#error:}" = "$first" ]; then why="stderr does not start with \"error:\""
  elif [ "$lines" -gt 2 ] || { [ "$lines" -eq 2 ] && [ "${second#HINT:}" = "$second" ]; }; then
    why="stderr has $lines lines (want one error line, optionally a HINT line)"
  elif ! grep -qF -- "$needle" "$T/err"; then why="message does not name \"$needle\""
  fi
  if [ -z "$why" ]; then
    ok "$(printf '%-18s %s' "$name" "$first")"
  else
    notok "$name: $why"
    sed -n '1,12s/^/       | /p' "$T/err"
  fi
}

expect_ok() { # expect_ok NAME MODEL_ARG COUNT
  local name=$1 arg=$2 count=$3 why=""
  run "detect_leaks=1" info --model "$arg"
  local grouped
  grouped=$(printf "%'d" "$count" 2>/dev/null || echo "$count")
  if [ "$rc" -ne 0 ]; then why="exit code $rc, want 0"
  elif sanitizer_report; then why="sanitizer report"
  elif ! grep -qE -- "(^|[^0-9,_])($count|${grouped//,/[,_]})([^0-9,_]|$)" "$T/out"; then
    why="stdout does not show the parameter count $count"
  fi
  if [ -z "$why" ]; then
    ok "$(printf '%-18s loads: %s' "$name" "$(tr '\n' ' ' <"$T/out" | cut -c1-100)")"
  else
    notok "$name: $why"
    sed -n '1,12s/^/       | /p' "$T/err" "$T/out"
  fi
}

expect_ok "valid tied" "$T/good" "$(cat "$T/good.count")"
expect_ok "valid untied" "$T/good_untied" "$(cat "$T/good_untied.count")"
expect_ok "valid sharded" "$T/good_sharded" "$(cat "$T/good.count")"
expect_ok "tie=false, no lm_head" "$T/untied_cfg_tied_file" "$(cat "$T/untied_cfg_tied_file.count")"

expect_error "no config.json" "$T/no_config" "config.json"
expect_error "malformed config" "$T/malformed_config" "config.json"
expect_error "empty config" "$T/empty_config" "config.json"
expect_error "missing key" "$T/missing_key" '"d_model"'
expect_error "wrong-typed key" "$T/wrong_type" '"d_model"'
expect_error "negative d_ff" "$T/negative_dim" '"d_ff"'
expect_error "bad ffn proj" "$T/bad_ffn" '"feed_forward_proj"'
expect_error "bad dropout" "$T/bad_dropout" '"dropout_rate"'
expect_error "model_type bart" "$T/bart_config" '"model_type"'
expect_error "truncated st" "$T/truncated" "model.safetensors"
expect_error "header too long" "$T/header_too_long" "model.safetensors"
expect_error "header not JSON" "$T/header_not_json" "model.safetensors"
expect_error "3-byte st" "$T/tiny_file" "model.safetensors"
expect_error "empty st" "$T/empty_file" "model.safetensors"
expect_error "unknown dtype" "$T/unknown_dtype" '"F64"'
expect_error "bad data_offsets" "$T/bad_offsets" '"decoder.block.1.layer.2.DenseReluDense.wo.weight"'
expect_error "offset off by 4" "$T/offsets_gap" '"encoder.final_layer_norm.weight"'
expect_error "missing tensor" "$T/missing_tensor" '"decoder.block.1.layer.0.SelfAttention.q.weight"'
expect_error "shape mismatch" "$T/shape_mismatch" '"encoder.block.1.layer.1.DenseReluDense.wo.weight"'
expect_error "unknown tensor" "$T/unknown_tensor" '"model.decoder.layers.0.fc1.weight"'
expect_error "unknown preset" "t5-tiny" '"t5-tiny"'
expect_error "no such path" "$T/does/not/exist" "$T/does/not/exist"
expect_error "eps 1e300" "$T/eps_1e300" '"layer_norm_epsilon"'
expect_error "nan weight" "$T/nan_weight" '"decoder.block.1.layer.0.SelfAttention.k.weight"'
expect_error "config.json a dir" "$T/dir_config_json" "config.json: is a directory"
expect_error "weights a dir" "$T/dir_model_safetensors" "model.safetensors: is a directory"
expect_error "index a dir" "$T/dir_model_safetensors_index_json" "model.safetensors.index.json: is a directory"

# ---- flags and batch files ---------------------------------------------------------------
FIX=tests/fixtures/relu_tied
expect_error_cmd "unknown flag" "--learning_rte" info --model "$T/good" --learning_rte 1e-3
expect_error_cmd "bad flag value" "--steps" overfit --model "$T/good" --steps many
expect_error_cmd "unknown command" '"trian"' trian --model "$T/good"
expect_error_cmd "bad dtype" "--dtype" convert --model "$T/good" --output_dir "$T/conv" --dtype f8
expect_error_cmd "preset, no --init" "--init random" info --model t5-small
expect_error_cmd "f16 overflow" '"decoder.block.1.layer.0.SelfAttention.k.weight"' convert --model "$T/big_weight" \
  --output_dir "$T/conv16" --dtype f16
[ -e "$T/conv16/model.safetensors" ] && notok "f16 overflow: $T/conv16/model.safetensors was written"
expect_error_cmd "batch not a file" "$T/nope.safetensors" loss --model "$T/good" --batch "$T/nope.safetensors"
expect_error_cmd "batch w/o labels" '"input_ids"' loss --model "$T/good" --batch "$T/good/model.safetensors"
expect_error_cmd "ids outside vocab" "reference.safetensors" loss --model "$T/good" --batch "$FIX/reference.safetensors"
# ---- PyTorch .bin weights and DeepSpeed imports (issue 19) ---------------------------------
DSF=tests/fixtures/ds_ckpt
expect_ok "bin: torch zip" "$DSF/hf_bin_zip" 12000
expect_ok "bin: torch legacy" "$DSF/hf_bin_legacy" 12000
expect_ok "bin: sharded" "$DSF/hf_bin_sharded" 12000
bin_dir() { # bin_dir NAME: a model dir with the tiny config and a copy of the zip .bin to damage
  rm -rf "$T/$1"; mkdir -p "$T/$1"; cp "$DSF/hf_bin_zip/config.json" "$DSF/hf_bin_zip/pytorch_model.bin" "$T/$1/"
}
bin_dir bin_trunc; head -c 5000 "$DSF/hf_bin_zip/pytorch_model.bin" >"$T/bin_trunc/pytorch_model.bin"
expect_error "bin: truncated" "$T/bin_trunc" "pytorch_model.bin: a zip without an end-of-central-directory"
bin_dir bin_text; echo "not a torch file" >"$T/bin_text/pytorch_model.bin"
expect_error "bin: not torch" "$T/bin_text" "pytorch_model.bin: neither a torch zip file"
bin_dir bin_proto4; cp tests/fixtures/torch_bin/bad/protocol4.bin "$T/bin_proto4/pytorch_model.bin"
expect_error "bin: opcode FRAME" "$T/bin_proto4" "opcode FRAME (0x95) at byte 2"
bin_dir bin_strided; cp tests/fixtures/torch_bin/bad/noncontig.bin "$T/bin_strided/pytorch_model.bin"
expect_error "bin: strided view" "$T/bin_strided" "is a non-contiguous view"
bin_dir bin_nostorage; cp tests/fixtures/torch_bin/bad/missing_storage.bin "$T/bin_nostorage/pytorch_model.bin"
expect_error "bin: no storage" "$T/bin_nostorage" 'storage "1" named by archive/data.pkl is missing'
bin_dir bin_index; echo '{"weight_map": {"shared.weight": "pytorch_model-1.bin"}}' >"$T/bin_index/pytorch_model.bin.index.json"
rm "$T/bin_index/pytorch_model.bin"
expect_error "bin: index, no shard" "$T/bin_index" 'shard "pytorch_model-1.bin" named by the index is missing'
SYN=tests/fixtures/ds_synth/zero2_ws2/checkpoint
expect_error_cmd "import: no args" "CKPT_DIR and OUT are required" import-deepspeed
expect_error_cmd "import: one arg" "CKPT_DIR and OUT are required" import-deepspeed "$SYN"
expect_error_cmd "import: no dir" "$T/nockpt: not found" import-deepspeed "$T/nockpt" "$T/imp_out"
expect_error_cmd "import: bad tag" 'the tag folder "global_step9" is not there' import-deepspeed "$SYN" "$T/imp_out" \
  --tag global_step9
rm -rf "$T/ds_rank"; cp -r "$SYN" "$T/ds_rank"; rm "$T/ds_rank/global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"
expect_error_cmd "import: rank lost" "expected 2 *_optim_states.pt files" import-deepspeed "$T/ds_rank" "$T/imp_out"
rm -rf "$T/ds_trunc"; cp -r "$SYN" "$T/ds_trunc"
head -c 3000 "$SYN/global_step3/mp_rank_00_model_states.pt" >"$T/ds_trunc/global_step3/mp_rank_00_model_states.pt"
expect_error_cmd "import: truncated" "mp_rank_00_model_states.pt: a zip without" import-deepspeed "$T/ds_trunc" \
  "$T/imp_out"
[ ! -e "$T/imp_out" ] || notok "import: a failed import left $T/imp_out behind"
run "detect_leaks=1" import-deepspeed tests/fixtures/ds_ckpt/zero3/checkpoint "$T/imp_ok"
if [ "$rc" -eq 0 ] && ! sanitizer_report && [ -f "$T/imp_ok/optimizer.safetensors" ]; then
  ok "import: ZeRO-3 imports without a sanitizer or leak report"
  expect_ok "import: loads" "$T/imp_ok" 12000
else notok "import: ZeRO-3: exit code $rc"; sed -n '1,12s/^/       | /p' "$T/err"; fi
expect_error_cmd "import: OUT busy" "is a directory that is not empty" import-deepspeed "$SYN" "$T/imp_ok"
# train_t5 export: every input checked before OUT is made
expect_error_cmd "export, no paths" "no CKPT" export
expect_error_cmd "export, no OUT" "no OUT" export "$T/good"
expect_error_cmd "export, missing CKPT" "$T/no_ckpt" export "$T/no_ckpt" "$T/exp_out"
expect_error_cmd "export, bad dtype" "--dtype" export "$T/good" "$T/exp_out" --dtype fp8
expect_error_cmd "export, bad size" "--max_shard_size" export "$T/good" "$T/exp_out" --max_shard_size 5XB
expect_error_cmd "export, OUT not empty" "--overwrite" export "$T/good" "$T/good"
mkdir -p "$T/cfg_only"; cp "$T/good/config.json" "$T/cfg_only/"
expect_error_cmd "export, no weights" "latest" export "$T/cfg_only" "$T/exp_out"
[ -e "$T/exp_out" ] && notok "export errors: $T/exp_out was made"
# ---- the trainer: data, prepared datasets, flags; nothing written to --output_dir ----------
TM=tests/fixtures/trainer_model
TOK=data/sample/spiece.model
mkdir -p "$T/d_ok" "$T/d_mis" "$T/d_empty" "$T/d_utf8" "$T/d_small" "$T/busy"
head -n 8 data/sample/train.source >"$T/d_ok/train.source"; head -n 8 data/sample/train.target >"$T/d_ok/train.target"
head -n 8 data/sample/train.source >"$T/d_mis/train.source"; head -n 7 data/sample/train.target >"$T/d_mis/train.target"
printf 'Hello world.\n\nThird line.\n' >"$T/d_empty/train.source"; printf 'Salut.\nDoi.\nTrei.\n' >"$T/d_empty/train.target"
printf 'Hello \xc3\x28 world.\nFine.\n' >"$T/d_utf8/train.source"; printf 'Salut.\nBine.\n' >"$T/d_utf8/train.target"
head -n 4 data/sample/val.source >"$T/d_ok/val.source"; head -n 4 data/sample/val.target >"$T/d_ok/val.target"
head -n 2 data/sample/train.source >"$T/d_small/train.source"; head -n 2 data/sample/train.target >"$T/d_small/train.target"
printf '{"translation": {"en": "Hi.", "ro": "Salut."}}\n{"translation": {"en": "Bye."\n' >"$T/bad.jsonl"
printf '{"translation": {"en": "Hi.", "de": "Hallo."}}\n' >"$T/nokey.jsonl"
echo "keep" >"$T/busy/file.txt"
echo '{"zero_optimization": {"stage": 2,}' >"$T/bad_ds.json"
ASAN_OPTIONS=detect_leaks=0 "$BIN" prepare --data_dir "$T/d_ok" --tokenizer_name "$TOK" --output_dir "$T/prep" >/dev/null 2>&1
for kind in magic version truncated checksum; do
  mkdir -p "$T/p_$kind"
  python3 - "$T/prep/train.t5ds" "$T/p_$kind/train.t5ds" "$kind" <<'PY'
import sys, struct
src, dst, kind = sys.argv[1:]
b = bytearray(open(src, "rb").read())
if kind == "magic": b[0:4] = b"XXXX"
elif kind == "version": b[8:12] = struct.pack("<I", 99)
elif kind == "truncated": b = b[:-10]
elif kind == "checksum": b[-1] ^= 0x01
open(dst, "wb").write(bytes(b))
PY
done

n_out=0
expect_train_error() { # NAME NEEDLE TRAINER-ARGS...  (adds --model/--tokenizer/--output_dir; checks no output_dir is left)
  local name=$1 needle=$2; shift 2
  n_out=$((n_out + 1))
  local out="$T/out$n_out"
  expect_error_cmd "$name" "$needle" --model "$TM" --tokenizer_name "$TOK" --cache_dir "$T/cache" \
    --output_dir "$out" --max_steps 2 --per_device_train_batch_size 4 "$@"
  if [ -e "$out" ]; then
    notok "$name: --output_dir $out exists after the error (files: $(find "$out" -type f | head -3 | tr '\n' ' '))"
  fi
}
expect_train_error "fp16 with bf16" "--bf16" --do_train --data_dir "$T/d_ok" --fp16 --bf16
expect_train_error "max_steps 0" "--max_steps" --do_train --data_dir "$T/d_ok" --max_steps 0
expect_train_error "no data flag" "--data_dir" --do_train
# --sharded_ddp: an unknown option, and HF 4.x's own errors for the combinations it refused
expect_train_error "sharded_ddp: unknown" 'unknown option "zero_dp_4"' --do_train --data_dir "$T/d_ok" --sharded_ddp zero_dp_4
expect_train_error "sharded_ddp: simple + other" "not compatible with any other option" --do_train --data_dir "$T/d_ok" \
  --sharded_ddp "simple zero_dp_2"
expect_train_error "sharded_ddp: 2 + 3" "zero_dp_2\` is not compatible" --do_train --data_dir "$T/d_ok" \
  --sharded_ddp "zero_dp_2 zero_dp_3"
expect_train_error "sharded_ddp: offload alone" "can't work on its own" --do_train --data_dir "$T/d_ok" --sharded_ddp offload
expect_train_error "sharded_ddp + deepspeed" "together with --deepspeed is not possible" --do_train --data_dir "$T/d_ok" \
  --sharded_ddp --deepspeed configs/ds_config_zero2.json
expect_train_error "missing data dir" "$T/nodata" --do_train --data_dir "$T/nodata"
expect_train_error "misaligned lines" "train.target" --do_train --data_dir "$T/d_mis"
expect_train_error "empty line" "train.source:2" --do_train --data_dir "$T/d_empty"
expect_train_error "invalid UTF-8" "train.source" --do_train --data_dir "$T/d_utf8"
expect_train_error "malformed JSON line" "bad.jsonl" --do_train --train_file "$T/bad.jsonl"
expect_train_error "JSON line w/o lang" "nokey.jsonl" --do_train --train_file "$T/nokey.jsonl"
expect_train_error "t5ds wrong magic" "p_magic/train.t5ds" --do_train --data_dir "$T/p_magic"
expect_train_error "t5ds wrong version" "p_version/train.t5ds" --do_train --data_dir "$T/p_version"
expect_train_error "t5ds truncated" "p_truncated/train.t5ds" --do_train --data_dir "$T/p_truncated"
expect_train_error "t5ds bad checksum" "p_checksum/train.t5ds" --do_train --data_dir "$T/p_checksum"
expect_train_error "smaller than batch" "fewer than one batch" --do_train --data_dir "$T/d_small"
expect_train_error "unknown train flag" "--per_device_train_batch_size" --do_train --data_dir "$T/d_ok" --per_device_train_bach_size 4
expect_train_error "unknown task" "--task" --do_train --data_dir "$T/d_ok" --task translation_en_to_xx
expect_train_error "device cuda" "--device cuda" --do_train --data_dir "$T/d_ok" --device cuda
expect_train_error "GPU cap on cpu" "--device cuda" --do_train --data_dir "$T/d_ok" --max_gpu_memory 1
expect_train_error "resume from a model dir" "trainer_state.json" --do_train --data_dir "$T/d_ok" \
  --resume_from_checkpoint "$T/good"
expect_train_error "resume from nowhere" "$T/nockpt" --do_train --data_dir "$T/d_ok" --resume_from_checkpoint "$T/nockpt"
expect_train_error "bad deepspeed JSON" "bad_ds.json" --do_train --data_dir "$T/d_ok" --deepspeed "$T/bad_ds.json"
# ZeRO-Offload: the optimizer to the cpu or nvme and the parameters to the cpu are built; what
# is not is refused by name, and a bad nvme_path stops the run before any work
echo '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}}}' \
  >"$T/offload_param_ds.json"
expect_train_error "offload_param to nvme" 'offload_param.device "nvme" is not built yet' --do_train --data_dir "$T/d_ok" \
  --deepspeed "$T/offload_param_ds.json"
echo '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/no/such/nvme"}}}' >"$T/nvme_ds.json"
expect_train_error "offload to nvme, missing nvme_path" '"/no/such/nvme" does not exist' --do_train --data_dir "$T/d_ok" \
  --deepspeed "$T/nvme_ds.json"
echo '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}' >"$T/ratio_ds.json"
expect_train_error "offload ratio 0.5" "ratio" --do_train --data_dir "$T/d_ok" --deepspeed "$T/ratio_ds.json"
echo '{"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}' >"$T/off0_ds.json"
expect_train_error "offload at stage 0" "stage" --do_train --data_dir "$T/d_ok" --deepspeed "$T/off0_ds.json"
echo '{"fp16": {"enabled": true}, "zero_optimization": {"stage": 0}}' >"$T/fp16_ds.json"
expect_train_error "deepspeed fp16 on cpu" "fp16_ds.json: fp16.enabled is true, which needs a GPU (--device cuda)" \
  --do_train --data_dir "$T/d_ok" --deepspeed "$T/fp16_ds.json"
expect_train_error "fp16 on cpu" "--fp16 needs a GPU (--device cuda), but the device is cpu (--device cpu)" --do_train \
  --data_dir "$T/d_ok" --fp16 --device cpu
expect_train_error "label smoothing 1" "--label_smoothing_factor" --do_train --data_dir "$T/d_ok" --label_smoothing 1.5
# launchers (comm/launch.c): refused before anything is written, and before any NCCL need
expect_train_error "num_gpus 0" "--num_gpus" --do_train --data_dir "$T/d_ok" --num_gpus 0
expect_train_error "num_gpus -2" "--num_gpus" --do_train --data_dir "$T/d_ok" --num_gpus -2
expect_train_error "num_gpus on cpu" "mpirun" --do_train --data_dir "$T/d_ok" --num_gpus 2 --device cpu
expect_train_error "num_gpus, no CUDA" "--num_gpus 1: this train_t5 was built without CUDA" --do_train --data_dir "$T/d_ok" \
  --num_gpus 1
# HF flags (trainer/args_table.c): every unknown flag in one error; refused ones named with the reason
expect_train_error "3 unknown flags" "unknown flags --foo, --learning_rte (did you mean --learning_rate?), --qux" \
  --do_train --data_dir "$T/d_ok" --foo 1 --learning_rte 1e-3 --qux
expect_train_error "refused flags" "--adafactor: Adafactor is not built" --do_train --data_dir "$T/d_ok" --adafactor \
  --save_total_limit 2
expect_train_error "report_to wandb" "--report_to wandb: not built" --do_train --data_dir "$T/d_ok" --report_to wandb
expect_train_error "optim sgd" "--optim sgd" --do_train --data_dir "$T/d_ok" --optim sgd
expect_train_error "bad logging_strategy" "--logging_strategy" --do_train --data_dir "$T/d_ok" --logging_strategy often
expect_train_error "logging_steps 2.5" "--logging_steps" --do_train --data_dir "$T/d_ok" --logging_steps 2.5
expect_train_error "bad lr scheduler" "--lr_scheduler_type" --do_train --data_dir "$T/d_ok" --lr_scheduler polynomial
expect_train_error "use_cpu vs cuda" "--use_cpu and --device cuda" --do_train --data_dir "$T/d_ok" --use_cpu --device cuda
expect_train_error "warmup ratio twice" "--warmup_ratio" --do_train --data_dir "$T/d_ok" --warmup_steps 0.1 --warmup_ratio 0.2
WORLD_SIZE=2 RANK=0 expect_train_error "WORLD_SIZE w/o ADDR" "MASTER_ADDR" --do_train --data_dir "$T/d_ok"
WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 expect_train_error "WORLD_SIZE w/o PORT" "MASTER_PORT" \
  --do_train --data_dir "$T/d_ok"
SLURM_NTASKS=2 SLURM_PROCID=0 SLURM_LOCALID=0 expect_train_error "Slurm w/o ADDR" "MASTER_ADDR" --do_train \
  --data_dir "$T/d_ok"
WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 expect_train_error "torchrun, cpu ranks" \
  "mpirun" --do_train --data_dir "$T/d_ok" --device cpu
# flag errors (trainer/plan.c, trainer/args.c): before --output_dir is created, the tokenizer
# loaded or the data tokenized (its --cache_dir is never made) and the model loaded
expect_flag_error() { # NAME NEEDLE MODEL TRAINER-ARGS...
  local name=$1 needle=$2 model=$3; shift 3
  n_out=$((n_out + 1))
  local out="$T/out$n_out" cache="$T/flagcache$n_out"
  expect_error_cmd "$name" "$needle" --model "$model" --tokenizer_name "$TOK" --cache_dir "$cache" \
    --output_dir "$out" --max_steps 2 --per_device_train_batch_size 4 --do_train --data_dir "$T/d_ok" "$@"
  [ -e "$out" ] && notok "$name: --output_dir $out exists after the error"
  [ -e "$cache" ] && notok "$name: the data was tokenized ($cache exists) before the flag error"
  return 0
}
expect_flag_error "flag: bad sampler" "--sampler" "$TM" --sampler shuffled
expect_flag_error "flag: bad lr sched" "--lr_scheduler_type" "$TM" --lr_scheduler_type polynomial
expect_flag_error "flag: eval_strategy" "--eval_strategy" "$TM" --eval_strategy often
expect_flag_error "flag: save_strategy" "--save_strategy" "$TM" --save_strategy often
expect_flag_error "flag: bad init" "--init" "$TM" --init zeros
expect_flag_error "flag: optim" "--optim sgd" "$TM" --optim sgd
expect_flag_error "flag: bare preset" "preset with no local weights" t5-small
expect_flag_error "flag: no model dir" "$T/nomodel" "$T/nomodel"
mkdir -p "$T/nocfg"
expect_flag_error "flag: no config.json" "config.json" "$T/nocfg"
# checkpoint retention and the best model (trainer/retention.c): HF's TrainingArguments checks
expect_flag_error "flag: load_best strategies" "--load_best_model_at_end requires the save and eval strategy to match" \
  "$TM" --load_best_model_at_end
expect_flag_error "flag: load_best multiple" "is not a round multiple of --eval_steps 3" "$TM" --load_best_model_at_end \
  --eval_strategy steps --eval_steps 3 --save_steps 5
expect_flag_error "flag: load_best ratio+steps" "mixing ratio and absolute steps" "$TM" --load_best_model_at_end \
  --eval_strategy steps --eval_steps 0.1 --save_steps 5
expect_flag_error "flag: load_best ratios" "--save_steps 0.25, which is not a multiple of --eval_steps 0.1" "$TM" \
  --load_best_model_at_end --eval_strategy steps --eval_steps 0.1 --save_steps 0.25
expect_flag_error "flag: save_total_limit -1" "--save_total_limit -1" "$TM" --save_total_limit -1
expect_flag_error "flag: metric empty" "--metric_for_best_model \"\"" "$TM" --metric_for_best_model ""
expect_flag_error "flag: only_model+best+ds" "--save_only_model along with --load_best_model_at_end" "$TM" \
  --save_only_model --load_best_model_at_end --eval_strategy steps --eval_steps 1 --save_steps 1 \
  --deepspeed configs/ds_config_zero2.json
# --deepspeed contradictions and refusals: said before the data is tokenized (the step count
# is not needed to see them)
printf '{"train_micro_batch_size_per_gpu": 16}' > "$T/ds_micro.json"
expect_flag_error "ds: micro-batch vs flag" "train_micro_batch_size_per_gpu" "$TM" --deepspeed "$T/ds_micro.json"
printf '{"optimizer": {"type": "AdamW", "params": {"lr": 0.5}}}' > "$T/ds_lr.json"
expect_flag_error "ds: lr vs flag" "learning_rate" "$TM" --deepspeed "$T/ds_lr.json" --learning_rate 1e-3
printf '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "%s/a_file"}}}' "$T" > "$T/ds_nvme.json"
: > "$T/a_file"
expect_flag_error "ds: nvme_path not a directory" "is not a directory" "$TM" --deepspeed "$T/ds_nvme.json"
printf '{"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 500}}}' > "$T/ds_warm.json"
expect_flag_error "ds: warmup vs flag" "warmup_num_steps" "$TM" --deepspeed "$T/ds_warm.json" --warmup_steps 5
expect_error_cmd "non-empty output_dir" "--overwrite_output_dir" --model "$TM" --tokenizer_name "$TOK" --do_train \
  --data_dir "$T/d_ok" --output_dir "$T/busy"
[ "$(ls "$T/busy")" = "file.txt" ] || notok "non-empty output_dir: its contents changed"
# ---- issue 13: numbers, non-finite training, output paths, resume, write failures ----------
# Every case below failed on the train_t5 before issue 13 (exit 0, a crash, or an error
# only after training). Trainer runs use the tiny fixture model on 8 lines.
TRAIN=(--model "$TM" --tokenizer_name "$TOK" --cache_dir "$T/cache" --per_device_train_batch_size 4 --do_train
       --data_dir "$T/d_ok")
trained_before_error() { grep -q "Running training" "$T/out"; }
expect_no_training() { # NAME: the error came before the first step
  if trained_before_error; then notok "$1: the run trained before its error"; fi
}
# step counts that do not fit an int, and number flags that are not finite numbers
expect_train_error "epochs 3e8, batch 1" "more than 2147483647" --do_train --data_dir "$T/d_ok" --max_steps -1 \
  --per_device_train_batch_size 1 --num_train_epochs 3e8
expect_train_error "epochs 1e10" "more than 2147483647" --do_train --data_dir "$T/d_ok" --max_steps -1 \
  --num_train_epochs 1e10
for f in $(grep -oE '(USE|ALIAS)\("[a-z_]+", FLAG_FLOAT' trainer/args_table.c | cut -d'"' -f2); do
  for v in inf nan 1e300; do
    expect_train_error "--$f $v" "--$f" --do_train --data_dir "$T/d_ok" "--$f" "$v"
  done
done
expect_train_error "n_train -5" "--n_train" --do_train --data_dir "$T/d_ok" --n_train -5
expect_train_error "dropout -0.5" "--dropout_rate" --do_train --data_dir "$T/d_ok" --dropout -0.5
expect_train_error "generation length 2^31-1" "--generation_max_length" --do_train --data_dir "$T/d_ok" \
  --generation_max_length 2147483647
echo '{"optimizer": {"type": "AdamW", "params": {"lr": 1e400}}}' >"$T/lr_1e400_ds.json"
expect_train_error "deepspeed lr 1e400" '"optimizer.params.lr"' --do_train --data_dir "$T/d_ok" \
  --deepspeed "$T/lr_1e400_ds.json"
# a directory where a file is expected
mkdir -p "$T/ds_dir" "$T/d_dirsrc/train.source" "$T/jsonl_dir"
cp "$T/d_ok/train.target" "$T/d_dirsrc/"
expect_train_error "--deepspeed a dir" "is a directory" --do_train --data_dir "$T/d_ok" --deepspeed "$T/ds_dir"
expect_train_error "train.source a dir" "is a directory" --do_train --data_dir "$T/d_dirsrc"
expect_train_error "--train_file a dir" "is a directory" --do_train --train_file "$T/jsonl_dir"

# a run that diverges (fp32): stopped after a few non-finite steps, nothing saved
expect_train_error "lr 1e30 diverges" "inf/nan" --do_train --data_dir "$T/d_ok" --max_steps 8 --learning_rate 1e30

# a checkpoint to resume from, and damaged copies of it
ASAN_OPTIONS=detect_leaks=0 "$BIN" "${TRAIN[@]}" --output_dir "$T/ck" --max_steps 2 --save_steps 2 --do_eval \
  >"$T/ck.log" 2>&1 || { notok "training the checkpoint for the resume cases failed"; sed -n '1,12s/^/       | /p' "$T/ck.log"; }
CK=$T/ck/checkpoint-2
damaged() { rm -rf "$T/ck_$1"; cp -r "$CK" "$T/ck_$1"; echo "$T/ck_$1"; }
d=$(damaged step)
python3 -c 'import json,sys; p=sys.argv[1]; s=json.load(open(p)); s["optimizer_step"]=0; json.dump(s,open(p,"w"))' \
  "$d/global_step2/zero_index.json"
expect_train_error "optimizer step != global" 'optimizer_step 0' --do_train --data_dir "$T/d_ok" --max_steps 4 \
  --resume_from_checkpoint "$d"
# a nan in a moment, with the index's checksum made to match (so the value check is reached)
d=$(damaged nan_moment)
python3 - "$d/global_step2/rank_00000.safetensors" "$d/global_step2/zero_index.json" <<'PY'
import json, struct, sys
p, ip = sys.argv[1], sys.argv[2]; b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]; hdr = json.loads(b[8:8 + n])
at = 8 + n + hdr["exp_avg"]["data_offsets"][0] + 4 * 3
b[at:at + 4] = struct.pack("<f", float("nan")); open(p, "wb").write(bytes(b))
table = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
crc = 0xFFFFFFFF
for x in b: crc = table[(crc ^ x) & 0xFF] ^ (crc >> 8)
idx = json.load(open(ip)); idx["shards"][0]["crc32c"] = crc ^ 0xFFFFFFFF; json.dump(idx, open(ip, "w"))
PY
expect_train_error "nan in moments" "rank_00000.safetensors: tensor \"exp_avg\" holds nan" --do_train --data_dir "$T/d_ok" \
  --max_steps 4 --resume_from_checkpoint "$d"
# a flipped byte, a missing latest, a checkpoint still being written (checkpoint/.tmp)
d=$(damaged flip)
python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[len(b)//2]^=1; open(p,"wb").write(bytes(b))' \
  "$d/global_step2/rank_00000.safetensors"
expect_train_error "flipped byte in a shard" "rank_00000.safetensors: CRC-32C" --do_train --data_dir "$T/d_ok" \
  --max_steps 4 --resume_from_checkpoint "$d"
d=$(damaged no_latest); rm "$d/latest"
expect_train_error "no latest" "latest: missing" --do_train --data_dir "$T/d_ok" --max_steps 4 --resume_from_checkpoint "$d"
rm -rf "$T/ck_half.tmp"; cp -r "$CK" "$T/ck_half.tmp"
expect_train_error "resume a .tmp" "still being written" --do_train --data_dir "$T/d_ok" --max_steps 4 \
  --resume_from_checkpoint "$T/ck_half.tmp"
d=$(damaged state_dir); rm "$d/trainer_state.json"; mkdir "$d/trainer_state.json"
expect_train_error "trainer_state a dir" "is a directory" --do_train --data_dir "$T/d_ok" --max_steps 4 \
  --resume_from_checkpoint "$d"
d=$(damaged zero_dir); rm "$d/global_step2/zero_index.json"; mkdir "$d/global_step2/zero_index.json"
expect_train_error "zero_index a dir" "is a directory" --do_train --data_dir "$T/d_ok" --max_steps 4 \
  --resume_from_checkpoint "$d"
d=$(damaged big_step)
python3 -c 'import sys; p=sys.argv[1]; s=open(p).read(); import re; open(p,"w").write(re.sub(r"\"global_step\": *[0-9]+", "\"global_step\": 1e300", s))' \
  "$d/trainer_state.json"
expect_train_error "global_step 1e300" '"global_step"' --do_train --data_dir "$T/d_ok" --max_steps 4 \
  --resume_from_checkpoint "$d"
expect_train_error "resume, other --model" "is not a checkpoint of --model" --do_train --data_dir "$T/d_ok" \
  --max_steps 4 --resume_from_checkpoint "$CK" --model t5-small --init random
d=$(damaged only_model); rm -r "$d"/global_step* "$d/latest"  # as --save_only_model writes it
expect_train_error "resume model-only" "saved with --save_only_model" --do_train --data_dir "$T/d_ok" --max_steps 4 \
  --resume_from_checkpoint "$d"

# --output_dir: what the run writes must be writable before it trains, and a second run on
# the same directory at once is refused naming the first
mkdir -p "$T/obst/model.safetensors" "$T/obst2/all_results.json" "$T/obst3"
touch "$T/obst3/checkpoint-1"
expect_error_cmd "sub_batch no ckpt" "add --gradient_checkpointing" "${TRAIN[@]}" --max_steps 2 --output_dir "$T/subb" \
  --checkpoint_sub_batch 2
expect_error_cmd "sub_batch negative" "--checkpoint_sub_batch -1" "${TRAIN[@]}" --max_steps 2 --output_dir "$T/subb2" \
  --gradient_checkpointing --checkpoint_sub_batch -1
expect_error_cmd "model.safetensors a dir" "is a directory" "${TRAIN[@]}" --max_steps 2 --output_dir "$T/obst" \
  --overwrite_output_dir
expect_no_training "model.safetensors a dir"
expect_error_cmd "all_results a dir" "is a directory" "${TRAIN[@]}" --max_steps 2 --output_dir "$T/obst2" \
  --overwrite_output_dir
expect_no_training "all_results a dir"
expect_error_cmd "checkpoint-1 a file" "checkpoint-1" "${TRAIN[@]}" --max_steps 2 --output_dir "$T/obst3" \
  --overwrite_output_dir
expect_no_training "checkpoint-1 a file"
# read-only: root writes anywhere, so the run goes as nobody into a directory owned by root
mkdir -p "$T/ro_out" "$T/cache_ro"
echo keep >"$T/ro_out/old.txt"
chmod 755 "$T" "$T/ro_out"
chmod 777 "$T/cache_ro"
if [ "$(id -u)" -eq 0 ]; then PRE=(setpriv --reuid=65534 --regid=65534 --clear-groups); else chmod 555 "$T/ro_out"; fi
expect_error_cmd "read-only output_dir" "$T/ro_out" "${TRAIN[@]}" --cache_dir "$T/cache_ro" --max_steps 2 \
  --output_dir "$T/ro_out" --overwrite_output_dir
expect_no_training "read-only output_dir"
PRE=()
chmod 700 "$T"
# the lock: a long first run holds it; the second is refused naming the first one's pid
ASAN_OPTIONS=detect_leaks=0 "$BIN" "${TRAIN[@]}" --max_steps 100000 --save_steps 100000 --output_dir "$T/locked" \
  >"$T/first.log" 2>&1 &
first=$!
for _ in $(seq 1 300); do grep -qs "pid $first" "$T/locked/.train_t5.lock" && break; sleep 0.2; done
expect_error_cmd "output_dir in use" "pid $first" "${TRAIN[@]}" --max_steps 2 --output_dir "$T/locked" \
  --overwrite_output_dir
expect_no_training "output_dir in use"
kill "$first" 2>/dev/null; wait "$first" 2>/dev/null

# a write that fails (the file-size limit: EFBIG, as ENOSPC) while saving: said, the
# unfinished files removed, the earlier run's outputs intact
sum_before=$(cd "$T/ck" && find . -type f -exec md5sum {} + | sort)
PRE=(bash -c 'ulimit -f 400 && exec "$@"' _)
expect_error_cmd "file-size limit" "ulimit -f" "${TRAIN[@]}" --max_steps 2 --save_steps 1 --output_dir "$T/ck" \
  --overwrite_output_dir
PRE=()
left=$(cd "$T/ck" && find . -name '*.tmp' -o -name 'checkpoint-1' | tr '\n' ' ')
[ -z "$left" ] || notok "file-size limit: left behind: $left"
[ "$(cd "$T/ck" && find . -type f -exec md5sum {} + | sort)" = "$sum_before" ] || \
  notok "file-size limit: the earlier run's files in $T/ck changed"

# runs that succeed, checked for what they write
expect_run_ok() { # NAME ARGS...: exit 0, no sanitizer report
  local name=$1; shift
  run "detect_leaks=0" "$@"
  if [ "$rc" -ne 0 ] || sanitizer_report; then
    notok "$name: exit code $rc$(sanitizer_report && echo ', sanitizer report')"; sed -n '1,12s/^/       | /p' "$T/err"
    return 1
  fi
}
# HF merges all_results.json: the eval_* keys of the first run stay after a resumed run
if expect_run_ok "resume merges all_results" "${TRAIN[@]}" --max_steps 4 --output_dir "$T/ck" \
     --resume_from_checkpoint "$CK"; then
  if grep -q '"eval_loss"' "$T/ck/all_results.json" && grep -q '"train_loss"' "$T/ck/all_results.json"; then
    ok "resume merges all_results: eval_loss of the first run kept"
  else notok "resume merges all_results: $(tr -d '\n ' <"$T/ck/all_results.json" | cut -c1-200)"; fi
fi
# an eval batch larger than the split is the split (no buffer of 2^31 rows)
if expect_run_ok "eval batch 2^31-1" "${TRAIN[@]}" --max_steps 1 --do_eval --output_dir "$T/evalbig" \
     --per_device_eval_batch_size 2147483647; then ok "eval batch 2^31-1: runs"; fi
# --include_num_input_tokens_seen: the real count (HF 5.17), padded (all) and not
seen() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_input_tokens_seen"])' "$1"; }
if expect_run_ok "tokens seen (all)" "${TRAIN[@]}" --max_steps 2 --output_dir "$T/seen_all" \
     --include_num_input_tokens_seen all --logging_steps 1 &&
   expect_run_ok "tokens seen (non_padding)" "${TRAIN[@]}" --max_steps 2 --output_dir "$T/seen_np" \
     --include_num_input_tokens_seen non_padding; then
  a=$(seen "$T/seen_all/trainer_state.json"); b=$(seen "$T/seen_np/trainer_state.json")
  logged=$(python3 -c 'import json,sys; print(sum("num_input_tokens_seen" in e for e in json.load(open(sys.argv[1]))["log_history"]))' \
    "$T/seen_all/trainer_state.json")
  if python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (a >= b > 0))' "$a" "$b" &&
     [ "$logged" -ge 2 ]; then
    ok "tokens seen: all $a >= non_padding $b > 0, in $logged log entries"
  else notok "tokens seen: all $a, non_padding $b"; fi
fi
# --freeze_embeds: the trainable count leaves shared.weight out
if expect_run_ok "freeze_embeds count" "${TRAIN[@]}" --max_steps 1 --output_dir "$T/frozen" --freeze_embeds; then
  want=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["vocab_size"] * c["d_model"])' \
    "$TM/config.json")
  total=$(grep -oE 'Number of trainable parameters = [0-9]+' "$T/ck.log" | grep -oE '[0-9]+$')  # no freezing
  got=$(grep -oE 'Number of trainable parameters = [0-9]+' "$T/out" | grep -oE '[0-9]+$')
  if [ -n "$got" ] && [ -n "$total" ] && [ "$got" -eq $((total - want)) ]; then
    ok "freeze_embeds count: $got = $total - shared.weight $want"
  else notok "freeze_embeds count: $got, want $total - $want"; fi
fi

# issue 19: a DeepSpeed ZeRO-3 checkpoint (3 ranks, step 3) of the trainer model, made without
# DeepSpeed (too large to commit), imported and resumed to step 5 with its moments and schedule
if python3 tools/make_ds_synthetic_fixtures.py "$TM" "$T/ds_tm" zero3_ws3 >/dev/null &&
   expect_run_ok "import ZeRO-3 of the trainer model" import-deepspeed "$T/ds_tm/zero3_ws3/checkpoint" "$T/imp_tm" &&
   expect_run_ok "resume the import" "${TRAIN[@]}" --max_steps 5 --logging_steps 1 --output_dir "$T/res_tm" \
     --resume_from_checkpoint "$T/imp_tm"; then
  steps=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["global_step"], [e["step"] for e in s["log_history"] if "loss" in e])' \
    "$T/res_tm/trainer_state.json")
  if [ "$steps" = "5 [4, 5]" ]; then ok "resume the import: steps 4 and 5 trained from the imported step 3"
  else notok "resume the import: global_step and logged steps $steps, want 5 [4, 5]"; fi
fi

finish
