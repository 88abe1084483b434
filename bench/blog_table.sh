#!/usr/bin/env bash
# bench/blog_table.sh (make blog-table): the 2021 post's table re-measured in one call on the
# two-GPU machine (issue 20): for every row of the post (and three of ours), train_t5 and HF
# Seq2SeqTrainer (+ DeepSpeed 0.19.8 for its DeepSpeed rows, FSDP SHARD_GRAD_OP where FairScale's
# --sharded_ddp was) on the same shapes, both GPUs capped at 24 GiB as the post's cards:
#   - one random init per model (bench/make_random_init.py: t5-large, t5-3b), loaded by both, so
#     that generation (eval time) starts from the same weights;
#   - train_t5's batch: the largest the memory plan fits (--explain --find_max_batch), then run;
#   - HF's batch: tried from BT_HF_LADDER x ours (default "1.25 1 0.75", its own
#     --auto_find_batch_size from each where it works; BT_HF_START sets the first factor:
#     if that fits, HF's largest is only known to be at least that, and the table says so);
#   - per row: batch, train seconds, eval seconds (4-beam generation + BLEU), samples/s, BLEU,
#     peak memory; the post's figures beside them.
# Output: OUT/blog_table.md and .json (copied to bench/results/ with BT_SAVE=1) and the chart
# OUT/blog_table.png (build/bench/blog_chart). A row not reached within BT_BUDGET seconds
# (default 540) is listed as not run; BT_ROWS picks rows (default: all the GPUs allow).
#   usage (GPU machine, repo root, DeepSpeed wheels in .whl/): OUT=dir bash bench/blog_table.sh
#   BENCH_FAKE=1: no GPU, made-up results through the same code (bench/test_blog_table.sh).
set -u
OUT=${OUT:-/tmp/blog_table}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
PY=${PYTHON:-python3}
FAKE=${BENCH_FAKE:-0}
BUDGET=${BT_BUDGET:-540}
W=${BT_WORKDIR:-/tmp/blog}; mkdir -p "$W"
T0=$(date +%s)
LOG=$OUT/blog_table.log; : > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }

if [ "$FAKE" = 1 ]; then NG=${BT_FAKE_GPUS:-2}; BT_MACHINE=${BT_MACHINE:-no GPU}
else
    NG=$(nvidia-smi -L 2>/dev/null | wc -l)
    [ "$NG" -ge 1 ] || { echo "blog_table: no GPU visible: this runs on the GPU machine (BENCH_FAKE=1 to check the plumbing)"; exit 1; }
    WHEELS=${BENCH_WHEELS:-.whl}
    . bench/ds_env.sh
    ds_env_setup "$OUT"
    export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/t5_torch_extensions}
fi

# The rows: id|label|GPUs|model|the post's batch, train s, eval s|train_t5 flags|HF driver flags
# (the post's DeepSpeed rows run without --adam_eps/--warmup_steps, which their config contradicts:
# docs/POST.md "Why $FLAGS is left out of the DeepSpeed rows").
FLAGS="--adam_eps 1e-06 --warmup_steps 5"
ROWDEFS=(
"1|baseline (DDP)|2|t5-large|16|30.9|56.3|$FLAGS|--mode ddp --precision fp32"
"2|--fp16|2|t5-large|20|21.5|53.5|$FLAGS --fp16|--mode ddp --precision fp16"
"3|--sharded_ddp|2|t5-large|30|25.9|47.6|$FLAGS --sharded_ddp|--mode fsdp --precision fp32"
"4|--sharded_ddp --fp16|2|t5-large|30|17.4|45.7|$FLAGS --sharded_ddp --fp16|--mode fsdp --precision fp16"
"5|--deepspeed (ZeRO-2)|2|t5-large|40|10.4|34.9|--deepspeed configs/ds_config_no_offload.json|--mode deepspeed --deepspeed configs/ds_config_no_offload.json"
"6|--deepspeed + cpu_offload|2|t5-large|50|21.0|32.1|--deepspeed configs/ds_config.json|--mode deepspeed --deepspeed configs/ds_config.json"
"7|t5-3b --fp16, 1 GPU|1|t5-3b|OOM at 1|||$FLAGS --fp16|--mode ddp --precision fp16"
"8|t5-3b ZeRO-2 + cpu_offload, 1 GPU|1|t5-3b|20 (30 OOM)|||--deepspeed configs/ds_config_1gpu.json|--mode deepspeed --deepspeed configs/ds_config_1gpu.json"
"9|ours: bf16 ZeRO-2|2|t5-large||||--bf16 --deepspeed configs/ds_config_zero2.json|--mode deepspeed --precision bf16 --deepspeed configs/ds_config_zero2.json"
"10|ours: bf16 ZeRO-3|2|t5-large||||--bf16 --deepspeed configs/ds_config_zero3.json|--mode deepspeed --precision bf16 --deepspeed configs/ds_config_zero3.json"
"11|ours: bf16 ZeRO-2 + checkpointing|2|t5-large||||--bf16 --gradient_checkpointing --deepspeed configs/ds_config_zero2.json|--mode deepspeed --precision bf16 --gradient_checkpointing --deepspeed configs/ds_config_zero2.json"
)
if [ "$NG" -ge 2 ]; then ROWS=${BT_ROWS:-1 2 3 4 5 6 7 8 9 10 11}; else ROWS=${BT_ROWS:-7 8}; fi
# 2000 training pairs as the post; evaluation on 100 of its 500 validation pairs by default: a
# random init generates all 128 tokens, and HF's 4-beam generation of 500 pairs takes about a
# minute per row, more than one 10-minute call allows for 11 rows (the table says so; BT_N_VAL=500
# for the post's count)
N_TRAIN=${BT_N_TRAIN:-2000}; N_VAL=${BT_N_VAL:-100}
POST="--tokenizer_name data/sample/spiece.model --data_dir data/sample --task translation_en_to_ro --do_train \
  --do_eval --predict_with_generate --generation_num_beams 4 --label_smoothing 0.1 --learning_rate 3e-5 \
  --max_source_length 128 --max_target_length 128 --num_train_epochs 1 --freeze_embeds --sortish_sampler \
  --device cuda --max_gpu_memory 24 --overwrite_output_dir --save_strategy no --report_to none"

field() { echo "$1" | cut -d'|' -f"$2"; }
model_dir() {  # MODEL: the shared init, made on first use (a failure is in OUT/init_MODEL.log)
    [ "$FAKE" = 1 ] && { echo "$1"; return; }
    [ -f "$W/$1/config.json" ] || "$PY" bench/make_random_init.py "$W/$1" "$1" > "$OUT/init_$1.log" 2>&1
    echo "$W/$1"
}
data_sizes() { [ "$1" = t5-3b ] && echo "--n_train 60 --n_val 10" || echo "--n_train $N_TRAIN --n_val $N_VAL"; }

# train_t5: the batch the plan fits, then the run; writes $OUT/rowN/train_t5.json
run_train_t5() {  # ROWDEF
    local id g model args dir launch B
    id=$(field "$1" 1); g=$(field "$1" 3); model=$(field "$1" 4); args=$(field "$1" 8)
    dir=$OUT/row$id; mkdir -p "$dir"
    launch=""; [ "$g" -ge 2 ] && launch="--num_gpus $g"
    if [ "$FAKE" = 1 ]; then
        B=$(( ${BT_FAKE_BATCH:-48} / (id % 3 + 1) ))
        [ "$id" = 7 ] && B=0
        if [ "$B" -gt 0 ]; then
            printf '{"train_runtime": %s, "train_samples_per_second": %s, "eval_runtime": %s, "eval_bleu": 0.1, "eval_gen_len": 90, "train_peak_gpu_memory_gib": 20.5}\n' \
                "$((5 + id))" "$((200 + id))" "$((9 + id))" > "$dir/t5_results.json"
        fi
    else
        # shellcheck disable=SC2086
        ./train_t5 --model "$(model_dir "$model")" $(data_sizes "$model") $POST $args $launch --output_dir "$dir/t5_explain" \
            --explain --find_max_batch > "$dir/t5_find.log" 2>&1
        B=$(sed -n 's/^--find_max_batch: the largest per-device batch under .* by the memory plan: \([0-9]*\) .*/\1/p' "$dir/t5_find.log" | head -1)
        B=${B:-0}
        if [ "$B" -gt 0 ]; then
            # shellcheck disable=SC2086
            timeout ${BT_ROW_TIMEOUT:-240} ./train_t5 --model "$(model_dir "$model")" $(data_sizes "$model") $POST $args $launch \
                --per_device_train_batch_size "$B" --per_device_eval_batch_size "$B" --output_dir "$dir/t5" > "$dir/t5.log" 2>&1
            echo "exit $?" >> "$dir/t5.log"
            cp "$dir/t5/all_results.json" "$dir/t5_results.json" 2>/dev/null
        fi
    fi
    "$PY" - "$dir" "$B" <<'PY'
import json, os, sys
d, B = sys.argv[1], int(sys.argv[2])
out = {"batch": B}
def first_error(name, prefixes=("error",)):
    try:
        return next((l.strip() for l in open(os.path.join(d, name)) if l.startswith(prefixes)), None)
    except OSError:
        return None
if B == 0:  # the plan fits no batch: the row is refused before anything loads (the post's OOM)
    out["error"] = (first_error("t5_find.log", ("--find_max_batch: not", "error"))
                    or "does not fit at batch 1 (the memory plan)")
    json.dump(out, open(os.path.join(d, "train_t5.json"), "w"))
    sys.exit(0)
try:
    r = json.load(open(os.path.join(d, "t5_results.json")))
    out.update(train_s=r.get("train_runtime"), train_samples_per_second=r.get("train_samples_per_second"),
               eval_s=r.get("eval_runtime"), bleu=r.get("eval_bleu"), gen_len=r.get("eval_gen_len"),
               peak_gib=r.get("train_peak_gpu_memory_gib"))
except (OSError, ValueError):
    out["error"] = first_error("t5.log") or first_error("t5_find.log") or "no result"
json.dump(out, open(os.path.join(d, "train_t5.json"), "w"))
PY
}

# HF: bench/hf_blog.py under torchrun, from BT_HF_LADDER's first factor x our batch
run_hf() {  # ROWDEF
    local id g model hfargs dir B
    id=$(field "$1" 1); g=$(field "$1" 3); model=$(field "$1" 4); hfargs=$(field "$1" 9)
    dir=$OUT/row$id
    B=$("$PY" -c "import json; print(json.load(open('$dir/train_t5.json'))['batch'])")
    if [ "$FAKE" = 1 ]; then
        if [ "$id" = 7 ]; then echo '{"error": "CUDA out of memory at batch 1"}' > "$dir/hf.json"
        else printf '{"batch": %s, "batch_is_lower_bound": false, "train_s": %s, "train_samples_per_second": %s, "eval_s": %s, "bleu": 0.1, "gen_len": 95, "peak_gib": 23.1}\n' \
                "$(( B * 3 / 4 + 1 ))" "$((20 + id))" "$((60 + id))" "$((30 + id))" > "$dir/hf.json"; fi
        return
    fi
    # The batches tried: BT_HF_LADDER's factors of our batch (default 1.25 1 0.75), downwards, each
    # at least 1 and tried once (where our plan fits no batch, B=0, HF is tried at batch 1 only).
    # HF's auto_find_batch_size searches downwards from each in one process (0.9x steps); in the
    # DeepSpeed rows, where it cannot (bench/hf_blog.py says why), each try is one batch, and an
    # out-of-memory moves to the next try in a fresh process. A success after an out-of-memory at
    # O is flagged: HF's largest lies between the two.
    local try tries oom_at=""
    tries=$(for f in ${BT_HF_LADDER:-${BT_HF_START:-1.25} 1 0.75}; do "$PY" -c "import math; print(math.ceil($B * $f))"; done \
        | awk '$1 >= 1 && !seen[$1]++' | sort -rn | tr '\n' ' ')
    [ -n "$tries" ] || tries=1
    for try in $tries; do
        # shellcheck disable=SC2086
        (timeout ${BT_ROW_TIMEOUT:-240} torchrun --standalone --nproc_per_node "$g" bench/hf_blog.py \
            --model "$(model_dir "$model")" $hfargs --batch "$try" $(data_sizes "$model") --out "$dir/hf") > "$dir/hf_try.log" 2>&1
        echo "exit $? (batch $try)" >> "$dir/hf_try.log"
        cat "$dir/hf_try.log" >> "$dir/hf.log"
        [ -f "$dir/hf/result.json" ] && break
        grep -qE "OutOfMemoryError|CUDA out of memory" "$dir/hf_try.log" || break  # another failure: no retry
        oom_at=$try
        [ "$(( $(date +%s) - T0 ))" -gt "$BUDGET" ] && break
    done
    if [ -f "$dir/hf/result.json" ]; then
        "$PY" - "$dir/hf/result.json" "$dir/hf.json" "$oom_at" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if sys.argv[3]:  # an earlier try ran out of memory: HF's largest is at least this, below that
    oom = int(sys.argv[3])
    r["batch_is_lower_bound"] = r["batch"] < oom - 1
    r["batch_note"] = f"out of memory at {oom}"
json.dump(r, open(sys.argv[2], "w"))
PY
    else
        # accelerate's find_executable_batch_size ends "No executable batch size found, reached
        # zero." when even batch 1 ran out of memory
        if grep -q "No executable batch size found" "$dir/hf.log"; then err="CUDA out of memory down to batch 1 (auto_find_batch_size)"
        else err=$(grep -m1 -oE "(OutOfMemoryError|CUDA out of memory|[A-Za-z]*Error: )[^\"]{0,160}" "$dir/hf.log" | tr -d '"\\'); fi
        echo "{\"error\": \"${err:-no result: see hf.log}\"}" > "$dir/hf.json"
    fi
}

say "== blog table: rows [$ROWS] on $NG GPU(s)$([ "$FAKE" = 1 ] && echo ', FAKE results'), $(date -u +%FT%TZ)"
# Two phases, so that the preparation the HF side needs overlaps our runs and never theirs:
#   0. in the background: DeepSpeedCPUAdam's JIT build (the offload rows; HF's train_runtime would
#      count it) and the t5-3b init (~11 GB written), both CPU work;
#   1. train_t5's rows: t5-large rows first (their init is made in the foreground on first use),
#      then, each after its wait, the offload rows (our CPU optimizer would share the cores with the
#      build) and the t5-3b rows;
#   2. once the background work has ended, HF's rows, one at a time, alone on the machine.
def_of() { local d; for d in "${ROWDEFS[@]}"; do [ "$(field "$d" 1)" = "$1" ] && { echo "$d"; return; }; done; }
offloads() {  # ROWDEF: its DeepSpeed config offloads the optimizer (the post's "cpu_offload": true too)
    local cfg; cfg=$(field "$1" 8 | sed -n 's/.*--deepspeed \([^ ]*\).*/\1/p')
    [ -n "$cfg" ] && grep -qE '"cpu_offload": *true|"offload_optimizer"' "$cfg"
}
JIT_PID=""; INIT_PID=""
if [ "$FAKE" != 1 ]; then
    ds_build_cpu_adam "$OUT" & JIT_PID=$!
    for id in $ROWS; do
        if [ "$(field "$(def_of "$id")" 4)" = t5-3b ] && [ ! -f "$W/t5-3b/config.json" ]; then
            "$PY" bench/make_random_init.py "$W/t5-3b" t5-3b > "$OUT/init_t5-3b.log" 2>&1 & INIT_PID=$!
            break
        fi
    done
fi
ORDER=""
for pass in plain offload 3b; do
    for id in $ROWS; do
        def=$(def_of "$id")
        [ -n "$def" ] || { [ $pass = plain ] && say "row $id: no such row (1-11)"; continue; }
        if [ "$(field "$def" 4)" = t5-3b ]; then kind=3b; elif offloads "$def"; then kind=offload; else kind=plain; fi
        [ $kind = $pass ] && ORDER="$ORDER $id"
    done
done
not_run() {  # ID WHY: both sides of the row marked as not run
    mkdir -p "$OUT/row$1"; echo "{\"error\": \"not run: $2\"}" > "$OUT/row$1/train_t5.json"
    cp "$OUT/row$1/train_t5.json" "$OUT/row$1/hf.json"
}
RAN=""
for id in $ORDER; do
    def=$(def_of "$id")
    if [ "$(field "$def" 3)" -gt "$NG" ]; then say "row $id: needs $(field "$def" 3) GPUs, $NG visible"; continue; fi
    if [ $(( $(date +%s) - T0 )) -gt "$BUDGET" ]; then not_run "$id" "the time budget was spent"; say "row $id: not run (budget)"; continue; fi
    offloads "$def" && [ -n "$JIT_PID" ] && { wait "$JIT_PID"; JIT_PID=""; }
    [ "$(field "$def" 4)" = t5-3b ] && [ -n "$INIT_PID" ] && { wait "$INIT_PID"; INIT_PID=""; }
    run_train_t5 "$def"
    say "row $id: train_t5 $(cat "$OUT/row$id/train_t5.json")"
    RAN="$RAN $id"
done
[ -n "$JIT_PID" ] && wait "$JIT_PID"
[ -n "$INIT_PID" ] && wait "$INIT_PID"
for id in $RAN; do
    if [ $(( $(date +%s) - T0 )) -gt "$BUDGET" ]; then
        echo '{"error": "not run: the time budget was spent"}' > "$OUT/row$id/hf.json"; say "row $id: HF not run (budget)"; continue
    fi
    run_hf "$(def_of "$id")"
    say "row $id: HF $(cat "$OUT/row$id/hf.json")"
done
printf '%s\n' "${ROWDEFS[@]}" > "$OUT/rowdefs.txt"
"$PY" bench/blog_table_md.py "$OUT" "$(date -u +%F)" "${BT_MACHINE:-$NG x $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)}" \
    "$N_TRAIN" "$N_VAL" "$FAKE" | tee -a "$LOG"
CHART=${BT_CHART:-build/bench/blog_chart}
if [ -x "$CHART" ]; then "$CHART" "$OUT/blog_table.json" "$OUT/blog_table.png" | tee -a "$LOG"
else say "no chart: $CHART is not built (make build/bench/blog_chart)"; fi
if [ "${BT_SAVE:-0}" = 1 ]; then mkdir -p bench/results; cp "$OUT/blog_table.md" "$OUT/blog_table.json" bench/results/
    [ -f "$OUT/blog_table.png" ] && cp "$OUT/blog_table.png" bench/results/; fi
say "== done in $(( $(date +%s) - T0 )) s"
