#!/usr/bin/env bash
# bench/post_rows.sh: the 2021 post's rows as docs/POST.md writes them ("The same runs with
# train_t5"), run on the GPU machine; one line per row: exit status, train and eval seconds,
# samples/s and the peak GPU memory, or the error. Rows 1-6 need 2 GPUs (--num_gpus 2), rows 7-8
# one. The commands here and in docs/POST.md are the same text: keep them in step.
#   usage (repo root, GPU machine): OUT=dir [ROWS="7 8"] bash bench/post_rows.sh
#   ROWS defaults to every row the visible GPUs can run.
set -u
OUT=${OUT:-/tmp/post_rows}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
NG=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$NG" -ge 1 ] || { echo "no GPU visible: this script runs on the GPU machine"; exit 1; }
if [ "$NG" -ge 2 ]; then ROWS=${ROWS:-1 2 3 4 5 6 7 8}; else ROWS=${ROWS:-7 8}; fi
W=${POST_WORKDIR:-/tmp/post}; mkdir -p "$W"
S=$OUT/post_rows.log
say() { echo "$*" | tee -a "$S"; }

POST="--init random --tokenizer_name data/sample/spiece.model --data_dir data/sample \
  --task translation_en_to_ro --do_train --do_eval --predict_with_generate --generation_num_beams 4 \
  --label_smoothing 0.1 --learning_rate 3e-5 --max_source_length 128 --max_target_length 128 \
  --num_train_epochs 1 --freeze_embeds --sortish_sampler --device cuda --max_gpu_memory 24 \
  --overwrite_output_dir"
FLAGS="--adam_eps 1e-06 --warmup_steps 5"
LARGE="--model t5-large --n_train 2000 --n_val 500"
T3B="--model t5-3b --n_train 60 --n_val 10"
bs() { echo "--per_device_train_batch_size $1 --per_device_eval_batch_size $1"; }
row() {
  case $1 in
  1) echo "$LARGE $POST $FLAGS --num_gpus 2 $(bs 16) --output_dir $W/post1_ddp" ;;
  2) echo "$LARGE $POST $FLAGS --num_gpus 2 $(bs 20) --fp16 --output_dir $W/post2_fp16" ;;
  3) echo "$LARGE $POST $FLAGS --num_gpus 2 $(bs 30) --sharded_ddp --output_dir $W/post3_sharded" ;;
  4) echo "$LARGE $POST $FLAGS --num_gpus 2 $(bs 30) --sharded_ddp --fp16 --output_dir $W/post4_sharded_fp16" ;;
  5) echo "$LARGE $POST --num_gpus 2 $(bs 40) --deepspeed configs/ds_config_no_offload.json --output_dir $W/post5_deepspeed" ;;
  6) echo "$LARGE $POST --num_gpus 2 $(bs 50) --deepspeed configs/ds_config.json --output_dir $W/post6_deepspeed_offload" ;;
  7) echo "$T3B $POST $FLAGS $(bs 1) --fp16 --output_dir $W/post7_t5-3b" ;;
  8) echo "$T3B $POST $(bs 20) --deepspeed configs/ds_config_1gpu.json --output_dir $W/post8_t5-3b_offload" ;;
  esac
}
say "== post rows [$ROWS] on $NG GPU(s), $(date -u +%FT%TZ)"
for r in $ROWS; do
  log=$W/row$r.log
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  timeout ${POST_TIMEOUT:-300} ./train_t5 $(row $r) > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  dir=$(row $r | sed 's/.*--output_dir //; s/ .*//')
  res=$(python3 - "$dir/all_results.json" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
print("train %.1f s (%.1f samples/s), eval %.1f s, bleu %s, train peak %.2f GiB" % (r.get("train_runtime", 0),
      r.get("train_samples_per_second", 0), r.get("eval_runtime", 0), r.get("eval_bleu", "n/a"),
      r.get("train_peak_gpu_memory_gib", 0)))
PY
)
  say "row $r: rc $rc, wall $(python3 -c "print(round($t1-$t0,1))") s; ${res:-no all_results.json} :: $(grep -E '^error|HINT' "$log" | head -1 | cut -c1-300)"
  cat "$log" >> "$OUT/post_rows_runs.log"
done
say "== done $(date -u +%FT%TZ)"
