#!/usr/bin/env bash
# bench/quality_parity.sh: does train_t5 learn as well as HF? (issue 21) One GPU call:
#   1. one random init (t5-small by default, QP_PRESET) saved once as an HF directory;
#   2. train_t5 and HF Seq2SeqTrainer (bench/hf_seq2seq.py, transformers on the GPU machine)
#      fine-tune it with the same flags: data/sample/train.* (3,009 NTREX/FLORES pairs) plus the
#      10,019 Tatoeba pairs (data/sample/extra/), bf16, AdamW lr QP_LR with QP_WARMUP warm-up
#      steps then linear decay, label smoothing 0.1, dropout 0.1 (the config's), batch QP_BATCH,
#      QP_EPOCHS (6) epochs = 2,442 steps at batch 32, random order; eval_loss on newsdev2016 (data/sample/val.*, 1,999
#      pairs) every QP_EVAL_STEPS steps; at the end 4-beam generation of newsdev, BLEU and chrF
#      by sacrebleu for both (the same scorer, the same references);
#   3. HF runs twice, with data-order seeds 1 and 2: the spread of two HF runs is the yardstick
#      for the curves; train_t5 runs with data seed 1 (its sampler is its own, so its order is a
#      third one).
# Prints a table (final eval loss, BLEU, chrF, wall times) and draws both curves with
# `train_t5 plot` into OUT/quality_parity.png.
#   usage (GPU machine, repo root): OUT=dir bash bench/quality_parity.sh
#   With 2 GPUs visible (QP_TWO_GPU=1, the default) train_t5 also runs as ZeRO stage 3 on both,
#   the same global batch (acceptance 2), in the same table and chart.
#   QP_HF_PARALLEL=0 runs the two HF runs one after the other (by default they share the GPU,
#   which the table says: their wall times are then not alone).
#   QP_FP8=1 (issue 38) also trains train_t5 with --fp8 (fp8 GEMMs, bf16 elsewhere) from the same
#   init and data order and compares it with the bf16 run: final eval loss, BLEU, chrF, the curve
#   (both in the chart). QP_HF=0 leaves the HF runs out (the fp8 comparison does not need them).
set -u
OUT=${OUT:-/tmp/quality_parity}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=${PYTHON:-python3}
PRESET=${QP_PRESET:-t5-small}; LR=${QP_LR:-5e-4}
# QP_PRECISION=bf16 (default: HF's bf16=True autocast, train_t5 --bf16) or fp32 (both without;
# HF's TF32 off).
# QP_HF_ATTN: HF's attention, eager (the default here: T5's matmul + softmax) or sdpa
# (transformers 5.17's own default for T5: torch SDPA with the position bias as a float mask whose
# gradient the kernel computes). With sdpa HF's bf16 runs reached a non-finite gradient near step
# 400 in 4 of 5 attempts (bench/hf_nan_probe.py: in the backward); with eager both seeds finished
# (docs/QUALITY.md). The fp32 figures there were taken with sdpa.
PRECISION=${QP_PRECISION:-bf16}; case "$PRECISION" in bf16) PFLAG=--bf16 ;; fp32) PFLAG= ;;
    *) echo "QP_PRECISION=$PRECISION: bf16 or fp32"; exit 2 ;; esac
WARMUP=${QP_WARMUP:-200}; BATCH=${QP_BATCH:-32}
EPOCHS=${QP_EPOCHS:-6}; EVAL_STEPS=${QP_EVAL_STEPS:-250}; BEAMS=4; LEN=128
W=${QP_WORKDIR:-/tmp/qp}; rm -rf "$W"; mkdir -p "$W/data"
TRAIN_SRC="data/sample/train.source data/sample/extra/tatoeba.source"
TRAIN_TGT="data/sample/train.target data/sample/extra/tatoeba.target"
cat $TRAIN_SRC > "$W/data/train.source"; cat $TRAIN_TGT > "$W/data/train.target"
for s in source target; do cp data/sample/val.$s "$W/data/val.$s"; cp data/sample/val.$s "$W/data/test.$s"; done
PREFIX="translate English to Romanian: "

"$PY" bench/make_random_init.py "$W/init" "$PRESET" || { echo "making the shared init failed"; exit 1; }

hf_run() {  # SEED
    timeout ${QP_HF_TIMEOUT:-460} "$PY" bench/hf_seq2seq.py --model "$W/init" --spm data/sample/spiece.model --train_source "$W/data/train.source" \
        --train_target "$W/data/train.target" --val_source "$W/data/val.source" --val_target "$W/data/val.target" \
        --prefix "$PREFIX" --out "$OUT/hf_seed$1" --seed 42 --data_seed "$1" --lr $LR --warmup_steps $WARMUP \
        --epochs $EPOCHS --batch $BATCH --eval_steps $EVAL_STEPS --label_smoothing 0.1 --max_source_length $LEN \
        --max_target_length $LEN --beams $BEAMS --gen_max_length $LEN $PFLAG \
        --attn_implementation "${QP_HF_ATTN:-eager}" > "$OUT/hf_seed$1.log" 2>&1
    echo "hf seed $1: exit $? $(grep '^RESULT' "$OUT/hf_seed$1.log")"
}
# train_t5 as the HF side runs: eval_loss every EVAL_STEPS during training (no generation
# there: --predict_with_generate would beam-search newsdev at every evaluation), then the
# 4-beam generation of newsdev from the trained model (a second start, well under a second).
t5_run() {  # NAME EXTRA...: train into OUT/NAME, then generate into OUT/NAME_predict
    local name=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    ./train_t5 --model "$W/init" --tokenizer_name data/sample/spiece.model --data_dir "$W/data" \
        --task translation_en_to_ro --source_prefix "$PREFIX" $PFLAG --learning_rate $LR --warmup_steps $WARMUP \
        --lr_scheduler_type linear --label_smoothing_factor 0.1 --per_device_train_batch_size $BATCH \
        --per_device_eval_batch_size 64 --num_train_epochs $EPOCHS --eval_strategy steps --eval_steps $EVAL_STEPS \
        --logging_steps 50 --max_source_length $LEN --max_target_length $LEN --val_max_target_length $LEN \
        --do_train --do_eval --seed 42 --data_seed 1 --save_strategy no --report_to none \
        --output_dir "$OUT/$name" --overwrite_output_dir "$@" > "$OUT/$name.log" 2>&1
    echo "$name train: exit $? in $(awk "BEGIN{print $(date +%s.%N) - $t0}") s"
    t1=$(date +%s.%N)
    ./train_t5 --model "$OUT/$name" --tokenizer_name data/sample/spiece.model --data_dir "$W/data" \
        --task translation_en_to_ro --source_prefix "$PREFIX" $PFLAG --per_device_eval_batch_size 64 \
        --max_source_length $LEN --val_max_target_length $LEN --do_predict --predict_with_generate \
        --generation_num_beams $BEAMS --generation_max_length $LEN --report_to none \
        --output_dir "$OUT/${name}_predict" --overwrite_output_dir > "$OUT/${name}_predict.log" 2>&1
    echo "$name generate: exit $? in $(awk "BEGIN{print $(date +%s.%N) - $t1}") s"
}
t5_run train_t5
# Acceptance 2: the same run as ZeRO stage 3 on 2 GPUs, the same global batch (BATCH/2 per GPU;
# configs/ds_config_zero3.json, "auto" values from these flags; its 16-bit gather writes the
# model the generation step loads). QP_TWO_GPU=0 leaves it out; it needs 2 visible GPUs.
RUNS="train_t5"
if [ "${QP_FP8:-0}" = 1 ]; then
    [ "$PRECISION" = bf16 ] || { echo "QP_FP8=1 compares --fp8 with the bf16 run: QP_PRECISION=bf16"; exit 2; }
    t5_run train_t5_fp8 --fp8
    RUNS="$RUNS train_t5_fp8"
fi
if [ "${QP_TWO_GPU:-1}" = 1 ] && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    t5_run train_t5_zero3_2gpu --num_gpus 2 --deepspeed configs/ds_config_zero3.json \
        --per_device_train_batch_size $((BATCH / 2))
    RUNS="$RUNS train_t5_zero3_2gpu"
fi

# Then the two HF runs side by side (a t5-small step leaves most of the GPU idle);
# QP_HF_PARALLEL=0 runs them one after the other.
HF_DIRS=""
if [ "${QP_HF:-1}" = 0 ]; then echo "QP_HF=0: the HF runs are left out"
elif [ "${QP_HF_PARALLEL:-1}" = 1 ]; then hf_run 1 & B1=$!; hf_run 2 & B2=$!; wait $B1 $B2; HF_DIRS="$OUT/hf_seed1 $OUT/hf_seed2"
else hf_run 1; hf_run 2; HF_DIRS="$OUT/hf_seed1 $OUT/hf_seed2"; fi

./train_t5 plot $(for r in $RUNS; do echo "$OUT/$r"; done) $HF_DIRS --out "$OUT/quality_parity.png" > /dev/null 2>&1 \
    || echo "train_t5 plot failed"
"$PY" - "$OUT" "${QP_HF_PARALLEL:-1}" $RUNS <<'PY'
import json, os, sys
import sacrebleu
o, par, runs = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
def lines(p):
    return [l.rstrip("\n") for l in open(p, encoding="utf-8")]
rows = {}
for name in ("hf_seed1", "hf_seed2"):
    if not os.path.isdir(f"{o}/{name}"):
        continue
    try:
        rows[name] = json.load(open(f"{o}/{name}/result.json"))
    except OSError as e:
        print(f"{name}: no result ({e})")
refs = lines(os.environ.get("QP_WORKDIR", "/tmp/qp") + "/data/val.target")
for name in runs:  # train_t5, and train_t5_zero3_2gpu when two GPUs ran it
    try:
        preds = lines(f"{o}/{name}_predict/generated_predictions.txt")
        pr = json.load(open(f"{o}/{name}_predict/all_results.json"))
        st = json.load(open(f"{o}/{name}/trainer_state.json"))
        allr = json.load(open(f"{o}/{name}/all_results.json"))
        ev = [e["eval_loss"] for e in st["log_history"] if "eval_loss" in e]
        rows[name] = {"eval_loss": ev[-1] if ev else float("nan"),
                      "bleu": sacrebleu.corpus_bleu(preds, [refs]).score,
                      "chrf": sacrebleu.corpus_chrf(preds, [refs]).score,
                      "train_s": allr.get("train_runtime", float("nan")),
                      "generate_s": pr.get("predict_runtime", float("nan")), "steps": st.get("global_step")}
    except (OSError, KeyError, ValueError) as e:
        print(f"{name}: no result ({e})")
print("| run | steps | final eval_loss | BLEU | chrF | train s | 4-beam generation s |\n|---|---|---|---|---|---|---|")
for k, r in rows.items():
    print(f"| {k} | {r.get('steps')} | {r['eval_loss']:.4f} | {r['bleu']:.2f} | {r['chrf']:.2f} | "
          f"{r['train_s']:.1f} | {r['generate_s']:.1f} |")
def curve(p):
    return {e["step"]: e["eval_loss"] for e in json.load(open(p))["log_history"] if "eval_loss" in e}
for name in runs:
    if not {"hf_seed1", "hf_seed2", name} <= rows.keys():
        continue
    h1, h2, t = rows["hf_seed1"], rows["hf_seed2"], rows[name]
    hm = (h1["eval_loss"] + h2["eval_loss"]) / 2
    print(f"{name}: eval_loss vs the HF mean {100 * (t['eval_loss'] - hm) / hm:+.2f}% (HF seeds differ by "
          f"{100 * abs(h1['eval_loss'] - h2['eval_loss']) / hm:.2f}%); BLEU - HF mean "
          f"{t['bleu'] - (h1['bleu'] + h2['bleu']) / 2:+.2f}; chrF {t['chrf'] - (h1['chrf'] + h2['chrf']) / 2:+.2f}")
    # the curves: eval_loss at each step against the band of the two HF runs
    c1, c2 = curve(o + "/hf_seed1/trainer_state.json"), curve(o + "/hf_seed2/trainer_state.json")
    ct = curve(f"{o}/{name}/trainer_state.json")
    steps = sorted(set(c1) & set(c2) & set(ct))
    out = []
    for s in steps:
        lo, hi = min(c1[s], c2[s]), max(c1[s], c2[s])
        out.append(f"{s}:{ct[s]:.3f}[{lo:.3f},{hi:.3f}]{'' if lo - 1e-9 <= ct[s] <= hi + 1e-9 else '*'}")
    print(f"{name}: eval_loss by step [HF band] (* outside):", " ".join(out))
    # A third run inside the range of two is a 1-in-3 chance even for a perfect copy (three
    # exchangeable orders): also the largest distance from the HF mean beside the largest HF gap.
    if steps:
        dev = max(abs(ct[s] - (c1[s] + c2[s]) / 2) for s in steps)
        gap = max(abs(c1[s] - c2[s]) for s in steps)
        print(f"{name}: curve within {dev:.4f} of the HF mean at every evaluation; the HF seeds differ by up to "
              f"{gap:.4f}; {sum(1 for x in out if not x.endswith('*'))} of {len(out)} points inside the two-run band")
if {"train_t5", "train_t5_fp8"} <= rows.keys():  # issue 38: fp8 against bf16, same init and order
    b, f = rows["train_t5"], rows["train_t5_fp8"]
    cb, cf = curve(o + "/train_t5/trainer_state.json"), curve(o + "/train_t5_fp8/trainer_state.json")
    common = sorted(set(cb) & set(cf))
    gap = max((abs(cf[s] - cb[s]) / cb[s] for s in common), default=float("nan"))
    print(f"train_t5_fp8 vs train_t5 (bf16): final eval_loss {100 * (f['eval_loss'] - b['eval_loss']) / b['eval_loss']:+.2f}%, "
          f"BLEU {f['bleu'] - b['bleu']:+.2f}, chrF {f['chrf'] - b['chrf']:+.2f}; the curves at most {100 * gap:.2f}% apart "
          f"over {len(common)} evaluations; train s {f['train_s']:.1f} vs {b['train_s']:.1f}")
if par and "hf_seed1" in rows:
    print("note: the two HF runs shared the GPU (QP_HF_PARALLEL=1): their wall times are not alone; train_t5 ran alone")
PY
