#!/usr/bin/env bash
# tests/bench_fp8.sh: `train_t5 bench --fp8` and its options through ./train_t5 on the CPU (the
# fp32 reference emulates the rounding), on the fixture model tests/fixtures/trainer_model:
#   1. --fp8 --fp8_bf16 attention_output runs, the start-up line names what stays bf16 and the
#      RESULT line says fp8; without --fp8_bf16 the line names the LM head alone;
#   2. refusals, each one line naming the flag and exiting non-zero: --fp8_bf16 without --fp8,
#      an unknown name in --fp8_bf16 (--fp8 with --fp16 needs a GPU to reach its refusal).
# Prints OK / NOT OK per check and "N passed, M failed"; exits non-zero on a failure.
#   TRAIN_T5=path/to/binary tests/bench_fp8.sh    (default ./train_t5)
set -u
cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
BIN=${TRAIN_T5:-./train_t5}
case $BIN in /*) ;; *) BIN="$REPO/$BIN" ;; esac
T=$(mktemp -d /tmp/t5_bench_fp8_XXXXXX); trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }
B=(bench --model "$REPO/tests/fixtures/trainer_model" --device cpu --batch 2 --seq 16 --steps 1 --warmup 0)

# ---- 1. runs ------------------------------------------------------------------------------------
timeout 300 "$BIN" "${B[@]}" --fp8 --fp8_bf16 attention_output >"$T/keep.log" 2>&1; rc=$?
check "[ $rc -eq 0 ] && grep -q 'RESULT .*precision=fp8-fp32' $T/keep.log" "bench --fp8 --fp8_bf16 attention_output runs (exit $rc)"
check "grep -q '^fp8: .*: LM head, attention outputs; ' $T/keep.log" "its start-up line names the LM head and the attention outputs as bf16"
timeout 300 "$BIN" "${B[@]}" --fp8 >"$T/plain.log" 2>&1; rc=$?
check "[ $rc -eq 0 ] && grep -q '^fp8: .*: LM head; ' $T/plain.log" "bench --fp8: the LM head alone stays bf16 (exit $rc)"

# ---- 2. refusals ----------------------------------------------------------------------------------
refused() {  # refused NAME EXPECTED_TEXT ARGS...: non-zero exit, one error line holding the text
    local name=$1 want=$2; shift 2
    timeout 120 "$BIN" "${B[@]}" "$@" >"$T/r.log" 2>&1; local rc=$?
    check "[ $rc -ne 0 ] && [ \$(grep -c '^error' $T/r.log) -eq 1 ] && grep -q -- \"$want\" $T/r.log" \
          "$name: exit $rc, $(grep -m1 '^error' "$T/r.log" | cut -c1-120)"
}
refused "--fp8_bf16 without --fp8" "--fp8_bf16 is an --fp8 option: add --fp8" --fp8_bf16 attention_output
refused "--fp8_bf16 with an unknown name" "unknown name \\\"bogus\\\"" --fp8 --fp8_bf16 attention_output,bogus
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
