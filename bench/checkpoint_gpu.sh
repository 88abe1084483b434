#!/usr/bin/env bash
# bench/checkpoint_gpu.sh: issue 19's checks that need the GPU machine (DeepSpeed, torch and
# transformers are there), one call:
#   1. t5-small checkpoints saved by DeepSpeed 0.19.8 itself (ZeRO-2 and ZeRO-3, bf16, 2 steps:
#      tools/make_ds_checkpoint.py --preset t5-small): `train_t5 import-deepspeed` gives weights
#      equal to DeepSpeed's zero_to_fp32 output, and the imported checkpoint resumes for 2 steps;
#   2. a .bin-only HF directory (torch.save of the same t5-small, zip and legacy formats) trains
#      10 steps with the same losses as its safetensors twin (dropout 0);
#   3. a t5-large train_t5 checkpoint (3 bf16 steps) exported with `train_t5 export` loads in
#      transformers with the eval loss train_t5 gives it (fp32, 200 newsdev pairs).
#   usage (GPU machine, repo root; DeepSpeed from .whl/): OUT=dir bash bench/checkpoint_gpu.sh
#   CKG_ONLY=3 runs check 3 alone (torch and transformers only).
set -u
OUT=${OUT:-/tmp/checkpoint_gpu}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/t5_torch_extensions}
PY=${PYTHON:-python3}
WHEELS=${BENCH_WHEELS:-.whl}
[ "${CKG_ONLY:-}" = 3 ] || { . bench/ds_env.sh; ds_env_setup "$OUT"; }
W=${CKG_WORKDIR:-/tmp/ckg}; rm -rf "$W"; mkdir -p "$W"
PREFIX="translate English to Romanian: "
COMMON="--tokenizer_name data/sample/spiece.model --data_dir data/sample --task translation_en_to_ro \
  --source_prefix \"$PREFIX\" --max_source_length 64 --max_target_length 64 --report_to none"

if [ "${CKG_ONLY:-}" != 3 ]; then  # CKG_ONLY=3: the t5-large export check alone (no DeepSpeed)
echo "== 1. DeepSpeed t5-small checkpoints -> train_t5 import-deepspeed"
(cd /tmp && timeout 300 torchrun --standalone --nproc_per_node 1 "$OLDPWD/tools/make_ds_checkpoint.py" --preset t5-small \
    --out "$W/ds" > "$OUT/make_ds.log" 2>&1) || { echo "make_ds_checkpoint failed:"; tail -5 "$OUT/make_ds.log"; }
for s in 2 3; do
    ./train_t5 import-deepspeed "$W/ds/zero$s/checkpoint" "$W/imp$s" > "$OUT/import$s.log" 2>&1
    echo "import zero$s: exit $?"; tail -2 "$OUT/import$s.log"
    "$PY" - "$W/imp$s/model.safetensors" "$W/ds/zero$s/zero_to_fp32.safetensors" <<'PY'
import sys
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
common = sorted(set(a) & set(b))
diff = max(float(abs(a[k].astype("float64") - b[k].astype("float64")).max()) for k in common)
print(f"RESULT import tensors={len(common)} only_import={sorted(set(a) - set(b))} "
      f"only_zero_to_fp32={sorted(set(b) - set(a))} max_abs_diff={diff:g} bitwise={diff == 0}")
PY
    eval ./train_t5 --model "$W/imp$s" --resume_from_checkpoint "$W/imp$s" $COMMON --bf16 \
        --per_device_train_batch_size 2 --max_steps 4 --logging_steps 1 --do_train --save_strategy no \
        --output_dir "$W/resume$s" --overwrite_output_dir > "$OUT/resume$s.log" 2>&1
    echo "resume the zero$s import for 2 steps: exit $? $(grep -E "^resuming|^\{'loss'" "$OUT/resume$s.log" | tr '\n' ' ' | cut -c1-300)"
done

echo "== 2. .bin-only HF directories train as their safetensors twin"
for d in hf_safetensors hf_bin_zip hf_bin_legacy; do
    eval ./train_t5 --model "$W/ds/$d" $COMMON --bf16 --dropout_rate 0 --per_device_train_batch_size 16 \
        --max_steps 10 --logging_steps 1 --do_train --save_strategy no --output_dir "$W/train_$d" \
        --overwrite_output_dir > "$OUT/train_$d.log" 2>&1
    echo "$d: exit $? $(grep -m1 -iE "loaded|weights from" "$OUT/train_$d.log" | cut -c1-160)"
done
"$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
def losses(d):
    try:
        return [e["loss"] for e in json.load(open(f"{w}/train_{d}/trainer_state.json"))["log_history"] if "loss" in e]
    except OSError as e:
        return str(e)
ref = losses("hf_safetensors")
for d in ("hf_bin_zip", "hf_bin_legacy"):
    l = losses(d)
    print(f"RESULT bin={d} steps={len(ref) if isinstance(ref, list) else ref} same_losses={l == ref} losses={l}")
PY

fi  # CKG_ONLY
echo "== 3. t5-large: train_t5 checkpoint -> train_t5 export -> transformers eval loss"
eval ./train_t5 --model t5-large --init random $COMMON --bf16 --per_device_train_batch_size 16 --max_steps 3 \
    --save_steps 3 --logging_steps 1 --do_train --output_dir "$W/large" --overwrite_output_dir > "$OUT/large.log" 2>&1
echo "train: exit $?"
/usr/bin/time -v ./train_t5 export "$W/large/checkpoint-3" "$W/large_hf" > "$OUT/export.log" 2>&1
echo "export: exit $? $(grep -E "Maximum resident" "$OUT/export.log" | sed 's/^[[:space:]]*//')"
ls -la "$W/large_hf" | tail -n +2 | awk '{print $5, $9}' | tr '\n' ' '; echo
eval ./train_t5 --model "$W/large_hf" $COMMON --per_device_eval_batch_size 32 --n_val 200 --do_eval \
    --output_dir "$W/large_eval" --overwrite_output_dir > "$OUT/large_eval.log" 2>&1
T5L=$("$PY" -c "import json; print(json.load(open('$W/large_eval/eval_results.json'))['eval_loss'])" 2>&1)
echo "train_t5 eval (fp32): exit $? eval_loss $T5L"
HFL=$("$PY" tools/check_export_eval.py "$W/large_hf" --source data/sample/val.source --target data/sample/val.target \
    --n 200 --batch 32 --prefix "$PREFIX" --max_length 64 2>"$OUT/hf_eval.err" | tail -1 | awk '{print $2}')
[ -n "$HFL" ] || { echo "check_export_eval failed:"; tail -3 "$OUT/hf_eval.err"; }
echo "RESULT export_eval train_t5=$T5L transformers=$HFL rel=$(awk "BEGIN{d=($T5L-$HFL)/$HFL; print (d<0?-d:d)}" 2>/dev/null)"
