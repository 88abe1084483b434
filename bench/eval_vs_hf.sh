#!/usr/bin/env bash
# bench/eval_vs_hf.sh: evaluation with generation, train_t5 against HF generate in one call on
# the same GPU (issues 15, 38): t5-large random init, the first N (500) shipped validation
# sources, batch 64, up to 128 tokens, the SAME weights for both (HF's random init saved once
# with --save, then loaded by HF --load DIR and train_t5 --model DIR), so both generate the same
# tokens and run the same number of steps. Both read the same sources: train_t5's --task
# translation_en_to_ro puts T5's prefix "translate English to Romanian: " before each, and
# hf_generate.py gets it as --source-prefix (without it the two models see different inputs,
# and no prediction can be expected to agree). Three searches:
#   bf16 4 beams, bf16 greedy: the speed (the acceptance: 4 beams >= 10x HF generate)
#   fp32 4 beams:              the outputs (identical predictions expected)
#   HF:       bench/hf_generate.py (model in the run's dtype, generate() only, warm-up batch
#             untimed; writes its decoded predictions)
#   train_t5: an evaluation run (--do_eval --predict_with_generate): eval_runtime covers the eval
#             loss pass too, and the decode of the predictions and BLEU; then --do_predict on the
#             same sources (a data dir whose test split is the validation files) writes
#             generated_predictions.txt, compared line for line with HF's. With PROFILE=1 (the
#             default) T5_EVAL_PROFILE=1 prints where the evaluation's time went into the logs
#             (one wait per decoder step, where the read-back waits anyway; the table below
#             copies the profile of the first run, bf16 4 beams).
# Prints one table: seconds, samples/s, gen_len (run_translation's: mean non-pad ids a row), peak
# GPU memory, ours / HF; then per precision the count of identical predictions out of N and the
# gen_len of each with their relative difference (the acceptance: identical in fp32, bf16 gen_len
# within 1%).
#   usage (repo root, GPU machine, after make): [N=500] [OUT=dir] [PROFILE=1] bash bench/eval_vs_hf.sh
#   a CPU smoke run of the script itself (tiny model, minutes):
#     N=4 B=2 L=8 DEV=cpu HF_MODEL=--tiny RUNS=fp32:4 bash bench/eval_vs_hf.sh
#   (RUNS: the runs, PRECISION:BEAMS; the first one's memory plan and profile end the table)
# MODEL_DIR=DIR: every search on that Hugging Face directory (e.g. a train_t5 output_dir) instead
#   of the saved random init.
# HF_SELF=1: one more HF run, fp32 4 beams with torch's GEMMs on cuBLASLt instead of cuBLAS
#   (hf_generate.py --blas cublaslt), compared line by line with HF's own run: how many
#   predictions survive a change of GEMM kernels alone, i.e. rounding (what "identical" can mean
#   on these weights: near-tied beams flip on rounding differences).
set -u
N=${N:-500}; B=${B:-64}; L=${L:-128}; DEV=${DEV:-cuda}; HF_MODEL=${HF_MODEL:---model t5-large}
PROFILE=${PROFILE:-1}; RUNS=${RUNS:-bf16:4 bf16:1 fp32:4}; FIRST=${RUNS%% *}; FIRST=${FIRST%:*}_beams${FIRST#*:}
OUT=${OUT:-/tmp/eval_vs_hf}; mkdir -p "$OUT"; W=/tmp/eval_vs_hf_work; rm -rf $W; mkdir -p $W/data
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
M=${MODEL_DIR:-$W/t5-random}
PREFIX="translate English to Romanian: "  # what --task translation_en_to_ro prepends (data/splits.c)
# the test split is the validation files: --do_predict writes the predictions of the very sources
# --do_eval (and HF) generate for
for s in source target; do
  ln -s "$PWD/data/sample/train.$s" $W/data/train.$s
  ln -s "$PWD/data/sample/val.$s" $W/data/val.$s
  ln -s "$PWD/data/sample/val.$s" $W/data/test.$s
done
C="--model $M --device $DEV --tokenizer_name data/sample/spiece.model --data_dir $W/data
  --task translation_en_to_ro --max_source_length 128 --max_target_length 128 --generation_max_length $L
  --per_device_eval_batch_size $B --do_eval --predict_with_generate --n_val $N --cache_dir $W/cache
  --overwrite_output_dir"
: > "$OUT/eval_vs_hf.rows"
for run in $RUNS; do
  prec=${run%:*}; beams=${run#*:}; tag=${prec}_beams$beams
  src="--save $M"; [ -f $M/config.json ] && src="--load $M"
  timeout 300 python3 bench/hf_generate.py $HF_MODEL --device $DEV --precision $prec --n "$N" --batch $B \
    --beams $beams --max-length $L $src --source-prefix "$PREFIX" --predictions "$OUT/hf_$tag.txt" > "$OUT/hf_$tag.log" 2>&1
  grep '^RESULT' "$OUT/hf_$tag.log" | sed "s/^RESULT /hf prec=$prec beams=$beams /" >> "$OUT/eval_vs_hf.rows" \
    || { echo "HF $tag failed:"; tail -5 "$OUT/hf_$tag.log"; }
  flag=; [ $prec = bf16 ] && flag=--bf16
  pred=; [ $beams = 4 ] && pred="--do_predict --n_test $N"  # the comparisons are of the 4-beam runs
  prof=; [ "$PROFILE" = 1 ] && prof="T5_EVAL_PROFILE=1"
  env $prof timeout 300 ./train_t5 $C $flag $pred --generation_num_beams $beams --output_dir $W/ours_$tag \
    > "$OUT/ours_$tag.log" 2>&1
  echo "rc $? $tag" >> "$OUT/ours_$tag.log"
  [ -f $W/ours_$tag/generated_predictions.txt ] && cp $W/ours_$tag/generated_predictions.txt "$OUT/ours_$tag.txt"
  python3 - "$W/ours_$tag/all_results.json" $prec $beams >> "$OUT/eval_vs_hf.rows" <<'PY' || tail -5 "$OUT/ours_$tag.log"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"ours prec={sys.argv[2]} beams={sys.argv[3]} seconds={r['eval_runtime']:.3f} "
      f"samples_per_s={r['eval_samples_per_second']:.2f} metric_gen_len={r['eval_gen_len']} "
      f"peak_gib={r.get('eval_peak_gpu_memory_gib', 0):.2f} bleu={r['eval_bleu']}")
PY
done
if [ "${HF_SELF:-0}" = 1 ]; then
  timeout 300 python3 bench/hf_generate.py $HF_MODEL --device $DEV --precision fp32 --n "$N" --batch $B --blas cublaslt \
    --beams 4 --max-length $L --load $M --source-prefix "$PREFIX" --predictions "$OUT/hf_fp32_beams4_lt.txt" > "$OUT/hf_fp32_beams4_lt.log" 2>&1 \
    || { echo "HF fp32 on cuBLASLt failed:"; tail -5 "$OUT/hf_fp32_beams4_lt.log"; }
fi
python3 - "$OUT" "$N" <<'PY' | tee "$OUT/eval_vs_hf.txt"
import os, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = {}
for line in open(os.path.join(out, "eval_vs_hf.rows")):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[1:] if "=" in x)
    rows[(f[0], kv["prec"], kv["beams"])] = kv
print(f"{'search':14} {'impl':9} {'seconds':>8} {'samples/s':>10} {'gen_len':>8} {'peak GiB':>9}   ours/HF")
for prec, beams in (("bf16", "4"), ("bf16", "1"), ("fp32", "4")):
    hf, us = rows.get(("hf", prec, beams)), rows.get(("ours", prec, beams))
    for name, r in (("HF", hf), ("train_t5", us)):
        if r:
            print(f"{prec + ' beams ' + beams:14} {name:9} {float(r['seconds']):8.2f} {float(r['samples_per_s']):10.2f} "
                  f"{float(r['metric_gen_len']):8.2f} {float(r['peak_gib']):9.2f}")
    if hf and us:
        ratio = float(us["samples_per_s"]) / float(hf["samples_per_s"])
        verdict = (" PASS" if ratio >= 10 else " FAIL") + " (>= 10x HF generate)" if (prec, beams) == ("bf16", "4") else ""
        print(f"{'':14} ratio {ratio:.2f}x{verdict}")
print("same weights, 4 beams: predictions and gen_len, train_t5 against HF generate")
for prec in ("bf16", "fp32"):
    tag = f"{prec}_beams4"
    try:
        a = open(os.path.join(out, f"ours_{tag}.txt"), encoding="utf-8").read().split("\n")[:n]
        b = open(os.path.join(out, f"hf_{tag}.txt"), encoding="utf-8").read().split("\n")[:n]
    except OSError as e:
        print(f"{prec}: no predictions to compare ({e})")
        continue
    same = sum(x == y for x, y in zip(a, b))
    hf, us = rows.get(("hf", prec, "4")), rows.get(("ours", prec, "4"))
    line = f"{prec}: identical predictions {same} of {n}"
    if hf and us:
        g_hf, g_us = float(hf["metric_gen_len"]), float(us["metric_gen_len"])
        rel = abs(g_us - g_hf) / g_hf if g_hf else float("inf")
        line += f"; gen_len ours {g_us:.4f}, HF {g_hf:.4f}, relative difference {rel:.2e}"
        if prec == "bf16":
            line += " PASS (within 1%)" if rel <= 0.01 else " FAIL (over 1%)"
    if prec == "fp32":
        line += " PASS (all identical)" if same == n else " FAIL (not all identical)"
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is not None:
        line += f"; first difference at line {first + 1}"
    print(line)
lt = os.path.join(out, "hf_fp32_beams4_lt.txt")
if os.path.exists(lt):
    try:
        a = open(lt, encoding="utf-8").read().split("\n")[:n]
        b = open(os.path.join(out, "hf_fp32_beams4.txt"), encoding="utf-8").read().split("\n")[:n]
        print(f"fp32, HF on cuBLASLt against HF on cuBLAS (rounding alone): identical predictions "
              f"{sum(x == y for x, y in zip(a, b))} of {n}")
    except OSError as e:
        print(f"HF self-comparison: {e}")
PY
grep -h "memory plan" "$OUT/ours_$FIRST.log" | head -1 | tee -a "$OUT/eval_vs_hf.txt"
grep -h "profile\|time (rank 0" "$OUT/ours_$FIRST.log" | tee -a "$OUT/eval_vs_hf.txt"
