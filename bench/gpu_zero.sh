#!/usr/bin/env bash
# bench/gpu_zero.sh: the ZeRO issue's single-GPU acceptance on one H200, in one call:
#   1. the CUDA model test (model/t5.c now finds tensors through units);
#   2. t5-large (random init, seed 42) bf16, ZeRO stages 0-3 at world size 1, all through the
#      NCCL path (a one-rank communicator; stages 2-3 reduce-scatter and gather per unit),
#      the same 60 steps of 16 x 128/128 en-ro examples: per-step losses of each stage
#      against stage 0, peak GPU memory and samples/s per stage;
#   3. the same for fp16 (dynamic loss scaling) at stages 0 and 3.
# Stage configs are configs/ds_config_zero3.json with only "stage" changed, so everything
# else (scheduler, buckets, auto values) is the same for every stage.
#   usage (on the GPU machine, repo root): OUT=dir bash bench/gpu_zero.sh
set -u
OUT=${OUT:-/tmp/gpu_zero}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
S=$OUT/zero.log
say() { echo "$*" | tee -a "$S"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi -L 2>&1 | head -1)"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  T5_TEST_NO_PERF=1 timeout 150 build/tests-gpu/test_cuda_model > "$OUT/test_cuda_model.log" 2>&1
  say "test_cuda_model rc=$? :: $(grep -E 'passed, [0-9]+ failed' "$OUT/test_cuda_model.log" | tail -1)"
  grep "NOT OK" "$OUT/test_cuda_model.log" | head | tee -a "$S"
fi
run() {  # run <tag> <stage> <precision flag> [sed expression for the config]
  sed -e "s/\"stage\": 3/\"stage\": $2/" -e "${4:-s/x/x/}" configs/ds_config_zero3.json > "/tmp/zero_$1.json"
  timeout 240 ./train_t5 --model t5-large --init random --seed 42 --device cuda $3 \
    --deepspeed "/tmp/zero_$1.json" --tokenizer_name data/sample/spiece.model --data_dir data/sample \
    --task translation_en_to_ro --max_source_length 128 --max_target_length 128 \
    --per_device_train_batch_size 16 --learning_rate 1e-4 --warmup_steps 5 --max_steps 60 --logging_steps 1 \
    --do_train --output_dir "/tmp/zero_$1" --cache_dir /tmp/zero_cache --save_strategy no > "/tmp/zero_$1.log" 2>&1
  say "$1 rc=$? :: $(grep -E '^ZeRO stage|error' "/tmp/zero_$1.log" | head -2 | tr '\n' ' ')"
  cat "/tmp/zero_$1.log" >> "$OUT/runs.log"
}
# --num_gpus 1: the launcher re-executes the binary as rank 0 of 1 (TCP rendezvous not needed)
timeout 120 ./train_t5 --num_gpus 1 --model t5-small --init random --device cuda --bf16 \
  --deepspeed configs/ds_config_zero2.json --tokenizer_name data/sample/spiece.model --data_dir data/sample \
  --task translation_en_to_ro --per_device_train_batch_size 8 --max_steps 5 --logging_steps 1 --do_train \
  --output_dir /tmp/zero_numgpus --cache_dir /tmp/zero_cache --save_strategy no > "$OUT/num_gpus.log" 2>&1
say "num_gpus 1 rc=$? :: $(grep -E '^ZeRO stage|error|train_loss' "$OUT/num_gpus.log" | tr '\n' ' ')"
for s in 0 1 2 3; do run bf16_s$s $s --bf16; done
for s in 0 3; do run fp16_s$s $s --fp16; done
# stages 2-3 without overlap_comm and prefetch: what the second stream buys on one GPU
run bf16_s2_sync 2 --bf16 's/"overlap_comm": true/"overlap_comm": false/'
run bf16_s3_sync 3 --bf16 's/"overlap_comm": true/"overlap_comm": false/; s/"stage3_prefetch_bucket_size": "auto"/"stage3_prefetch_bucket_size": 0/'
python3 - "$OUT" <<'PY' | tee -a "$S"
import json, sys, os
out = sys.argv[1]
def load(tag):
    try:
        st = json.load(open(f"/tmp/zero_{tag}/trainer_state.json")); rs = json.load(open(f"/tmp/zero_{tag}/train_results.json"))
    except Exception as e:
        return None
    losses = [h["loss"] for h in st["log_history"] if "loss" in h]
    return losses, rs
for prec, stages in (("bf16", ("0", "1", "2", "3", "2_sync", "3_sync")), ("fp16", ("0", "3"))):
    ref = load(f"{prec}_s0")
    for s in stages:
        r = load(f"{prec}_s{s}")
        if not r or not ref:
            print(f"{prec} stage {s}: no result"); continue
        worst = max(abs(a - b) / abs(b) for a, b in zip(r[0], ref[0]))
        print(f"{prec} stage {s}: {len(r[0])} steps, loss {r[0][0]:.4f} -> {r[0][-1]:.4f}, worst rel diff vs stage 0 "
              f"{worst:.2e}, peak {r[1].get('train_peak_gpu_memory_gib', float('nan')):.2f} GiB, "
              f"{r[1]['train_samples_per_second']:.1f} samples/s")
PY
