#!/usr/bin/env bash
# bench/eval_vs_hf.sh: evaluation with generation, train_t5 against HF generate in one call on
# the same GPU (issue 15): t5-large bf16, random init, the first N (500) shipped validation
# sources, batch 64, up to 128 tokens, 4 beams and greedy, the SAME weights for both (HF's
# random init saved with --save and loaded by train_t5 --model DIR), so both generate the same
# tokens and run the same number of steps.
#   HF:       bench/hf_generate.py (model.to(bfloat16), generate() only, warm-up batch untimed)
#   train_t5: an evaluation-only run (--do_eval --predict_with_generate): eval_runtime covers
#             the eval loss pass too, and the decode of the predictions and BLEU
# Prints one table: seconds, samples/s, mean returned width, peak GPU memory, ours / HF (the
# acceptance: >= 3x for both searches), and train_t5's memory plan line (eval-only).
#   usage (repo root, GPU machine, after make): [N=500] [OUT=dir] bash bench/eval_vs_hf.sh
set -u
N=${N:-500}; OUT=${OUT:-/tmp/eval_vs_hf}; mkdir -p "$OUT"; W=/tmp/eval_vs_hf_work; rm -rf $W; mkdir -p $W
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
M=$W/t5-large-random
C="--model $M --bf16 --tokenizer_name data/sample/spiece.model --data_dir data/sample
  --task translation_en_to_ro --max_source_length 128 --max_target_length 128 --generation_max_length 128
  --per_device_eval_batch_size 64 --do_eval --predict_with_generate --n_val $N --cache_dir $W/cache
  --overwrite_output_dir"
: > "$OUT/eval_vs_hf.rows"
for beams in 4 1; do
  save=; [ -f $M/config.json ] || save="--save $M"
  timeout 300 python3 bench/hf_generate.py --model t5-large --precision bf16 --n "$N" --batch 64 --beams $beams \
    --max-length 128 $save > "$OUT/hf_beams$beams.log" 2>&1
  grep '^RESULT' "$OUT/hf_beams$beams.log" | sed "s/^RESULT /hf beams=$beams /" >> "$OUT/eval_vs_hf.rows" \
    || { echo "HF beams=$beams failed:"; tail -5 "$OUT/hf_beams$beams.log"; }
  timeout 300 ./train_t5 $C --generation_num_beams $beams --output_dir $W/ours$beams > "$OUT/ours_beams$beams.log" 2>&1
  echo "rc $? beams $beams" >> "$OUT/ours_beams$beams.log"
  python3 - "$W/ours$beams/all_results.json" $beams >> "$OUT/eval_vs_hf.rows" <<'PY' || tail -5 "$OUT/ours_beams$beams.log"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"ours beams={sys.argv[2]} seconds={r['eval_runtime']:.3f} samples_per_s={r['eval_samples_per_second']:.2f} "
      f"gen_len={r['eval_gen_len']} peak_gib={r.get('eval_peak_gpu_memory_gib', 0):.2f} bleu={r['eval_bleu']}")
PY
done
python3 - "$OUT/eval_vs_hf.rows" <<'PY' | tee "$OUT/eval_vs_hf.txt"
import sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[1:] if "=" in x)
    rows[(f[0], kv["beams"])] = kv
print(f"{'search':8} {'impl':9} {'seconds':>8} {'samples/s':>10} {'gen_len':>8} {'peak GiB':>9}   ours/HF")
for beams in ("4", "1"):
    hf, us = rows.get(("hf", beams)), rows.get(("ours", beams))
    for name, r in (("HF", hf), ("train_t5", us)):
        if r:
            print(f"{'beams ' + beams:8} {name:9} {float(r['seconds']):8.2f} {float(r['samples_per_s']):10.2f} "
                  f"{float(r['gen_len']):8.2f} {float(r['peak_gib']):9.2f}")
    if hf and us:
        ratio = float(us["samples_per_s"]) / float(hf["samples_per_s"])
        print(f"{'':8} ratio {ratio:.2f}x  {'PASS' if ratio >= 3 else 'FAIL'} (>= 3x HF generate)")
PY
grep -h "memory plan" "$OUT/ours_beams4.log" | head -1 | tee -a "$OUT/eval_vs_hf.txt"
