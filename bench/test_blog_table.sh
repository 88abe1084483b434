#!/usr/bin/env bash
# bench/test_blog_table.sh: checks bench/blog_table.sh's rows, budget, table and chart without a
# GPU (BENCH_FAKE=1 runs made-up results through the same code), and bench/blog_table_md.py's
# acceptance verdicts on hand-written rows. Needs bash, python3 (standard library) and
# build/bench/blog_chart (built here when missing). Ends with "N passed, M failed".
#   bash bench/test_blog_table.sh
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d /tmp/test_blog_table.XXXXXX); trap 'rm -rf "$T"' EXIT
pass=0; fail=0
check() {  # check NAME CONDITION-COMMAND...
    local name=$1; shift
    if "$@"; then echo "OK     $name"; pass=$((pass + 1)); else echo "NOT OK $name"; fail=$((fail + 1)); fi
}
has() { grep -qF -- "$2" "$1"; }
table_rows() { grep -c '^| [0-9]* | ' "$1"; }
png_ok() {  # FILE: a PNG signature and an IHDR of width 1500
    python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
sys.exit(0 if b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR" and struct.unpack(">I", b[16:20])[0] == 1500
         and len(b) > 20000 else 1)
PY
}
make -s build/bench/blog_chart > "$T/make.log" 2>&1 || { echo "NOT OK build/bench/blog_chart did not build: $(tail -3 "$T/make.log")"; echo "0 passed, 1 failed"; exit 1; }

# 1. every row, two fake GPUs
env OUT="$T/all" BENCH_FAKE=1 BT_WORKDIR="$T/w" bash bench/blog_table.sh > "$T/all.out" 2>&1; rc=$?
check "all rows: exit 0" [ $rc = 0 ]
check "all rows: 11 table rows (the post's 8 and ours 3)" [ "$(table_rows "$T/all/blog_table.md")" = 11 ]
check "all rows: said to be fake in the table" has "$T/all/blog_table.md" "FAKE RESULTS"
check "all rows: the post's baseline figures beside ours" has "$T/all/blog_table.md" "| 1 | baseline (DDP) | 16, 30.9, 56.3 |"
check "all rows: t5-3b without ZeRO is refused by the plan, as the post ran out of memory" \
    has "$T/all/blog_table.md" "| 7 | t5-3b --fp16, 1 GPU | OOM at 1, -, - | CUDA out of memory at batch 1 | does not fit"
check "all rows: acceptance 3 decided (fake batch 16 < 20: FAIL)" has "$T/all/blog_table.md" "train_t5 batch 16: FAIL"
check "all rows: FSDP named where FairScale was" has "$T/all/blog_table.md" "FSDP SHARD_GRAD_OP"
check "all rows: fewer eval pairs than the post's are said in the table" has "$T/all/blog_table.md" "fewer than the post's 2000 / 500"
check "all rows: the chart is a 1500-pixel-wide PNG" png_ok "$T/all/blog_table.png"
check "all rows: the JSON holds 11 rows" python3 -c "import json,sys; sys.exit(len(json.load(open('$T/all/blog_table.json'))['rows']) != 11)"
# the phases: every train_t5 row before any HF row; the offload row (6) and the t5-3b rows (7, 8)
# after the others, so that the background build and init overlap our plain rows
order=$(sed -n 's/^row \([0-9]*\): \(train_t5\|HF\) .*/\2:\1/p' "$T/all.out" | tr '\n' ' ')
check "all rows: train_t5's rows first, offload and t5-3b ones last, then HF's ($order)" \
    [ "$order" = "train_t5:1 train_t5:2 train_t5:3 train_t5:4 train_t5:5 train_t5:9 train_t5:10 train_t5:11 train_t5:6 train_t5:7 train_t5:8 HF:1 HF:2 HF:3 HF:4 HF:5 HF:9 HF:10 HF:11 HF:6 HF:7 HF:8 " ]

# 2. one GPU: only the one-GPU rows (7, 8)
env OUT="$T/one" BENCH_FAKE=1 BT_FAKE_GPUS=1 BT_WORKDIR="$T/w" bash bench/blog_table.sh > "$T/one.out" 2>&1
check "one GPU: rows 7 and 8 only" [ "$(table_rows "$T/one/blog_table.md")" = 2 ]
env OUT="$T/one2" BENCH_FAKE=1 BT_FAKE_GPUS=1 BT_ROWS="1 8" BT_WORKDIR="$T/w" bash bench/blog_table.sh > "$T/one2.out" 2>&1
check "one GPU: a two-GPU row asked for is skipped, saying so" has "$T/one2.out" "row 1: needs 2 GPUs, 1 visible"

# 3. the budget: past it, rows are listed as not run
env OUT="$T/budget" BENCH_FAKE=1 BT_BUDGET=-1 BT_ROWS="1 2" BT_WORKDIR="$T/w" bash bench/blog_table.sh > "$T/budget.out" 2>&1
check "budget spent: both rows listed as not run" [ "$(grep -c 'not run: the time budget was spent' "$T/budget/blog_table.md")" = 2 ]
env OUT="$T/bad" BENCH_FAKE=1 BT_ROWS="12" BT_WORKDIR="$T/w" bash bench/blog_table.sh > "$T/bad.out" 2>&1
check "an unknown row is named" has "$T/bad.out" "row 12: no such row"

# 4. the verdicts on hand-written rows: a smaller batch, a slower eval, an HF lower bound
mkdir -p "$T/v/row1" "$T/v/row2" "$T/v/row3"
printf '%s\n' "1|a|2|t5-large|16|30.9|56.3|x|y" "2|b|2|t5-large|20|21.5|53.5|x|y" "3|c|2|t5-large|30|25.9|47.6|x|y" > "$T/v/rowdefs.txt"
echo '{"batch": 24, "train_s": 5, "eval_s": 9}' > "$T/v/row1/train_t5.json"
echo '{"batch": 30, "train_s": 20, "eval_s": 30, "batch_is_lower_bound": false}' > "$T/v/row1/hf.json"
echo '{"batch": 30, "train_s": 5, "eval_s": 40}' > "$T/v/row2/train_t5.json"
echo '{"batch": 24, "train_s": 20, "eval_s": 30, "batch_is_lower_bound": false}' > "$T/v/row2/hf.json"
echo '{"batch": 30, "train_s": 5, "eval_s": 9}' > "$T/v/row3/train_t5.json"
echo '{"batch": 30, "train_s": 20, "eval_s": 30, "batch_is_lower_bound": true}' > "$T/v/row3/hf.json"
python3 bench/blog_table_md.py "$T/v" 2026-01-01 test 2000 500 0 > "$T/v.out" 2>&1
check "verdict: a smaller batch than HF's fails" grep -qE '^\| 1 \| a \|.*\| FAIL \| PASS, PASS \|$' "$T/v/blog_table.md"
check "verdict: a slower eval fails" grep -qE '^\| 2 \| b \|.*\| PASS \| PASS, FAIL \|$' "$T/v/blog_table.md"
check "verdict: HF's lower bound equal to ours is undecided" grep -qE '^\| 3 \| c \|.*≥30.*undecided' "$T/v/blog_table.md"
check "verdict: no FAKE banner on real rows" bash -c "! grep -q FAKE '$T/v/blog_table.md'"

# 5. the chart refuses what it cannot draw
build/bench/blog_chart "$T/nope.json" "$T/x.png" > "$T/c1.out" 2>&1; rc=$?
check "chart: a missing table is one error naming it" bash -c "[ $rc = 1 ] && grep -q 'nope.json: cannot read it' '$T/c1.out'"
echo '{"rows": []}' > "$T/empty.json"
build/bench/blog_chart "$T/empty.json" "$T/x.png" > "$T/c2.out" 2>&1; rc=$?
check "chart: a table without rows is one error" bash -c "[ $rc = 1 ] && grep -q 'no \"rows\" array with rows' '$T/c2.out' && [ ! -e '$T/x.png' ]"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
