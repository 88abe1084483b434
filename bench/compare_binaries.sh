#!/usr/bin/env bash
# bench/compare_binaries.sh: a refactor changes no result and costs no speed. Two train_t5
# binaries (OLD, NEW) on the GPU machine, in one call, interleaved (old, new, old, new) so that
# clock drift hits both: the per-step losses of short t5-large trainings (bf16, ZeRO stages 0, 2,
# 3 and stage 2 with the optimizer offloaded) must be equal, and `train_t5 bench` samples/s at
# B=16 and B=64 (bf16, src = tgt = 128) are printed side by side with the ratio new/old
# (REPS [1] alternating runs each). CONFIGS (the loss runs; empty: none) and BATCHES [16 64] narrow it.
#   usage (repo root, GPU machine): OLD=path/train_t5 NEW=./train_t5 OUT=dir bash bench/compare_binaries.sh
set -u
OLD=${OLD:?OLD=path of the binary before the change}; NEW=${NEW:-./train_t5}
OUT=${OUT:-/tmp/compare}; mkdir -p "$OUT"; W=/tmp/compare_work; mkdir -p $W
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
S=$OUT/compare.log
say() { echo "$*" | tee -a "$S"; }
C="--model t5-large --init random --seed 42 --bf16 --tokenizer_name data/sample/spiece.model --data_dir data/sample
  --task translation_en_to_ro --max_source_length 128 --max_target_length 128 --per_device_train_batch_size 32
  --max_steps 8 --logging_steps 1 --do_train --save_strategy no --cache_dir $W/cache --overwrite_output_dir"
# full precision from trainer_state.json (the console prints HF's 4 digits)
losses() { grep -oE '"(loss|grad_norm)": ?[0-9.e+-]+' "$1/trainer_state.json" | tr '\n' ' '; }
same=0; differ=0
for cfg in ${CONFIGS-none configs/ds_config_zero2.json configs/ds_config_zero3.json configs/ds_config_zero2_offload.json}; do
  ds=""; [ "$cfg" != none ] && ds="--deepspeed $cfg"
  for tag in old new; do
    bin=$OLD; [ $tag = new ] && bin=$NEW
    timeout 200 "$bin" $C $ds --output_dir $W/$tag > $W/train_$tag.log 2>&1
    echo "rc=$?" >> $W/train_$tag.log
    cat $W/train_$tag.log >> "$OUT/train_runs.log"
  done
  lo=$(losses $W/old); ln=$(losses $W/new)
  if [ -n "$lo" ] && [ "$lo" = "$ln" ]; then same=$((same + 1)); say "SAME   losses, $cfg: $lo"
  else differ=$((differ + 1)); say "DIFFER losses, $cfg: old [$lo] new [$ln] :: $(grep -E '^error' $W/train_new.log | head -1)"; fi
done
say "losses: $same configs equal, $differ differ"
for b in ${BATCHES:-16 64}; do
  for rep in $(seq 1 ${REPS:-1}); do
    for tag in old new; do
      bin=$OLD; [ $tag = new ] && bin=$NEW
      r=$(timeout 120 "$bin" bench --model t5-large --init random --batch $b --seq 128 --bf16 --steps 20 --warmup 5 2>&1 | grep RESULT)
      echo "$tag $r" >> "$OUT/bench.log"
      sps=$(grep -oE 'samples_per_s=[0-9.]+' <<< "$r" | cut -d= -f2)
      eval "sps_${tag}_${b}_${rep}=${sps:-0}"
    done
  done
  olds=""; news=""
  for rep in $(seq 1 ${REPS:-1}); do olds="$olds $(eval echo \$sps_old_${b}_$rep)"; news="$news $(eval echo \$sps_new_${b}_$rep)"; done
  python3 - "$b" "$olds" "$news" <<'PY' | tee -a "$S"
import sys
b, olds, news = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
o, n = max(olds), max(news)
print(f"bench bf16 B={b}: old {'/'.join('%.1f' % x for x in olds)}, new {'/'.join('%.1f' % x for x in news)} samples/s; "
      f"best new/old {n / o if o else 0:.3f}")
PY
done
