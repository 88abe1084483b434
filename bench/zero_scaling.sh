#!/usr/bin/env bash
# bench/zero_scaling.sh: ZeRO stages 0-3 on 1 and 2 GPUs, train_t5 against HF transformers +
# DeepSpeed (bench/ds_baseline.py), t5-large bf16, src = tgt = 128, 16 and 64 per GPU; one call on
# the 2-GPU machine (< 10 minutes, DeepSpeed's install and FusedAdam JIT build included).
# Both tools read the same config files: stages 0, 1, 2 = configs/ds_config_zero2.json with only
# "stage" replaced (written to $OUT/configs), stage 3 = configs/ds_config_zero3.json.
# Prints two tables last (scaling, acceptance ratios), also written to $OUT/scaling_table.md;
# $OUT/scaling.log has a "# job" line per planned run and the raw RESULT lines, and
# $OUT/scaling_full.log everything every command printed.
#
#   bash bench/zero_scaling.sh                 # everything, on the 2-GPU machine
#   BENCH_FAKE=1 bash bench/zero_scaling.sh    # no GPU: made-up RESULT lines through the same
#                                              # scheduling, deadline and tables (bench/test_zero_scaling.sh)
# Order: train_t5 1-GPU runs (two at a time, one per GPU), train_t5 2-GPU runs, then DeepSpeed:
# 2-GPU runs of stages 2, 3, 0, 1, then 1-GPU runs (16 and 64 of a stage side by side) in that order.
# A run that would end past the deadline is skipped and its cells say "not run (deadline)"; a
# run still going at the deadline is stopped (SIGTERM, SIGKILL 30 s later).
# Each DeepSpeed run is started (imports only, ~10 s) while the run before it is still going, and
# waits (--wait-file) for it to end before touching a GPU. FusedAdam is JIT-built once, in the
# background during the train_t5 runs, into TORCH_EXTENSIONS_DIR.
#
# Environment (defaults in brackets):
#   TRAIN_T5 [./train_t5]  PYTHON [python3]  BENCH_MODEL [t5-large]
#   BENCH_BATCHES ["16 64"] per GPU     BENCH_STAGES ["0 1 2 3"]     BENCH_IMPLS ["train_t5 deepspeed"]
#   BENCH_CKPT [0]          1: also train_t5 with --gradient_checkpointing at 16 per GPU (memory)
#   BENCH_STEPS [20] BENCH_WARMUP [5]          timed / warm-up steps of every run except:
#   BENCH_DS3_STEPS [10] BENCH_DS3_WARMUP [3]  DeepSpeed stage 3 (~1.5 s a step on 2 GPUs)
#   BENCH_DEADLINE_S [540]  no run may end after this many seconds from the start
#   BENCH_WHEELS [.whl]     DeepSpeed + pydantic wheels, installed into /tmp/site when
#                           `import deepspeed` does not work (docs/DEVICE.md)
#   TORCH_EXTENSIONS_DIR [/tmp/t5_torch_extensions]
#   BENCH_FAKE [0]          1: fake runs; BENCH_FAKE_OOM / BENCH_FAKE_FAIL = job keys
#                           ("impl|mode|stage|world|batch", space-separated) that report oom / fail;
#                           BENCH_FAKE_NO_DS=1: DeepSpeed unavailable
#   BENCH_DS_ARGS [""]      extra bench/ds_baseline.py arguments (checks on a CPU: "--tiny --device cpu")
set -u

TRAIN_T5=${TRAIN_T5:-./train_t5}
PY=${PYTHON:-python3}
MODEL=${BENCH_MODEL:-t5-large}
SEQ=128
BATCHES=${BENCH_BATCHES:-16 64}
STAGES=${BENCH_STAGES:-0 1 2 3}
IMPLS=${BENCH_IMPLS:-train_t5 deepspeed}
CKPT=${BENCH_CKPT:-0}
CKPT_BATCH=16
STEPS=${BENCH_STEPS:-20}; WARMUP=${BENCH_WARMUP:-5}
DS3_STEPS=${BENCH_DS3_STEPS:-10}; DS3_WARMUP=${BENCH_DS3_WARMUP:-3}
DEADLINE=${BENCH_DEADLINE_S:-540}
WHEELS=${BENCH_WHEELS:-.whl}
FAKE=${BENCH_FAKE:-0}
export NCCL_NVLS_ENABLE=0          # NVLink multicast stays off (docs/DEVICE.md)
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/t5_torch_extensions}
# DeepSpeed's JIT builder cannot parse arch-specific entries ("9.0a", as the GPU image sets):
# the same rewrite as bench/ds_baseline.py, so the prebuild and the runs share one build
if [ -n "${TORCH_CUDA_ARCH_LIST:-}" ]; then
    export TORCH_CUDA_ARCH_LIST=$(sed -E 's/([0-9])a(\+PTX)?/\1\2/g' <<<"$TORCH_CUDA_ARCH_LIST")
fi
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1

if [ -n "${OUT:-}" ]; then LOGDIR=$OUT; else LOGDIR=${BENCH_LOGDIR:-$(mktemp -d /tmp/zero_scaling.XXXXXX)}; fi
mkdir -p "$LOGDIR"
LOG=$LOGDIR/scaling.log; FULL=$LOGDIR/scaling_full.log; TABLE=$LOGDIR/scaling_table.md
: >"$LOG"; : >"$FULL"

FAKE_CLOCK=0   # BENCH_FAKE: seconds the fake runs would have taken (so the deadline logic is exercised)
now() { echo $((SECONDS + FAKE_CLOCK)); }
log() { printf '[%4ds] %s\n' "$(now)" "$*" | tee -a "$FULL"; }
kv() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
want() { [[ " $IMPLS " == *" $1 "* ]]; }

log "zero_scaling: model=$MODEL bf16 seq=$SEQ batches=[$BATCHES] stages=[$STAGES] impls=[$IMPLS] ckpt=$CKPT" \
    "steps=$STEPS+$WARMUP (DeepSpeed stage 3: $DS3_STEPS+$DS3_WARMUP) deadline=${DEADLINE}s fake=$FAKE logs in $LOGDIR"
if [ "$FAKE" != 1 ]; then
    { nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } | sed 's/^/GPU: /' | tee -a "$FULL"
fi
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" | tee -a "$FULL"

# ---- the config files both tools read ----------------------------------------------------
CFGDIR=$LOGDIR/configs
mkdir -p "$CFGDIR"
"$PY" - "$CFGDIR" $STAGES <<'PY' || { echo "error: could not write the stage configs to $CFGDIR"; exit 1; }
import json, shutil, sys
out, stages = sys.argv[1], sys.argv[2:]
for s in stages:
    if s == "3":
        shutil.copyfile("configs/ds_config_zero3.json", f"{out}/stage3.json")
        continue
    cfg = json.load(open("configs/ds_config_zero2.json"))
    cfg["zero_optimization"]["stage"] = int(s)
    json.dump(cfg, open(f"{out}/stage{s}.json", "w"), indent=4)
PY
cfg_of() { echo "$CFGDIR/stage$1.json"; }

# ---- what can run ------------------------------------------------------------------------
HAVE_TT5=1; TT5_WHY=""
if want train_t5 && [ "$FAKE" != 1 ] && [ ! -x "$TRAIN_T5" ]; then
    HAVE_TT5=0; TT5_WHY="no_$(basename "$TRAIN_T5")_binary"; log "NOTE: $TRAIN_T5 not found: train_t5 cells are 'not run'"
fi
DS_OK=1; DS_WHY=""; JIT_PID=""; JIT_DONE=0
if want deepspeed; then
    if [ "$FAKE" = 1 ]; then
        [ "${BENCH_FAKE_NO_DS:-0}" = 1 ] && { DS_OK=0; DS_WHY="deepspeed_not_importable"; }
    else
        # from /tmp: the repository's own deepspeed/ folder (C sources) would pass for a package here
has_ds() { (cd /tmp && "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('deepspeed.ops') is None)") 2>/dev/null; }
        if ! has_ds && [ -d /tmp/site/deepspeed ]; then  # installed by an earlier call on this machine
            export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
        elif ! has_ds && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
            log "installing $(ls "$WHEELS"/*.whl | xargs -n1 basename | tr '\n' ' ')into /tmp/site"
            "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl >>"$FULL" 2>&1 \
                || log "pip install of $WHEELS/*.whl failed (scaling_full.log)"
            export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
        fi
        if has_ds; then
            # FusedAdam (the optimizer DeepSpeed builds from "AdamW"), compiled once while train_t5 runs
            # A "lock" left by a build killed in an earlier call would make every load wait forever;
            # nothing else builds now, so any lock there is stale.
            mkdir -p "$TORCH_EXTENSIONS_DIR"
            find "$TORCH_EXTENSIONS_DIR" -name lock -type f -print -delete | sed 's/^/removed stale /' | tee -a "$FULL"
            timeout -k 10 300 "$PY" -c "import time; t = time.time()
from deepspeed.ops.op_builder import FusedAdamBuilder
FusedAdamBuilder().load()
print(f'FusedAdam ready in {time.time() - t:.1f} s')" >"$LOGDIR/jit.log" 2>&1 &
            JIT_PID=$!
            log "FusedAdam JIT build started in the background (pid $JIT_PID, $TORCH_EXTENSIONS_DIR)"
        else
            DS_OK=0; DS_WHY="deepspeed_not_importable"
            log "NOTE: deepspeed cannot be imported (and no $WHEELS/*.whl to install): DeepSpeed cells are 'not run'"
        fi
    fi
fi
ds_ready() {  # waits for the JIT build once; false when DeepSpeed cannot run
    if [ "$DS_OK" = 1 ] && [ -n "$JIT_PID" ] && [ "$JIT_DONE" = 0 ]; then
        local t0=$SECONDS rc
        wait "$JIT_PID"; rc=$?; JIT_DONE=1
        cat "$LOGDIR/jit.log" >>"$FULL"
        if [ $rc -ne 0 ]; then
            DS_OK=0; DS_WHY="deepspeed_import_or_FusedAdam_build_failed"
            log "FusedAdam JIT build FAILED (rc $rc, waited $((SECONDS - t0)) s); last lines of jit.log:"
            tail -n 5 "$LOGDIR/jit.log"
        else
            log "$(tail -n 1 "$LOGDIR/jit.log") (waited $((SECONDS - t0)) s for it)"
        fi
    fi
    [ "$DS_OK" = 1 ]
}

# ---- one run -----------------------------------------------------------------------------
# A job spec is "impl mode stage world batch", e.g. "deepspeed plain 3 2 64".
steps_of() {  # steps_of IMPL STAGE -> "steps warmup"
    if [ "$1" = deepspeed ] && [ "$2" = 3 ]; then echo "$DS3_STEPS $DS3_WARMUP"; else echo "$STEPS $WARMUP"; fi
}
est_s() {  # est_s SPEC PRESTARTED: seconds a run should take (t5-large figures, docs/DESIGN.md anchors)
    local impl mode s w b pre=$2
    read -r impl mode s w b <<<"$1"
    local n; n=$(steps_of "$impl" "$s" | awk '{ print $1 + $2 }')
    awk -v impl="$impl" -v mode="$mode" -v s="$s" -v w="$w" -v b="$b" -v n="$n" -v pre="$pre" 'BEGIN {
        if (impl == "train_t5") { start = (w == 2 ? 12 : 10); ms = 1000 * b / (w == 2 ? 900 : 480) * (w == 2 ? 2 : 1) }
        else {
            start = (pre ? 14 : 26)
            if (s == 3) ms = (w == 2 ? 1500 : 800) + 3.5 * b
            else { ms = 5.2 * b; if (ms < (w == 2 ? 340 : 200)) ms = (w == 2 ? 340 : 200) }
        }
        if (mode == "ckpt") ms *= 1.4
        printf "%d\n", start + n * ms / 1000 + 1 }'
}
# launch SPEC GPUS [WAITFILE]: starts the run in the background; sets LPID and LTMP (its output)
launch() {
    local impl mode s w b wf=${3:-}
    read -r impl mode s w b <<<"$1"
    local gpus=$2 n wu cmd t
    read -r n wu <<<"$(steps_of "$impl" "$s")"
    if [ "$impl" = train_t5 ]; then
        cmd=("$TRAIN_T5" bench --model "$MODEL" --init random --bf16 --batch "$b" --seq "$SEQ" --steps "$n" --warmup "$wu"
             --deepspeed "$(cfg_of "$s")")
        [ "$w" -gt 1 ] && cmd+=(--num_gpus "$w")
        [ "$mode" = ckpt ] && cmd+=(--gradient_checkpointing)
    else
        cmd=("$PY" -m torch.distributed.run --standalone --nproc_per_node "$w" bench/ds_baseline.py --model "$MODEL"
             --precision bf16 --batch "$b" --seq "$SEQ" --steps "$n" --warmup "$wu" --deepspeed "$(cfg_of "$s")")
        [ "$mode" = ckpt ] && cmd+=(--gradient-checkpointing)
        [ -n "$wf" ] && cmd+=(--wait-file "$wf")
        # shellcheck disable=SC2206
        [ -n "${BENCH_DS_ARGS:-}" ] && cmd+=($BENCH_DS_ARGS)
    fi
    t=$((DEADLINE - $(now))); [ $t -lt 1 ] && t=1
    LTMP=$(mktemp "$LOGDIR/.run.XXXXXX")
    if [ "$FAKE" = 1 ]; then
        fake_run "$1" "$wf" >"$LTMP" 2>&1 &
    else
        { echo "+ CUDA_VISIBLE_DEVICES=$gpus ${cmd[*]} (timeout ${t}s, at $(now)s)"
          CUDA_VISIBLE_DEVICES=$gpus exec timeout -k 30 "$t" "${cmd[@]}"; } >"$LTMP" 2>&1 &
    fi
    LPID=$!
}
job_line() {  # job_line SPEC OUTCOME EXTRA...: the "# job" line of scaling.log
    local impl mode s w b
    read -r impl mode s w b <<<"$1"; shift
    echo "# job impl=$impl mode=$mode stage=$s world=$w batch=$b outcome=$*" >>"$LOG"
}
not_run() {  # not_run SPEC REASON
    job_line "$1" "notrun reason=$2"
    log "$(describe "$1"): not run ($2)"
}
describe() {
    local impl mode s w b
    read -r impl mode s w b <<<"$1"
    echo "$impl${mode/plain/} stage $s, $w GPU x $b"
}
collect() {  # collect SPEC TMP RC GPUS PAIRED
    local line
    { echo "=== $(describe "$1") (CUDA_VISIBLE_DEVICES=$4, paired=$5, rc $3)"; cat "$2"; } >>"$FULL"
    line=$(grep '^RESULT ' "$2" | tail -n 1)
    if [ -n "$line" ]; then
        job_line "$1" "result rc=$3 gpus=$4 paired=$5"
        echo "$line" >>"$LOG"
        log "$(describe "$1"): $(kv "$line" samples_per_s) samples/s, peak $(kv "$line" peak_gib) GiB," \
            "status $(kv "$line" status) (rc $3)"
    else
        job_line "$1" "failed rc=$3 gpus=$4 paired=$5"
        log "$(describe "$1"): FAILED, no RESULT line (rc $3); last lines:"
        grep -v '^\s*$' "$2" | tail -n 6 | sed 's/^/      /'
    fi
    rm -f "$2"
}

# ---- fake runs (BENCH_FAKE=1): plausible numbers, every outcome -------------------------------
fake_run() {  # fake_run SPEC WAITFILE
    local impl mode s w b wf=$2
    read -r impl mode s w b <<<"$1"
    if [ -n "$wf" ]; then
        while [ ! -e "$wf" ]; do sleep 0.05; done
        grep -q skip "$wf" && { echo "INFO skipped by the wait file"; return 0; }
    fi
    local key="$impl|$mode|$s|$w|$b"
    if [[ " ${BENCH_FAKE_FAIL:-} " == *" $key "* ]]; then echo "fake failure of $key"; return 1; fi
    local status=ok; [[ " ${BENCH_FAKE_OOM:-} " == *" $key "* ]] && status=oom
    awk -v impl="$impl" -v mode="$mode" -v s="$s" -v w="$w" -v b="$b" -v st="$status" -v model="$MODEL" 'BEGIN {
        if (impl == "train_t5") { sps = (b >= 64 ? 500 : 280) * (w == 2 ? 1.96 : 1) * (s == 3 ? 0.97 : 1) * (mode == "ckpt" ? 0.75 : 1)
                                  peak = 6 + b * 0.3 - (s > 0 && w == 2 ? s * 1.5 : 0); comm = (w == 2 ? 9.5 + s : -1) }
        else if (s == 3) { sps = (w == 2 ? (b >= 64 ? 74.2 : 20.9) : (b >= 64 ? 50 : 30)); peak = (b >= 64 ? 39.9 : 15.2) }
        else { sps = (w == 2 ? (b >= 64 ? 386 : 94) : (b >= 64 ? 198.6 : 80)); peak = (b >= 64 ? 43.2 : 16.4) - (w == 2 ? 3 : 0) }
        if (st != "ok") { sps = 0; peak = 80 }
        ranks = sprintf("%.2f", peak); if (w == 2) ranks = ranks "," sprintf("%.2f", peak - 0.1)
        step = (sps > 0 ? w * b * 1000 / sps : 0)
        printf "RESULT impl=%s mode=%s model=%s precision=bf16 batch=%d seq=128 samples_per_s=%.2f tokens_per_s=%.0f " \
               "tflops=%.2f peak_gib=%.2f status=%s stage=%d world=%d peak_gib_ranks=%s", impl, mode, model, b, sps, sps * 256,
               sps * 5.809e11 / 1e12, peak, st, s, w, ranks
        if (impl == "train_t5") printf " comm_ms_per_step=%.2f", comm
        printf " step_ms=%.1f\n", step }'
    [ "$status" = oom ] && [ "$impl" = deepspeed ] && [ "$w" -gt 1 ] && return 17
    return 0
}

# ---- the plan: slots of one 2-GPU run or two 1-GPU runs (one per GPU) --------------------------
SLOTS=()
add_pairs() {  # add_pairs SPEC...: 1-GPU runs, two per slot
    while [ $# -ge 2 ]; do SLOTS+=("$1;$2"); shift 2; done
    [ $# = 1 ] && SLOTS+=("$1")
}
in_stages() { local s out=""; for s in "$@"; do [[ " $STAGES " == *" $s "* ]] && out+=" $s"; done; echo $out; }
if want train_t5; then
    one=(); for s in $STAGES; do for b in $BATCHES; do one+=("train_t5 plain $s 1 $b"); done; done
    [ "$CKPT" = 1 ] && for s in $STAGES; do one+=("train_t5 ckpt $s 1 $CKPT_BATCH"); done
    add_pairs "${one[@]}"
    for s in $STAGES; do for b in $BATCHES; do SLOTS+=("train_t5 plain $s 2 $b"); done; done
    [ "$CKPT" = 1 ] && for s in $STAGES; do SLOTS+=("train_t5 ckpt $s 2 $CKPT_BATCH"); done
fi
if want deepspeed; then  # 2 GPUs first (every acceptance check has them), stages 2 and 3 first
    for s in $(in_stages 2 3 0 1); do for b in $BATCHES; do SLOTS+=("deepspeed plain $s 2 $b"); done; done
    for s in $(in_stages 2 3 0 1); do
        one=(); for b in $BATCHES; do one+=("deepspeed plain $s 1 $b"); done
        add_pairs "${one[@]}"
    done
fi

# ---- run the plan ------------------------------------------------------------------------------
PRE_SLOT=-1; PRE_PIDS=(); PRE_TMPS=(); PRE_WFS=()
is_ds_slot() { [[ "$1" != *train_t5* ]]; }
gpus_for() {  # gpus_for SPEC INDEX_IN_SLOT
    local impl mode s w b; read -r impl mode s w b <<<"$1"
    if [ "$w" -gt 1 ]; then seq -s, 0 $((w - 1)); else echo "$2"; fi
}
prestart() {  # prestart SLOT_INDEX: DeepSpeed runs import while the current slot runs
    local i=$1 specs k
    IFS=';' read -ra specs <<<"${SLOTS[$i]}"
    PRE_SLOT=$i; PRE_PIDS=(); PRE_TMPS=(); PRE_WFS=()
    for k in "${!specs[@]}"; do
        local wf; wf=$(mktemp -u "$LOGDIR/.go.XXXXXX")
        launch "${specs[$k]}" "$(gpus_for "${specs[$k]}" "$k")" "$wf"
        PRE_PIDS+=("$LPID"); PRE_TMPS+=("$LTMP"); PRE_WFS+=("$wf")
    done
}
for i in "${!SLOTS[@]}"; do
    IFS=';' read -ra specs <<<"${SLOTS[$i]}"
    paired=$(( ${#specs[@]} > 1 ? 1 : 0 ))
    pre=$(( PRE_SLOT == i ? 1 : 0 ))
    # runs that cannot happen at all
    why=""
    if is_ds_slot "${SLOTS[$i]}"; then ds_ready || why=$DS_WHY; elif [ "$HAVE_TT5" = 0 ]; then why=$TT5_WHY; fi
    est=0; for sp in "${specs[@]}"; do e=$(est_s "$sp" $pre); [ "$e" -gt $est ] && est=$e; done
    [ -z "$why" ] && [ $(( $(now) + est )) -gt "$DEADLINE" ] && why=deadline
    if [ -n "$why" ]; then
        if [ $pre = 1 ]; then  # let the waiting processes end themselves
            for wf in "${PRE_WFS[@]}"; do echo skip >"$wf"; done
            for p in "${PRE_PIDS[@]}"; do wait "$p"; done
            for t in "${PRE_TMPS[@]}"; do cat "$t" >>"$FULL"; rm -f "$t"; done
            rm -f "${PRE_WFS[@]}"; PRE_SLOT=-1
        fi
        for sp in "${specs[@]}"; do not_run "$sp" "$why"; done
        continue
    fi
    if [ $pre = 1 ]; then
        pids=("${PRE_PIDS[@]}"); tmps=("${PRE_TMPS[@]}")
        for wf in "${PRE_WFS[@]}"; do echo go >"$wf"; done
        wfs=("${PRE_WFS[@]}"); PRE_SLOT=-1
    else
        pids=(); tmps=(); wfs=()
        for k in "${!specs[@]}"; do
            launch "${specs[$k]}" "$(gpus_for "${specs[$k]}" "$k")"
            pids+=("$LPID"); tmps+=("$LTMP")
        done
    fi
    log "started: ${SLOTS[$i]//;/ + } (estimated ${est}s$([ $paired = 1 ] && echo ", one per GPU")$([ $pre = 1 ] && echo ", imported while the previous slot ran"))"
    # the next slot's DeepSpeed runs import meanwhile (when they could still make the deadline)
    j=$((i + 1))
    if [ $j -lt ${#SLOTS[@]} ] && is_ds_slot "${SLOTS[$j]}" && [ "$DS_OK" = 1 ]; then
        prestart $j
    fi
    for k in "${!specs[@]}"; do
        wait "${pids[$k]}"; rc=$?
        collect "${specs[$k]}" "${tmps[$k]}" $rc "$(gpus_for "${specs[$k]}" "$k")" $paired
    done
    [ ${#wfs[@]} -gt 0 ] && rm -f "${wfs[@]}"
    [ "$FAKE" = 1 ] && FAKE_CLOCK=$((FAKE_CLOCK + est))
done
# a JIT build nobody waited for (no DeepSpeed slot ran)
[ -n "$JIT_PID" ] && [ "$JIT_DONE" = 0 ] && { wait "$JIT_PID"; cat "$LOGDIR/jit.log" >>"$FULL"; }

# ---- tables ------------------------------------------------------------------------------------
"$PY" bench/zero_scaling_table.py "$LOG" --stages "$STAGES" --batches "$BATCHES" --impls "$IMPLS" --model "$MODEL" \
    --note "1 GPU rows ran two at a time, one per GPU (CUDA_VISIBLE_DEVICES=0 and 1 at once, same host); 2-GPU rows alone." \
    --note "Steps: $STEPS timed after $WARMUP warm-up; DeepSpeed stage 3: $DS3_STEPS after $DS3_WARMUP. samples/s: all GPUs together." \
    --note "Stages 0-2: configs/ds_config_zero2.json with \"stage\" replaced; stage 3: configs/ds_config_zero3.json (both tools)." \
    --note "DeepSpeed = HF T5ForConditionalGeneration + DeepSpeed, config \"auto\"s filled by transformers (bench/ds_baseline.py)." \
    --note "Exposed comm = 2-GPU step time - 1-GPU step time. Raw lines: $LOG; full output: $FULL. Took $(now)s$([ "$FAKE" = 1 ] && echo ' (fake clock)')." \
    >"$TABLE" 2>>"$FULL" || echo "error: bench/zero_scaling_table.py failed (scaling_full.log)"
echo
cat "$TABLE"
