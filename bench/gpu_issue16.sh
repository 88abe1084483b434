#!/usr/bin/env bash
# bench/gpu_issue16.sh: one GPU call of issue 16's loop: the CUDA tests against the CPU
# reference, the attention op's timing, and train_t5 bench at t5-large bf16 B=64 (with the
# per-class profile; then again with --recompute, what keeping the sublayer norms and FFN
# hidden states saves) and B=16, printing the start-up line of each.
#   usage (repo root, GPU machine): GPU_BIN=build/tests-gpu bash bench/gpu_issue16.sh
# GPU_BIN: where the test binaries are (make test-gpu builds them in build/tests-gpu).
set -u
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=${GPU_BIN:-build/tests-gpu}
LOG=${OUT:-/tmp}/gpu_issue16.log
: > "$LOG"
for t in test_backend_ops test_cuda_model test_cuda_generate; do
    echo "== $t" >> "$LOG"
    T5_TEST_NO_PERF=1 timeout 240 "$BIN/$t" >> "$LOG" 2>&1
    echo "$t rc $?: $(tail -1 "$LOG")"
done
echo "== perf" >> "$LOG"
timeout 120 "$BIN/test_backend_ops_perf" >> "$LOG" 2>&1
grep -i "attention" "$LOG" | grep -i perf | head -12
for B in 64 16; do
    P=""; [ "$B" = 64 ] && P="--profile 3"
    echo "== bench B=$B" >> "$LOG"
    timeout 150 ./train_t5 bench --model t5-large --bf16 --batch $B $P >> "$LOG" 2>&1
    grep -E "^start-up|^RESULT|ms/step" "$LOG" | tail -3
done
sed -n '/== bench B=64/,/== bench B=16/p' "$LOG" | grep -vE "^RESULT|^start-up" | tail -45
echo "== bench B=64 --recompute" >> "$LOG"
timeout 150 ./train_t5 bench --model t5-large --bf16 --batch 64 --recompute >> "$LOG" 2>&1
grep -E "^activations|^RESULT" "$LOG" | tail -2
echo "== fp16 B=64" >> "$LOG"
timeout 150 ./train_t5 bench --model t5-large --fp16 --batch 64 >> "$LOG" 2>&1
grep -E "^RESULT" "$LOG" | tail -1
for gc in "" "--gradient_checkpointing"; do
    echo "== cap 24 GiB fp16 $gc" >> "$LOG"
    timeout 200 ./train_t5 bench --model t5-large --fp16 --find_max_batch --max_gpu_memory 24 $gc --steps 5 --warmup 2 >> "$LOG" 2>&1
    grep -E "^largest batch|^RESULT" "$LOG" | tail -2
done
