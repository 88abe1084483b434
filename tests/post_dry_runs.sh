#!/usr/bin/env bash
# tests/post_dry_runs.sh: the eight command lines of the 2021 post in docs/POST.md ("The same runs
# with train_t5"), taken from that page itself, dry-run with --explain on this machine: each line as
# written, with --num_gpus 2, and as two launchers start its rank 0 on two GPUs (torchrun
# --nproc_per_node 2 and deepspeed --num_gpus 2: their variables and argv), 32 runs. No GPU is
# needed (a CPU-only build plans them too). Each must exit 0 and print its plan, and the plan must
# equal what the GPU machine printed for the same line: tests/fixtures/post_dry_runs/, made there
# by `bash tests/post_dry_runs.sh --write DIR` (the lines that name the machine -- "device:" and
# "--explain: planned for ...", "--explain: host check on this machine: ..." -- are left out of
# the comparison; temporary paths read TMP).
# The other ranks of a launch exit 0 without printing (checked once). Runs with ./train_t5 (a
# CUDA build wherever nvcc exists) and again with build-asan/train_t5, the CPU-only build
# `make test` makes (HAVE_NVCC=0), when it is there; TRAIN_T5=path runs that binary alone.
# Prints OK / NOT OK per line and "N passed, M failed"; exits non-zero on a failure.
set -u
cd "$(dirname "$0")/.." || exit 2
if [ -z "${TRAIN_T5:-}" ] && [ -z "${POST_DRY_INNER:-}" ] && [ -x build-asan/train_t5 ]; then
    # both builds, one summary line
    out1=$(POST_DRY_INNER=1 TRAIN_T5=./train_t5 bash "$0" "$@"); rc1=$?
    out2=$(POST_DRY_INNER=1 TRAIN_T5=./build-asan/train_t5 bash "$0" "$@"); rc2=$?
    printf '%s\n' "$out1" | sed '$d' | sed 's/^\(OK\|NOT OK\) /&[cuda build] /'
    printf '%s\n' "$out2" | sed '$d' | sed 's/^\(OK\|NOT OK\) /&[cpu-only build] /'
    p=$(( $(tail -n 1 <<< "$out1" | cut -d' ' -f1) + $(tail -n 1 <<< "$out2" | cut -d' ' -f1) ))
    f=$(( $(tail -n 1 <<< "$out1" | cut -d' ' -f3) + $(tail -n 1 <<< "$out2" | cut -d' ' -f3) ))
    echo "$p passed, $f failed"
    [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]; exit $?
fi
BIN=${TRAIN_T5:-./train_t5}
FIX=tests/fixtures/post_dry_runs
WRITE=""
[ "${1:-}" = "--write" ] && { WRITE=${2:?usage: $0 [--write DIR]}; mkdir -p "$WRITE"; }
T=$(mktemp -d /tmp/t5_dry_XXXXXX); trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }

# docs/POST.md's block: its variables and the ./train_t5 lines (continuations joined)
DOC=docs/POST.md
awk '/^# bash; the post.s flags/{f=1} f && /^```$/{exit} f{print}' "$DOC" > "$T/block.sh"
grep -q '^\./train_t5' "$T/block.sh" || { bad "$DOC: the post's command block was not found"; echo "$pass passed, $fail failed"; exit 1; }
sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$T/block.sh" | grep '^\./train_t5' > "$T/lines"
grep -v '^\./train_t5' "$T/block.sh" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' | grep -v '^ ' > "$T/vars.sh"
# shellcheck disable=SC1091
. "$T/vars.sh"
[ "$(wc -l < "$T/lines")" -eq 8 ] || bad "$DOC: expected the post's 8 command lines, found $(wc -l < "$T/lines")"

# plan LABEL ENV... -- ARGS...: a dry run; its output normalized into $T/LABEL.plan
plan() {
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
    local out rc
    out=$(env "${envs[@]}" "$BIN" "$@" --cache_dir "$T/cache" --explain 2>&1); rc=$?
    printf '%s\n' "$out" > "$T/$label.out"
    grep -v -e '^device: ' -e '^--explain: planned for ' -e '^--explain: host check on this machine: ' <<< "$out" | sed "s#$T#TMP#g" > "$T/$label.plan"
    if [ $rc -ne 0 ]; then bad "$label: exit $rc: $(tail -n 2 <<< "$out" | tr '\n' ' ' | cut -c1-300)"; return; fi
    if ! grep -q '^largest batch: ' "$T/$label.plan" || ! grep -q '^--explain: dry run' "$T/$label.plan"; then
        bad "$label: no plan printed: $(tail -n 2 <<< "$out" | tr '\n' ' ' | cut -c1-300)"; return
    fi
    if [ -n "$WRITE" ]; then cp "$T/$label.plan" "$WRITE/$label.txt"; ok "$label: written to $WRITE"; return; fi
    if [ ! -f "$FIX/$label.txt" ]; then bad "$label: no fixture $FIX/$label.txt (make it on the GPU machine)"; return; fi
    if diff -u "$FIX/$label.txt" "$T/$label.plan" > "$T/$label.diff"; then
        ok "$label: exit 0, the plan equal to the GPU machine's ($(grep -o 'total [0-9.]*' "$T/$label.plan" | tail -n 1) GiB)"
    else bad "$label: the plan differs from the GPU machine's: $(grep '^[-+][^-+]' "$T/$label.diff" | head -n 4 | tr '\n' ' ' | cut -c1-400)"; fi
}

TORCHRUN=(WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 ROLE_RANK=0 MASTER_ADDR=127.0.0.1
          MASTER_PORT=29500 TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID=none)
DEEPSPEED=(RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 CROSS_RANK=0 CROSS_SIZE=1 LOCAL_SIZE=2)
row=0
while IFS= read -r line; do
    row=$((row + 1))
    # the line's words as bash expands them, with its output dir under $T
    eval "set -- ${line#./train_t5 }"
    args=(); gpus_flag=0
    while [ $# -gt 0 ]; do
        case $1 in
        --num_gpus) gpus_flag=1; shift 2 ;;
        --output_dir) args+=(--output_dir "$T/${2##*/}"); shift 2 ;;
        *) args+=("$1"); shift ;;
        esac
    done
    written=("${args[@]}"); [ $gpus_flag = 1 ] && written+=(--num_gpus 2)
    plan "row${row}_as_written" -- "${written[@]}"
    plan "row${row}_num_gpus2" -- "${args[@]}" --num_gpus 2
    plan "row${row}_torchrun" "${TORCHRUN[@]}" -- "${args[@]}"
    plan "row${row}_deepspeed" "${DEEPSPEED[@]}" -- --local_rank=0 "${args[@]}"
    if [ $row = 1 ] && [ -z "$WRITE" ]; then  # torchrun's rank 1: checked the flags, prints nothing, exit 0
        out=$(env "${TORCHRUN[@]/RANK=0/RANK=1}" LOCAL_RANK=1 "$BIN" "${args[@]}" --explain 2>&1); rc=$?
        [ $rc -eq 0 ] && [ -z "$out" ] && ok "row 1, torchrun's rank 1: exit 0, nothing printed (rank 0 plans for all)" \
            || bad "row 1, torchrun's rank 1: exit $rc: $(head -c 300 <<< "$out")"
    fi
done < "$T/lines"

# what the plans say, beyond equality: the post's two-GPU rows plan 2 ranks, row 7 does not fit
# 24 GiB (the post: out of memory at batch 1) and says so with exit 0, row 8 fits
grep -q 'ZeRO stage 0 over 2 ranks' "$T/row1_as_written.plan" && ok "row 1 plans ZeRO stage 0 over 2 ranks" \
    || bad "row 1: not planned over 2 ranks"
grep -q '^--explain: does NOT fit' "$T/row7_as_written.plan" && ok "row 7 (t5-3b fp16, no ZeRO) does not fit 24 GiB, said with exit 0" \
    || bad "row 7: no 'does NOT fit' verdict"
grep -q '^--explain: fits' "$T/row8_as_written.plan" && ok "row 8 (t5-3b ZeRO-2 + offload) fits 24 GiB" \
    || bad "row 8: no 'fits' verdict"
grep -q 'fp16, batch 40' "$T/row5_deepspeed.plan" && ok "row 5 under deepspeed: fp16 from configs/ds_config_no_offload.json" \
    || bad "row 5 under deepspeed: fp16 from the config not planned"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
