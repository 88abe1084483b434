#!/usr/bin/env bash
# bench/sub_batch_check.sh: --checkpoint_sub_batch changes where activations are recomputed,
# not what is computed. On the GPU (where the CPU tests cannot look) this trains the same
# random-init model twice on the shipped lines, dropout 0, gradient checkpointing with and
# without windows of SUB rows, and prints each logged loss side by side with the largest
# difference of the final fp32 weights. The GEMMs of a window have fewer rows, so cuBLASLt may
# pick other kernels: expect agreement to rounding (fp32: ~1e-6 relative), not bit for bit.
#   usage (GPU machine, repo root): OUT=dir [SBC_MODEL=t5-base] [SBC_SUB=4] bash bench/sub_batch_check.sh
set -u
OUT=${OUT:-/tmp/sub_batch_check}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MODEL=${SBC_MODEL:-t5-base}; SUB=${SBC_SUB:-4}
for prec in fp32 bf16; do
  pflag=""; [ $prec = bf16 ] && pflag=--bf16
  for sub in 0 "$SUB"; do
    d="$OUT/$prec-sub$sub"
    timeout 200 ./train_t5 --model "$MODEL" --init random --tokenizer_name data/sample/spiece.model \
      --data_dir data/sample --task translation_en_to_ro --max_source_length 64 --max_target_length 64 \
      --per_device_train_batch_size 16 --learning_rate 1e-3 --max_steps 8 --logging_steps 1 --dropout_rate 0 \
      --gradient_checkpointing --checkpoint_sub_batch "$sub" $pflag --do_train --output_dir "$d" \
      --overwrite_output_dir --save_strategy no --report_to none > "$d.log" 2>&1
    echo "$prec sub=$sub exit $?"
  done
done
python3 - "$OUT" "$SUB" <<'PY'
import json, sys
from safetensors.numpy import load_file
o, sub = sys.argv[1], sys.argv[2]
for prec in ("fp32", "bf16"):
    try:
        a = [e["loss"] for e in json.load(open(f"{o}/{prec}-sub0/trainer_state.json"))["log_history"] if "loss" in e]
        b = [e["loss"] for e in json.load(open(f"{o}/{prec}-sub{sub}/trainer_state.json"))["log_history"] if "loss" in e]
        wa, wb = load_file(f"{o}/{prec}-sub0/model.safetensors"), load_file(f"{o}/{prec}-sub{sub}/model.safetensors")
    except Exception as e:
        print(f"RESULT prec={prec} error={type(e).__name__}:{e}"); continue
    dl = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b)) if a and len(a) == len(b) else float("nan")
    dw = max(float(abs(wa[k] - wb[k]).max()) for k in wa)
    print(f"{prec} losses sub=0:   {a}\n{prec} losses sub={sub}: {b}")
    print(f"RESULT prec={prec} steps={len(a)} max_rel_loss_diff={dl:.3g} max_abs_weight_diff={dw:.3g}")
PY
