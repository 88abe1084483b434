#!/usr/bin/env bash
# bench/gpu_signals.sh: the stop signal and the best model on the GPU (one call on the H200):
# the tiny fixture model in bf16, at ZeRO stage 0, stage 2 with the optimizer offloaded (the
# update overlapped on a CPU thread: the stop must wait for it) and stage 3:
#   1. a run stopped by SIGTERM in step 3 (T5_TEST_SIGNAL) exits 0 with checkpoint-3, and the
#      same command resumes it to the model.safetensors of an uninterrupted run, byte for byte;
#   2. --load_best_model_at_end --save_total_limit 1 (--greater_is_better: the best is an early
#      step): the final model.safetensors is the best checkpoint's, the only one left.
# Prints OK / NOT OK per check and "N passed, M failed".
#   usage (GPU machine, repo root, ./train_t5 built with CUDA): bash bench/gpu_signals.sh
set -u
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
T=$(mktemp -d /tmp/t5_gpu_signals.XXXXXX)
pass=0; fail=0
ok() { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }
mkdir -p "$T/data"
cp tests/fixtures/trainer_data/train.* "$T/data/"
head -n 8 tests/fixtures/trainer_data/train.source > "$T/data/val.source"
head -n 8 tests/fixtures/trainer_data/train.target > "$T/data/val.target"
F=(--device cuda --bf16 --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model
   --data_dir "$T/data" --per_device_train_batch_size 8 --logging_steps 1 --do_train --disable_tqdm
   --learning_rate 3e-3 --cache_dir "$T/cache" --max_steps 6)
nvidia-smi -L | head -1
for cfg in none configs/ds_config_zero2_offload.json configs/ds_config_zero3.json; do
  name=$(basename "$cfg" .json)
  DS=(); [ "$cfg" != none ] && DS=(--deepspeed "$cfg")
  ./train_t5 "${F[@]}" "${DS[@]}" --output_dir "$T/ref_$name" > "$T/ref_$name.log" 2>&1 \
    && ok "$name: uninterrupted run" || { bad "$name: uninterrupted run"; tail -5 "$T/ref_$name.log"; }
  T5_TEST_SIGNAL=step3:TERM ./train_t5 "${F[@]}" "${DS[@]}" --output_dir "$T/stop_$name" > "$T/stop_$name.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && [ -d "$T/stop_$name/checkpoint-3" ] && grep -q "stopped by SIGTERM" "$T/stop_$name.log" \
    && ok "$name: SIGTERM in step 3: exit 0, checkpoint-3" || { bad "$name: stop rc=$rc"; tail -5 "$T/stop_$name.log"; }
  ./train_t5 "${F[@]}" "${DS[@]}" --output_dir "$T/stop_$name" > "$T/resume_$name.log" 2>&1 \
    && grep -q "Checkpoint detected" "$T/resume_$name.log" && ok "$name: the same command resumes" \
    || { bad "$name: resume"; tail -5 "$T/resume_$name.log"; }
  cmp -s "$T/ref_$name/model.safetensors" "$T/stop_$name/model.safetensors" \
    && ok "$name: resumed model.safetensors = uninterrupted, byte for byte" || bad "$name: resumed model differs"
  ./train_t5 "${F[@]}" "${DS[@]}" --output_dir "$T/best_$name" --eval_strategy steps --eval_steps 1 --save_steps 1 \
    --save_total_limit 1 --metric_for_best_model loss --greater_is_better --load_best_model_at_end --do_eval \
    > "$T/best_$name.log" 2>&1 || { bad "$name: best run"; tail -5 "$T/best_$name.log"; }
  left=$(cd "$T/best_$name" && ls -d checkpoint-* 2>/dev/null | tr '\n' ' ')
  grep -q "Loading best model from" "$T/best_$name.log" && [ -n "$left" ] && [ "$(echo $left | wc -w)" -eq 1 ] \
    && cmp -s "$T/best_$name/model.safetensors" "$T/best_$name/${left% }/model.safetensors" \
    && ok "$name: --load_best_model_at_end: final model = $left(the one left)" || bad "$name: best model (left: $left)"
done
rm -rf "$T"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
