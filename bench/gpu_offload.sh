#!/usr/bin/env bash
# bench/gpu_offload.sh: ZeRO-Offload of the optimizer on one H200, in one call:
#   1. t5-large bf16, stage 2 with and without offload_optimizer, 30 steps of 16 x 128/128:
#      the CPU AdamW (zero/offload.c) against the GPU one, loss by loss;
#   2. t5-3b bf16 under a 24 GiB cap (--max_gpu_memory 24) with gradient checkpointing:
#      stage 2 without offload (the plan refuses it, with the figures), then with
#      configs/ds_config_zero2_offload.json at batch 64, 128 and 160 (8 steps each): peak GPU
#      memory and samples/s.
#   usage (on the GPU machine, repo root): OUT=dir bash bench/gpu_offload.sh
set -u
OUT=${OUT:-/tmp/gpu_offload}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
S=$OUT/offload.log
say() { echo "$*" | tee -a "$S"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi -L 2>&1 | head -1), $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB host"
COMMON="--init random --seed 42 --device cuda --bf16 --tokenizer_name data/sample/spiece.model --data_dir data/sample
  --task translation_en_to_ro --max_source_length 128 --max_target_length 128 --learning_rate 1e-4 --warmup_steps 5
  --logging_steps 1 --do_train --cache_dir /tmp/off_cache --save_strategy no"
run() {  # run <tag> <timeout> <args...>
  local tag=$1 t=$2; shift 2
  timeout "$t" ./train_t5 $COMMON --output_dir "/tmp/off_$tag" "$@" > "/tmp/off_$tag.log" 2>&1
  local rc=$?
  say "$tag rc=$rc :: $(grep -E '^ZeRO stage|error' "/tmp/off_$tag.log" | head -3 | cut -c1-400 | tr '\n' ' ')"
  cat "/tmp/off_$tag.log" >> "$OUT/runs.log"
}
cp configs/ds_config_zero2_offload.json /tmp/off_z2_off.json
python3 - <<'PY'
import json
c = json.load(open("configs/ds_config_zero2_offload.json"))
del c["zero_optimization"]["offload_optimizer"]
json.dump(c, open("/tmp/off_z2.json", "w"), indent=1)
PY
run large_s2 200 --model t5-large --per_device_train_batch_size 16 --max_steps 30 --deepspeed /tmp/off_z2.json
run large_s2_off 300 --model t5-large --per_device_train_batch_size 16 --max_steps 30 --deepspeed /tmp/off_z2_off.json
run 3b_nooff 120 --model t5-3b --per_device_train_batch_size 64 --max_steps 8 --max_gpu_memory 24 \
  --gradient_checkpointing --deepspeed /tmp/off_z2.json
run 3b_off_b64 300 --model t5-3b --per_device_train_batch_size 64 --max_steps 8 --max_gpu_memory 24 \
  --gradient_checkpointing --deepspeed /tmp/off_z2_off.json
run 3b_off_b128 300 --model t5-3b --per_device_train_batch_size 128 --max_steps 8 --max_gpu_memory 24 \
  --gradient_checkpointing --deepspeed /tmp/off_z2_off.json
run 3b_off_b160 300 --model t5-3b --per_device_train_batch_size 160 --max_steps 8 --max_gpu_memory 24 \
  --gradient_checkpointing --deepspeed /tmp/off_z2_off.json
python3 - <<'PY' | tee -a "$S"
import json
def load(tag):
    try:
        st = json.load(open(f"/tmp/off_{tag}/trainer_state.json")); rs = json.load(open(f"/tmp/off_{tag}/train_results.json"))
    except Exception:
        return None
    return [h["loss"] for h in st["log_history"] if "loss" in h], rs
a, b = load("large_s2"), load("large_s2_off")
if a and b:
    worst = max(abs(x - y) / abs(x) for x, y in zip(a[0], b[0]))
    print(f"t5-large stage 2: offload vs GPU AdamW over {len(a[0])} steps: loss {a[0][-1]:.4f} vs {b[0][-1]:.4f}, worst rel diff {worst:.2e}; "
          f"{a[1]['train_samples_per_second']:.1f} vs {b[1]['train_samples_per_second']:.1f} samples/s, "
          f"peak {a[1].get('train_peak_gpu_memory_gib', 0):.2f} vs {b[1].get('train_peak_gpu_memory_gib', 0):.2f} GiB")
for tag in ("3b_off_b64", "3b_off_b128", "3b_off_b160"):
    r = load(tag)
    if r:
        print(f"t5-3b {tag}: {len(r[0])} steps, loss {r[0][0]:.4f} -> {r[0][-1]:.4f}, peak {r[1].get('train_peak_gpu_memory_gib', 0):.2f} GiB, "
              f"{r[1]['train_samples_per_second']:.2f} samples/s ({r[1]['train_runtime']:.1f} s)")
    else:
        print(f"t5-3b {tag}: no result")
PY
grep -E "step [0-9]+/|it/s|s/it" /tmp/off_3b_off_b64.log | tail -2 >> "$S"
