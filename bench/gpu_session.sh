#!/usr/bin/env bash
# bench/gpu_session.sh: everything that needs the GPU machine, in one call (device time is
# scarce): the CUDA tests (make test-gpu's binaries), train_t5 bleu against sacreBLEU there,
# train_t5 bench for t5-large (bf16/fp16, B=16/64, the 24 GiB cap with and without gradient
# checkpointing) and the HF eager baseline in the same call. Binaries are built on the dev
# machine and carried (.carry/lib holds libcjson and libsentencepiece, absent there).
#   usage (on the GPU machine, repo root): OUT=dir bash bench/gpu_session.sh
set -u
OUT=${OUT:-/tmp/gpu_session}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
BIN=${TRAIN_T5:-./train_t5}
S=$OUT/session.log
say() { echo "$*" | tee -a "$S"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi -L 2>&1 | head -1)"
python3 -c "import sacrebleu, torch, transformers; print('sacrebleu', sacrebleu.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1 | tee -a "$S"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  for t in build/tests-gpu/test_backend_ops build/tests-gpu/test_backend_ops_perf build/tests-gpu/test_cuda_model; do
    [ -x "$t" ] || { say "missing $t"; continue; }
    T5_TEST_NO_PERF=${T5_TEST_NO_PERF:-0} timeout 150 "$t" >"$OUT/$(basename "$t").log" 2>&1
    say "$(basename "$t") rc=$? :: $(grep -E 'passed, [0-9]+ failed' "$OUT/$(basename "$t").log" | tail -1)"
    grep -E "NOT OK|PERF" "$OUT/$(basename "$t").log" | head -25 | tee -a "$S"
  done
fi

if [ "${SKIP_BLEU:-0}" != 1 ]; then
  say "== train_t5 bleu vs sacrebleu (this machine's)"
  python3 tools/check_bleu_sacrebleu.py "$BIN" 2>&1 | tee -a "$S"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  say "== train_t5 bench (t5-large, src=tgt=128, random init)"
  for args in "--batch 16 --bf16" "--batch 64 --bf16" "--batch 16 --fp16" "--batch 64 --fp16"; do
    timeout 100 "$BIN" bench --model t5-large $args --steps 20 --warmup 5 >>"$OUT/bench.log" 2>&1
    say "rc=$? $(grep -E 'RESULT|error' "$OUT/bench.log" | tail -1)"
  done
  say "== 24 GiB cap, fp16"
  timeout 100 "$BIN" bench --model t5-large --fp16 --max_gpu_memory 24 --find_max_batch --steps 10 --warmup 3 >>"$OUT/bench.log" 2>&1
  say "rc=$? $(grep -E 'RESULT|error' "$OUT/bench.log" | tail -1)"
  for b in 128 ${CKPT_MAX:-}; do
    timeout 120 "$BIN" bench --model t5-large --fp16 --max_gpu_memory 24 --gradient_checkpointing --batch $b --steps 8 --warmup 2 >>"$OUT/bench.log" 2>&1
    say "rc=$? $(grep -E 'RESULT|error' "$OUT/bench.log" | tail -1)"
  done
  timeout 150 "$BIN" bench --model t5-large --fp16 --max_gpu_memory 24 --gradient_checkpointing --find_max_batch --steps 4 --warmup 1 >>"$OUT/bench.log" 2>&1
  say "rc=$? $(grep -E 'RESULT|error' "$OUT/bench.log" | tail -1)"
  if [ "${SKIP_HF:-0}" != 1 ]; then
    say "== HF transformers eager, same GPU"
    for b in 16 64; do
      timeout 120 python3 bench/hf_baseline.py --model t5-large --precision bf16 --batch $b --steps 15 --warmup 3 --max-grad-norm 1 >>"$OUT/bench.log" 2>&1
      say "rc=$? $(grep -E 'RESULT|Error' "$OUT/bench.log" | tail -1)"
    done
  fi
fi
say "== done $(date -u +%FT%TZ)"
