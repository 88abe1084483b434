#!/usr/bin/env bash
# bench/throughput.sh: train_t5 against HF transformers (eager and torch.compile) on one GPU.
# T5 training throughput at src = tgt = 128 tokens, random-init weights, then the largest batch
# under a 24 GiB memory cap (fp16, without and with gradient checkpointing). Prints two tables
# last; every raw RESULT line goes to $OUT/bench.log (when OUT is set, else $BENCH_LOGDIR).
#
#   bash bench/throughput.sh                  # everything, < 9 minutes on one H200
#   BENCH_QUICK=1 bash bench/throughput.sh    # only the B=16 / B=64 bf16 rows, eager HF (~2 min)
#
# Environment (defaults in brackets):
#   TRAIN_T5 [./train_t5]     the binary; a missing one gives n/a cells, HF still runs
#   PYTHON [python3]          python with torch + transformers
#   BENCH_MODEL [t5-large]    model preset for both tools
#   BENCH_QUICK [0]           1: bf16 only, B=16 and 64, no torch.compile, no cap section
#   BENCH_PRECISIONS ["bf16 fp16"]  BENCH_BATCHES ["16 64"]   rows of the first table
#   BENCH_HF_COMPILE [1]      1: measure HF torch.compile once (bf16, the largest of BENCH_BATCHES)
#   BENCH_CAP [1]             1: run the 24 GiB-cap section
#   BENCH_CAP_GIB [24]        the cap
#   BENCH_HF_CAP [measure]    measure | anchor: HF figures of the cap section from DESIGN.md's anchors
#   BENCH_DEADLINE_S [510]    optional HF runs that would end after this are skipped (anchor shown)
#   BENCH_STEPS [20] BENCH_WARMUP [5]   timed and warm-up steps of each measurement
#   TT5_MAX_BATCH [1024]      upper bound of train_t5's batch search under the cap
set -u

TRAIN_T5=${TRAIN_T5:-./train_t5}
PY=${PYTHON:-python3}
MODEL=${BENCH_MODEL:-t5-large}
SEQ=128
STEPS=${BENCH_STEPS:-20}
WARMUP=${BENCH_WARMUP:-5}
QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
    PRECS=${BENCH_PRECISIONS:-bf16}; DO_COMPILE=${BENCH_HF_COMPILE:-0}; DO_CAP=${BENCH_CAP:-0}
else
    PRECS=${BENCH_PRECISIONS:-bf16 fp16}; DO_COMPILE=${BENCH_HF_COMPILE:-1}; DO_CAP=${BENCH_CAP:-1}
fi
BATCHES=${BENCH_BATCHES:-16 64}
CAP=${BENCH_CAP_GIB:-24}
HF_CAP=${BENCH_HF_CAP:-measure}
DEADLINE=${BENCH_DEADLINE_S:-510}
TT5_MAX_BATCH=${TT5_MAX_BATCH:-1024}
export PYTHONUNBUFFERED=1

if [ -n "${OUT:-}" ]; then LOGDIR=$OUT; else LOGDIR=${BENCH_LOGDIR:-$(mktemp -d /tmp/t5bench.XXXXXX)}; fi
mkdir -p "$LOGDIR"
LOG=$LOGDIR/bench.log         # RESULT lines of the measurements (trial lines prefixed "# trial")
FULL=$LOGDIR/bench_full.log   # everything every command printed
: >"$LOG"; : >"$FULL"

# Anchors (docs/DESIGN.md, "Measured anchors": one H200, transformers 5.17, torch 2.11), used when
# an HF run is skipped; shown with "anchor, not re-measured". Key: mode|precision|batch.
declare -A ANCHOR_SPS=([eager|bf16|16]=65.6 [eager|fp16|64]=250 [eager|bf16|64]=234 [compile|bf16|64]=468 [eager|bf16|128]=310)
declare -A ANCHOR_TF=([eager|bf16|16]=38 [eager|fp16|64]=145 [eager|bf16|64]=136 [compile|bf16|64]=272 [eager|bf16|128]=180)
declare -A ANCHOR_PEAK=([eager|bf16|16]=17.3 [eager|fp16|64]=40.0 [eager|bf16|64]=40.0 [compile|bf16|64]=29.1 [eager|bf16|128]=70.4)
# 24 GiB cap, fp16, t5-large: no GC largest 24 (32 OOM, no samples/s recorded); GC largest 128 (192 OOM).
declare -A ANCHOR_CAP_B=([0]=24 [1]=128) ANCHOR_CAP_OOM=([0]=32 [1]=192) ANCHOR_CAP_SPS=([0]=- [1]=229) ANCHOR_CAP_PEAK=([0]=- [1]=17.1)

log() { printf '[%4ds] %s\n' "$SECONDS" "$*"; }
kv() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2fx", a / b; else print "-" }'; }
remaining() { echo $((DEADLINE - SECONDS)); }

# run_capture TIMEOUT_S CMD...: runs CMD, appends its output to $FULL; sets LINE (its last RESULT
# line, empty if none) and RC.
run_capture() {
    local t=$1; shift
    local tmp; tmp=$(mktemp)
    echo "+ $* (timeout ${t}s, at ${SECONDS}s)" >>"$FULL"
    timeout -k 10 "$t" "$@" >"$tmp" 2>&1
    RC=$?
    cat "$tmp" >>"$FULL"
    LINE=$(grep '^RESULT ' "$tmp" | tail -n 1)
    if [ -z "$LINE" ]; then
        echo "  (no RESULT line, exit code $RC; last lines:)" >>"$FULL"
        tail -n 5 "$tmp" | sed 's/^/    /'
    fi
    rm -f "$tmp"
}

# ---------------------------------------------------------------------------------------------
log "throughput: model=$MODEL seq=$SEQ steps=$STEPS warmup=$WARMUP quick=$QUICK logs in $LOGDIR"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } | sed 's/^/GPU: /'
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
HAVE_TT5=0
if [ -x "$TRAIN_T5" ]; then HAVE_TT5=1; else log "NOTE: $TRAIN_T5 not found or not executable (make): train_t5 cells are n/a"; fi

declare -A TT5 HF HFRC   # key: precision|batch; value: the RESULT line (HFRC: exit code of a run with none)
TIMEOUT_ROW=240

# 1. train_t5 rows
for p in $PRECS; do for b in $BATCHES; do
    [ $HAVE_TT5 = 1 ] || continue
    run_capture $TIMEOUT_ROW "$TRAIN_T5" bench --model "$MODEL" --init random --batch "$b" --seq $SEQ --"$p" \
        --steps "$STEPS" --warmup "$WARMUP"
    TT5[$p|$b]=$LINE; [ -n "$LINE" ] && echo "$LINE" >>"$LOG"
    log "train_t5 $p B=$b: $(kv "$LINE" samples_per_s) samples/s status=$(kv "$LINE" status) (rc $RC)"
done; done

# 2. HF eager rows (~25 s each on an H200, start-up included)
for p in $PRECS; do for b in $BATCHES; do
    if [ "$(remaining)" -lt 40 ]; then log "HF eager $p B=$b: skipped (deadline)"; continue; fi
    run_capture $(( $(remaining) < TIMEOUT_ROW ? $(remaining) : TIMEOUT_ROW )) \
        "$PY" bench/hf_baseline.py --model "$MODEL" --precision "$p" --batch "$b" --seq $SEQ \
        --steps "$STEPS" --warmup "$WARMUP"
    HF[$p|$b]=$LINE; [ -n "$LINE" ] && echo "$LINE" >>"$LOG"; [ -z "$LINE" ] && HFRC[eager|$p|$b]=$RC
    log "HF eager $p B=$b: $(kv "$LINE" samples_per_s) samples/s status=$(kv "$LINE" status) (rc $RC)"
done; done

# 3. HF torch.compile, once (compilation takes 1-2 minutes); before the cap section, which can
#    fall back to anchors
CB=$(echo $BATCHES | tr ' ' '\n' | sort -n | tail -n 1)
CLINE=""
if [ "$DO_COMPILE" = 1 ] && [[ " $PRECS " == *" bf16 "* ]]; then
    if [ "$(remaining)" -ge 150 ]; then
        run_capture "$(remaining)" "$PY" bench/hf_baseline.py --model "$MODEL" --precision bf16 --batch "$CB" --seq $SEQ \
            --steps "$STEPS" --warmup "$WARMUP" --compile
        CLINE=$LINE; [ -n "$LINE" ] && echo "$LINE" >>"$LOG"; [ -z "$LINE" ] && HFRC[compile|bf16|$CB]=$RC
        log "HF compile bf16 B=$CB: $(kv "$LINE" samples_per_s) samples/s status=$(kv "$LINE" status) (rc $RC)"
    else
        log "HF compile: skipped ($(remaining)s left before the deadline); anchor shown"
    fi
fi

# 4. the 24 GiB-cap section, fp16: largest batch without / with gradient checkpointing
declare -A CAP_TT5 CAP_TT5_OOM CAP_HF
tt5_fits() {  # tt5_fits B GCFLAG...: a 3-step trial under the cap
    local b=$1; shift
    run_capture 60 "$TRAIN_T5" bench --model "$MODEL" --init random --batch "$b" --seq $SEQ --fp16 \
        --steps 2 --warmup 1 --max_gpu_memory "$CAP" "$@"
    [ -n "$LINE" ] && echo "# trial $LINE" >>"$LOG"
    log "  train_t5 trial B=$b $*: $(kv "$LINE" status) (rc $RC)"
    [ "$(kv "$LINE" status)" = ok ]
}
tt5_search() {  # sets LO (largest that fits, 0 if none) and HI (first failure, "none" if none)
    local b=8 lo=0 hi="" step mid
    while :; do
        if tt5_fits $b "$@"; then
            lo=$b; [ $b -ge "$TT5_MAX_BATCH" ] && break
            b=$(( b * 2 > TT5_MAX_BATCH ? TT5_MAX_BATCH : b * 2 ))
        else hi=$b; break; fi
    done
    if [ $lo = 0 ]; then
        b=$hi
        while [ $b -gt 1 ]; do b=$(( b / 2 )); if tt5_fits $b "$@"; then lo=$b; break; fi; hi=$b; done
    fi
    if [ $lo -gt 0 ] && [ -n "$hi" ]; then
        step=$(( lo >= 8 ? 8 : 1 ))
        while [ $(( hi - lo )) -gt $step ]; do
            mid=$(( (lo + hi) / 2 / step * step )); [ $mid -le $lo ] && break
            if tt5_fits $mid "$@"; then lo=$mid; else hi=$mid; fi
        done
    fi
    LO=$lo; HI=${hi:-none}
}
if [ "$DO_CAP" = 1 ]; then
    for gc in 0 1; do
        gcflag=(); [ $gc = 1 ] && gcflag=(--gradient_checkpointing)
        if [ $HAVE_TT5 = 1 ]; then
            tt5_search "${gcflag[@]}"
            CAP_TT5_OOM[$gc]=$HI; CAP_TT5[$gc]=""
            if [ "$LO" -gt 0 ]; then
                run_capture $TIMEOUT_ROW "$TRAIN_T5" bench --model "$MODEL" --init random --batch "$LO" --seq $SEQ \
                    --fp16 --steps "$STEPS" --warmup "$WARMUP" --max_gpu_memory "$CAP" "${gcflag[@]}"
                CAP_TT5[$gc]=$LINE; [ -n "$LINE" ] && echo "$LINE" >>"$LOG"
            fi
            log "train_t5 cap ${CAP}GiB fp16 gc=$gc: largest B=$LO (first failure $HI), $(kv "${CAP_TT5[$gc]}" samples_per_s) samples/s"
        fi
        # HF: one process doubles then bisects (estimated ~30 s without GC, ~60 s with, on an H200)
        need=$(( gc == 1 ? 75 : 45 ))
        CAP_HF[$gc]=""
        if [ "$HF_CAP" = measure ] && [ "$(remaining)" -ge $need ]; then
            hfgc=(); [ $gc = 1 ] && hfgc=(--gradient-checkpointing)
            run_capture "$(remaining)" "$PY" bench/hf_baseline.py --model "$MODEL" --precision fp16 --seq $SEQ \
                --batch 8 --find-max-batch --max-gpu-memory "$CAP" --steps "$STEPS" --warmup "$WARMUP" "${hfgc[@]}"
            if [ -n "$LINE" ]; then CAP_HF[$gc]=$LINE; echo "$LINE" >>"$LOG"; else HFRC[cap|$gc]=$RC; fi
            log "HF cap ${CAP}GiB fp16 gc=$gc: largest B=$(kv "$LINE" batch) (first OOM $(kv "$LINE" first_oom_batch)), $(kv "$LINE" samples_per_s) samples/s"
        else
            log "HF cap ${CAP}GiB fp16 gc=$gc: not measured (BENCH_HF_CAP=$HF_CAP, $(remaining)s left); anchor shown"
        fi
    done
fi

# ---------------------------------------------------------------------------------------------
# Tables. A cell is "n/a" when no RESULT line came back, "oom" when status=oom.
cell() {  # cell LINE KEY
    local l=$1 k=$2
    if [ -z "$l" ]; then echo n/a; elif [ "$(kv "$l" status)" != ok ]; then kv "$l" status; else kv "$l" "$k"; fi
}
fmt_row() { printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$@"; }

echo
echo "## $MODEL training throughput, one GPU, src = tgt = $SEQ tokens, random init ($STEPS timed steps after $WARMUP)"
echo
fmt_row model precision batch "train_t5 samples/s" "HF samples/s" "ratio" "train_t5 TFLOP/s" "HF TFLOP/s" \
    "train_t5 peak GiB" "HF peak GiB" "HF figures"
fmt_row --- --- --- --- --- --- --- --- --- --- ---
hf_cols() {  # hf_cols MODE PRECISION BATCH LINE: sets HS HT HP SRC
    local mode=$1 p=$2 b=$3 l=$4 key="$1|$2|$3"
    if [ -n "$l" ]; then
        HS=$(cell "$l" samples_per_s); HT=$(cell "$l" tflops); HP=$(kv "$l" peak_gib); SRC="measured, HF $mode"
    elif [ -n "${ANCHOR_SPS[$key]:-}" ] && [ "$MODEL" = t5-large ]; then
        HS=${ANCHOR_SPS[$key]}; HT=${ANCHOR_TF[$key]}; HP=${ANCHOR_PEAK[$key]}; SRC="anchor, not re-measured (HF $mode)"
    else
        HS=n/a; HT=n/a; HP=n/a; SRC="not run (HF $mode)"
    fi
    if [ -n "${HFRC[$key]:-}" ]; then SRC="HF run FAILED (exit ${HFRC[$key]}, bench_full.log); $SRC"; fi
}
for p in $PRECS; do for b in $BATCHES; do
    t=${TT5[$p|$b]:-}
    hf_cols eager "$p" "$b" "${HF[$p|$b]:-}"
    fmt_row "$MODEL" "$p" "$b" "$(cell "$t" samples_per_s)" "$HS" "$(ratio "$(cell "$t" samples_per_s)" "$HS")" \
        "$(cell "$t" tflops)" "$HT" "$( [ -n "$t" ] && kv "$t" peak_gib || echo n/a)" "$HP" "$SRC"
    if [ "$DO_COMPILE" = 1 ] && [ "$p" = bf16 ] && [ "$b" = "$CB" ]; then
        hf_cols compile "$p" "$b" "$CLINE"
        fmt_row "$MODEL" "$p" "$b" "$(cell "$t" samples_per_s)" "$HS" "$(ratio "$(cell "$t" samples_per_s)" "$HS")" \
            "$(cell "$t" tflops)" "$HT" "$( [ -n "$t" ] && kv "$t" peak_gib || echo n/a)" "$HP" "$SRC"
    fi
done; done

if [ "$DO_CAP" = 1 ]; then
    echo
    echo "## $MODEL fp16 under a ${CAP} GiB memory cap: largest batch (multiples of 8) and its throughput"
    echo
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "gradient checkpointing" "train_t5 largest B (first fail)" \
        "train_t5 samples/s" "train_t5 peak GiB" "HF largest B (first OOM)" "HF samples/s" "HF peak GiB" "ratio samples/s" "HF figures"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' --- --- --- --- --- --- --- --- ---
    for gc in 0 1; do
        t=${CAP_TT5[$gc]:-}
        if [ $HAVE_TT5 = 1 ]; then
            if [ -n "$t" ]; then tb="$(kv "$t" batch) (${CAP_TT5_OOM[$gc]})"; else tb="none fits (${CAP_TT5_OOM[$gc]:-?})"; fi
        else tb=n/a; fi
        h=${CAP_HF[$gc]:-}
        if [ -n "$h" ]; then
            hb="$(kv "$h" batch) ($(kv "$h" first_oom_batch))"; hs=$(cell "$h" samples_per_s); hp=$(kv "$h" peak_gib); src=measured
        elif [ "$MODEL" = t5-large ]; then
            hb="${ANCHOR_CAP_B[$gc]} (${ANCHOR_CAP_OOM[$gc]})"; hs=${ANCHOR_CAP_SPS[$gc]}; hp=${ANCHOR_CAP_PEAK[$gc]}
            src="anchor, not re-measured"
        else hb=n/a; hs=n/a; hp=n/a; src="not run"; fi
        if [ -n "${HFRC[cap|$gc]:-}" ]; then src="HF run FAILED (exit ${HFRC[cap|$gc]}, bench_full.log); $src"; fi
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$( [ $gc = 1 ] && echo yes || echo no)" "$tb" \
            "$(cell "$t" samples_per_s)" "$( [ -n "$t" ] && kv "$t" peak_gib || echo n/a)" "$hb" "$hs" "$hp" \
            "$(ratio "$(cell "$t" samples_per_s)" "$hs")" "$src"
    done
fi
echo
echo "ratio = train_t5 / HF samples/s. TFLOP/s = model FLOPs (docs/BENCH.md) x samples/s. peak GiB: train_t5's"
echo "own figure; HF: torch.cuda.max_memory_allocated. Raw RESULT lines: $LOG; full output: $FULL. Took ${SECONDS}s."
