#!/usr/bin/env bash
# bench/gpu_targets.sh: issue 34's GPU checks in one call (one GPU; docs/CUDA.md "GPUs").
#  1. An Ampere build (make CUDA_ARCH=80: an sm_80 cubin and compute_80 PTX, no sm_90 code) on
#     this GPU: a cubin never crosses a major version, so a Hopper GPU runs that build from its
#     compute_80 PTX, JIT-compiled by the driver -- the code the Ampere path compiles (every
#     __CUDA_ARCH__ test at 800). The three GPU tests with it, then bench t5-large bf16 B=64
#     with it and with the default build (sm_90 cubin).
#  2. A build of sm_80 cubins only (CUDA_PTX empty) on this GPU: refused at start-up in one line.
#  3. The test hook: T5_TEST_COMPUTE_CAPABILITY=7.5 refuses bf16 and TF32, =6.1 refuses to start
#     (the training run and bench, before anything loads).
#  4. --tf32: bench t5-large fp32 B=16 with and without it, and the per-step losses of 20 training
#     steps of each (same seed, data and dropout): the largest relative difference.
#  5. The dry-run fixtures of tests/post_dry_runs.sh, made with this GPU visible.
# Binaries come built (a GPU machine may lack the headers): ./train_t5 (default targets),
# $T5_SM80 (dir with train_t5 and tests-gpu/ of CUDA_ARCH=80), $T5_SM80C (train_t5 of CUDA_ARCH=80
# CUDA_PTX=). Usage: OUT=dir T5_SM80=... T5_SM80C=... bash bench/gpu_targets.sh
set -u
OUT=${OUT:?set OUT}; S=$OUT/summary.txt; : > "$S"
SM80=${T5_SM80:?}; SM80C=${T5_SM80C:?}
say() { echo "$*" | tee -a "$S"; }
nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader | sed 's/^/GPU: /' | tee -a "$S"
say "builds: default $(stat -c %s ./train_t5) bytes, CUDA_ARCH=80 $(stat -c %s "$SM80/train_t5"), sm_80 cubins only $(stat -c %s "$SM80C/train_t5")"

# 1. the Ampere build's GPU tests
for t in test_backend_ops test_cuda_model test_cuda_generate; do
    start=$(date +%s)
    T5_TEST_NO_PERF=1 timeout 300 "$SM80/tests-gpu/$t" > "$OUT/sm80_$t.log" 2>&1; rc=$?
    say "CUDA_ARCH=80 $t: rc $rc, $(tail -n 1 "$OUT/sm80_$t.log") ($(( $(date +%s) - start )) s)"
    grep "NOT OK" "$OUT/sm80_$t.log" | head -n 5 | tee -a "$S"
done
bench() {  # LABEL BINARY ARGS...: one bench run, its RESULT line
    local label=$1 bin=$2; shift 2
    timeout 200 "$bin" bench "$@" > "$OUT/bench_$label.log" 2>&1; local rc=$?
    say "$label: rc $rc: $(grep -E '^RESULT|^error' "$OUT/bench_$label.log" | tail -n 1)"
}
bench default_bf16_b64 ./train_t5 --model t5-large --batch 64 --bf16 --steps 20 --warmup 5
bench sm80_bf16_b64 "$SM80/train_t5" --model t5-large --batch 64 --bf16 --steps 20 --warmup 5
bench default_bf16_b64_again ./train_t5 --model t5-large --batch 64 --bf16 --steps 20 --warmup 5

# 2. sm_80 cubins only on a 9.0 GPU
out=$("$SM80C/train_t5" bench --model t5-small --batch 2 --steps 1 --warmup 0 2>&1); rc=$?
say "sm_80 cubins only: rc $rc, $(grep -c '' <<< "$out") line(s): $out"

# 3. the test hook, through the trainer (a real run, not --explain) and bench
RUN=(--model t5-small --init random --tokenizer_name data/sample/spiece.model --data_dir data/sample
     --task translation_en_to_ro --do_train --max_steps 2 --per_device_train_batch_size 4 --output_dir /tmp/o_hook
     --overwrite_output_dir --cache_dir /tmp/cache --device cuda)
for c in "7.5 --bf16" "7.5 --tf32" "6.1 --fp16" "8.6 --bf16"; do
    set -- $c
    out=$(T5_TEST_COMPUTE_CAPABILITY=$1 timeout 120 ./train_t5 "${RUN[@]}" "$2" 2>&1); rc=$?
    say "hook $1 $2: rc $rc: $(grep -E '^error' <<< "$out" || tail -n 1 <<< "$out")"
done
out=$(T5_TEST_COMPUTE_CAPABILITY=7.5 ./train_t5 bench --model t5-small --batch 2 --steps 1 --bf16 2>&1); rc=$?
say "hook 7.5 bench --bf16: rc $rc: $out"

# 4. --tf32: speed and the 20-step losses
bench fp32_b16 ./train_t5 --model t5-large --batch 16 --steps 20 --warmup 5
bench tf32_b16 ./train_t5 --model t5-large --batch 16 --steps 20 --warmup 5 --tf32
TRAIN=(--model t5-large --init random --seed 42 --tokenizer_name data/sample/spiece.model --data_dir data/sample
       --task translation_en_to_ro --max_source_length 128 --max_target_length 128 --do_train --max_steps 20
       --per_device_train_batch_size 16 --learning_rate 1e-4 --logging_steps 1 --save_strategy no
       --sampler sequential --cache_dir /tmp/cache --overwrite_output_dir --device cuda)
timeout 200 ./train_t5 "${TRAIN[@]}" --output_dir /tmp/o_fp32 > "$OUT/train_fp32.log" 2>&1; say "train fp32: rc $?"
timeout 200 ./train_t5 "${TRAIN[@]}" --output_dir /tmp/o_tf32 --tf32 > "$OUT/train_tf32.log" 2>&1; say "train tf32: rc $?"
python3 - /tmp/o_fp32/trainer_state.json /tmp/o_tf32/trainer_state.json <<'PY' | tee -a "$S"
import json, sys
a, b = ([e["loss"] for e in json.load(open(p))["log_history"] if "loss" in e] for p in sys.argv[1:3])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"20-step losses, fp32 vs --tf32: {len(a)} and {len(b)} steps, first {a[0]:.6f} / {b[0]:.6f}, "
      f"last {a[-1]:.6f} / {b[-1]:.6f}, worst relative difference {worst:.2e} (acceptance: <= 1e-3)")
PY

# 5. the dry-run fixtures, made where a GPU is visible
bash tests/post_dry_runs.sh --write /tmp/dryfix > "$OUT/post_dry_runs.log" 2>&1
say "post_dry_runs --write: $(tail -n 1 "$OUT/post_dry_runs.log")"
tar -C /tmp -czf "$OUT/post_dry_runs.tgz" dryfix
cat "$S"
