#!/usr/bin/env bash
# bench/compare_eval.sh: evaluation with generation gives the same predictions from two binaries
# (OLD, NEW) on the GPU machine, and how long each took and how much GPU memory it held: an
# evaluation-only run (--do_eval --do_predict --predict_with_generate, 4 beams) of t5-large bf16,
# random init, on the first N_EVAL shipped validation/test pairs.
#   usage (repo root, GPU machine): OLD=path NEW=./train_t5 [N_EVAL=64] OUT=dir bash bench/compare_eval.sh
set -u
OLD=${OLD:?OLD=path of the binary before the change}; NEW=${NEW:-./train_t5}; N=${N_EVAL:-64}
OUT=${OUT:-/tmp/compare_eval}; mkdir -p "$OUT"; W=/tmp/compare_eval_work; mkdir -p $W
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
C="--model t5-large --init random --seed 42 --bf16 --tokenizer_name data/sample/spiece.model --data_dir data/sample
  --task translation_en_to_ro --max_source_length 128 --max_target_length 64 --per_device_eval_batch_size 32
  --do_eval --do_predict --predict_with_generate --generation_num_beams 4 --n_val $N --n_test $N
  --cache_dir $W/cache --overwrite_output_dir"
for tag in old new; do
  bin=$OLD; [ $tag = new ] && bin=$NEW
  t0=$(date +%s.%N)
  timeout 250 "$bin" $C --output_dir $W/$tag > $W/$tag.log 2>&1; rc=$?
  t1=$(date +%s.%N)
  cat $W/$tag.log >> "$OUT/eval_runs.log"
  python3 - "$tag" "$rc" "$t0" "$t1" "$W/$tag" <<'PY' | tee -a "$OUT/compare_eval.log"
import json, os, sys
tag, rc, t0, t1, d = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
r = {}
p = os.path.join(d, "all_results.json")
if os.path.exists(p): r = json.load(open(p))
keys = ["eval_loss", "eval_bleu", "eval_runtime", "predict_runtime", "eval_peak_gpu_memory_gib", "predict_peak_gpu_memory_gib"]
print(f"{tag}: rc {rc}, wall {t1 - t0:.1f} s; " + ", ".join(f"{k} {r[k]}" for k in keys if k in r))
PY
done
if cmp -s $W/old/generated_predictions.txt $W/new/generated_predictions.txt; then
  echo "predictions: identical ($(wc -l < $W/new/generated_predictions.txt) lines)" | tee -a "$OUT/compare_eval.log"
else
  echo "predictions: DIFFER" | tee -a "$OUT/compare_eval.log"
fi
grep -hE "^ZeRO|memory plan|NOTICE: .*(optimizer|inference|evaluation)" $W/new.log | head -5 | cut -c1-300 | tee -a "$OUT/compare_eval.log"
