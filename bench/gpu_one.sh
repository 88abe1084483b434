#!/usr/bin/env bash
# bench/gpu_one.sh: a one-GPU check of the two-GPU issue's code before the 2-GPU machine
# (nvidia-h200): everything here runs at world size 1 through NCCL, so it checks the CUDA
# paths that do not need a second GPU:
#   1. the CUDA model test (model/t5.c recomputes the sublayer norms in backward);
#   2. `train_t5 bench`, t5-large bf16, stages 0-3 at 64 and stage 3 at 16: samples/s, peak,
#      the last loss (equal at every stage: one rank's partition is the whole model) and the
#      stage-3 fetch statistics (the learned prefetch on the GPU's communication stream);
#   3. evaluation alone at stage 3 (weights gathered per unit), t5-large bf16, 500 pairs,
#      4 beams, batch 64: runtime;
#   4. bench/ds_baseline.py on one GPU at stages 2 and 3, 16 per GPU (the DeepSpeed install,
#      FusedAdam's JIT build, zero.Init on the GPU).
#   usage (repo root, GPU machine): OUT=dir bash bench/gpu_one.sh
set -u
OUT=${OUT:-/tmp/gpu_one}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=/tmp/t5_torch_extensions
echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset}"
S=$OUT/one.log; W=/tmp/one; mkdir -p $W
say() { echo "$*" | tee -a "$S"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi -L 2>&1 | head -1)"
for st in 0 1 2; do sed "s/\"stage\": 2/\"stage\": $st/" configs/ds_config_zero2.json > $W/s$st.json; done
cp configs/ds_config_zero3.json $W/s3.json
python3 -c "import json; c = json.load(open('configs/ds_config_zero3.json')); del c['scheduler']; json.dump(c, open('$W/s3_eval.json', 'w'))"
(python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > $W/pip.log 2>&1 || echo "pip failed" >> $W/pip.log) &
PIP=$!
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  T5_TEST_NO_PERF=1 timeout 150 build/tests-gpu/test_cuda_model > $OUT/test_cuda_model.log 2>&1
  say "test_cuda_model rc=$? :: $(grep -E 'passed, [0-9]+ failed' $OUT/test_cuda_model.log | tail -1)"
  grep "NOT OK" $OUT/test_cuda_model.log | head -5 | tee -a "$S"
fi
bench() {  # bench <stage> <batch> [extra]
  timeout 120 ./train_t5 bench --model t5-large --bf16 --batch $2 --seq 128 --steps 20 --warmup 5 --deepspeed $W/s$1.json ${3:-} > $W/b_$1_$2.log 2>&1
  say "bench stage $1 B=$2 ${3:-} rc=$? :: $(grep -E '^last loss|fetches|error' $W/b_$1_$2.log | tr '\n' ' ' | cut -c1-300)"
  grep "^RESULT" $W/b_$1_$2.log | tee -a "$S"
}
for st in 0 1 2 3; do bench $st 64; done
bench 3 16
bench 2 16 --gradient_checkpointing
t0=$(date +%s.%N)
[ "${SKIP_EVAL:-0}" = 1 ] || timeout 200 ./train_t5 --model t5-large --init random --seed 42 --device cuda --bf16 --deepspeed $W/s3_eval.json \
  --tokenizer_name data/sample/spiece.model --data_dir data/sample --task translation_en_to_ro --cache_dir $W/cache \
  --do_eval --n_val 500 --predict_with_generate --generation_num_beams 4 --generation_max_length 128 \
  --max_source_length 128 --max_target_length 128 --per_device_eval_batch_size 64 --output_dir $W/eval > $W/eval.log 2>&1
say "eval stage 3, 1 GPU rc=$? $(python3 -c "print('%.1f s' % ($(date +%s.%N) - $t0))") :: $(grep -E 'eval_loss|eval_runtime|eval_gen_len|error' $W/eval.log | tr -s ' ' | tr '\n' ' ')"
wait $PIP; say "pip: $(cat $W/pip.log | tail -1)"
export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
for st in 2 3; do
  timeout 200 torchrun --standalone --nproc_per_node 1 bench/ds_baseline.py --model t5-large --precision bf16 --batch 16 \
    --seq 128 --steps 10 --warmup 3 --deepspeed $W/s$st.json > $W/ds_$st.log 2>&1
  say "deepspeed stage $st B=16 1 GPU rc=$? :: $(grep -E '^RESULT|Error|error' $W/ds_$st.log | tail -2 | cut -c1-400)"
done
cat $W/*.log > $OUT/all_runs.log 2>/dev/null
say "== done $(date -u +%FT%TZ)"
