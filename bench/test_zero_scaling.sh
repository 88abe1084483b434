#!/usr/bin/env bash
# bench/test_zero_scaling.sh: checks bench/zero_scaling.sh's scheduling, deadline and tables without
# a GPU (BENCH_FAKE=1 runs made-up RESULT lines through the same code), and
# bench/zero_scaling_table.py on hand-written logs. Needs bash and python3 (standard library).
# Ends with "N passed, M failed"; exits non-zero on a failure.
#   bash bench/test_zero_scaling.sh
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d /tmp/test_zero_scaling.XXXXXX)
pass=0; fail=0
check() {  # check NAME CONDITION-COMMAND...
    local name=$1; shift
    if "$@"; then echo "OK     $name"; pass=$((pass + 1)); else echo "NOT OK $name"; fail=$((fail + 1)); fi
}
has() { grep -qF -- "$2" "$1"; }
hasnt() { ! grep -qF -- "$2" "$1"; }
rows() { grep -c "^| $2 " "$1"; }  # table rows starting with a stage digit
scaling_rows() { sed -n '/^## ZeRO scaling/,/^## Acceptance/p' "$1" | grep -c '^| [0-9] |'; }
run() {  # run NAME ENV...: the fake benchmark into $T/NAME
    local name=$1; shift
    env OUT="$T/$name" BENCH_FAKE=1 "$@" bash bench/zero_scaling.sh >"$T/$name.out" 2>&1
    echo $? >"$T/$name.rc"
}

# 1. everything runs: 16 rows (4 stages x 2 batches x 2 tools), every acceptance row decided
run all
O=$T/all.out
check "all: exit 0" [ "$(cat "$T/all.rc")" = 0 ]
check "all: 16 scaling rows" [ "$(scaling_rows "$O")" = 16 ]
check "all: table file = printed tables" has "$T/all/scaling_table.md" "## Acceptance"
check "all: no cell not run" hasnt "$O" "not run"
check "all: no n/a verdict" has "$O" " 0 n/a"
check "all: train_t5 stage 2 x 64 row" has "$O" "| 2 | 64 | train_t5 | 500.0 | 980.0 | 0.980 | 25.20 | 22.20 | 11.50 | 2.6 |"
check "all: DeepSpeed stage 3 x 16 row" has "$O" "| 3 | 16 | HF + DeepSpeed | 30.0 | 20.9 | 0.348 | 15.20 | 15.20 | - | 997.8 |"
check "all: scaling check 64 (target 1.95)" has "$O" "| train_t5 samples/s, 2 GPUs / 1 GPU | 2 | 64 | 2 vs 1 | 1.96 | >= 1.95 | PASS |"
check "all: stage 2 speed ratio" has "$O" "| train_t5 / DeepSpeed samples/s, stage 2 | 2 | 64 | 2 | 2.54 | >= 3 | FAIL |"
check "all: stage 3 speed ratio" has "$O" "| train_t5 / DeepSpeed samples/s, stage 3 | 3 | 16 | 2 | 25.47 | >= 10 | PASS |"
check "all: peak ratio" has "$O" "| train_t5 / DeepSpeed peak GiB | 3 | 16 | 2 | 0.41 | <= 0.5 | PASS |"
check "all: pairs stated" has "$O" "1 GPU rows ran two at a time"
check "all: 1-GPU runs paired on GPUs 0 and 1" has "$T/all/scaling.log" "world=1 batch=64 outcome=result rc=0 gpus=1 paired=1"
check "all: 2-GPU runs on 0,1" has "$T/all/scaling.log" "world=2 batch=64 outcome=result rc=0 gpus=0,1 paired=0"
check "all: DeepSpeed runs prestarted" has "$O" "imported while the previous slot ran"
check "all: 32 job lines" [ "$(grep -c '^# job ' "$T/all/scaling.log")" = 32 ]
check "all: configs written" [ -f "$T/all/configs/stage0.json" ] && [ -f "$T/all/configs/stage3.json" ]
check "all: stage 1 config says stage 1" python3 -c "import json,sys; sys.exit(json.load(open('$T/all/configs/stage1.json'))['zero_optimization']['stage'] != 1)"
check "all: tables printed last" bash -c "tail -n 1 '$O' | grep -q '^Exposed comm'"

# 2. an oom, a failure (no RESULT), a DeepSpeed multi-rank oom (rc 17)
run bad BENCH_FAKE_OOM="train_t5|plain|2|1|16 deepspeed|plain|3|2|64" BENCH_FAKE_FAIL="deepspeed|plain|2|2|16"
O=$T/bad.out
check "bad: exit 0" [ "$(cat "$T/bad.rc")" = 0 ]
check "bad: still 16 rows" [ "$(scaling_rows "$O")" = 16 ]
check "bad: oom cell" has "$O" "| 2 | 16 | train_t5 | oom | 548.8 | - | oom |"
check "bad: failed cell" has "$O" "| 2 | 16 | HF + DeepSpeed | 80.0 | failed (rc 1) | - |"
check "bad: DeepSpeed oom cell (rc 17 with a RESULT line)" has "$O" "| 3 | 64 | HF + DeepSpeed | 50.0 | oom | - |"
check "bad: scaling n/a" has "$O" "| train_t5 samples/s, 2 GPUs / 1 GPU | 2 | 16 | 2 vs 1 | - | >= 1.85 | n/a (denominator oom) |"
check "bad: ratio n/a on failure" has "$O" "| train_t5 / DeepSpeed samples/s, stage 2 | 2 | 16 | 2 | - | >= 3 | n/a (denominator failed (rc 1)) |"
check "bad: failure logged" has "$O" "FAILED, no RESULT line (rc 1)"

# 3. deadline: late runs are skipped and say so (never silently missing)
run late BENCH_DEADLINE_S=300
O=$T/late.out
check "late: exit 0" [ "$(cat "$T/late.rc")" = 0 ]
check "late: still 16 rows" [ "$(scaling_rows "$O")" = 16 ]
check "late: cells say not run (deadline)" has "$O" "not run (deadline)"
check "late: stage 0 DeepSpeed 2 GPU skipped" has "$O" "| 0 | 16 | HF + DeepSpeed | not run (deadline) | not run (deadline) |"
check "late: n/a verdicts" has "$O" "n/a (denominator not run (deadline))"
check "late: train_t5 all ran" bash -c "! grep -q '| train_t5 | not run' '$O'"
check "late: fake clock within the deadline" bash -c "grep -o 'Took [0-9]*s' '$O' | awk '{ sub(/s/, \"\", \$2); exit !(\$2 + 0 <= 300) }'"

# 4. DeepSpeed unavailable
run nods BENCH_FAKE_NO_DS=1
O=$T/nods.out
check "nods: DeepSpeed cells not run" has "$O" "| 2 | 64 | HF + DeepSpeed | not run (deepspeed not importable) |"
check "nods: train_t5 measured" has "$O" "| 2 | 64 | train_t5 | 500.0 | 980.0 |"

# 5. gradient checkpointing rows; filters
run ckpt BENCH_CKPT=1 BENCH_STAGES="2 3" BENCH_IMPLS=train_t5
O=$T/ckpt.out
check "ckpt: ckpt rows" has "$O" "| 2 | 16 | train_t5 + grad ckpt | 210.0 | 411.6 |"
check "ckpt: only stages 2 3, train_t5" [ "$(scaling_rows "$O")" = 6 ]
check "ckpt: no DeepSpeed rows" hasnt "$O" "HF + DeepSpeed"
run one BENCH_STAGES=3 BENCH_BATCHES=64
O=$T/one.out
check "one: 2 rows" [ "$(scaling_rows "$O")" = 2 ]
check "one: lone 1-GPU run not paired" has "$T/one/scaling.log" "world=1 batch=64 outcome=result rc=0 gpus=0 paired=0"

# 6. no binary (real mode, train_t5 only: nothing is run)
env OUT="$T/nobin" BENCH_IMPLS=train_t5 BENCH_STAGES=2 TRAIN_T5=/nonexistent/train_t5 bash bench/zero_scaling.sh >"$T/nobin.out" 2>&1
check "nobin: cells not run" has "$T/nobin.out" "| 2 | 16 | train_t5 | not run (no train t5 binary) |"

# 7. the table builder alone: a RESULT line that names another stage is flagged
cat >"$T/mismatch.log" <<'EOF'
# job impl=train_t5 mode=plain stage=2 world=2 batch=64 outcome=result rc=0 gpus=0,1 paired=0
RESULT impl=train_t5 mode=plain model=t5-large precision=bf16 batch=64 seq=128 samples_per_s=1000 tokens_per_s=1 tflops=1 peak_gib=20 status=ok stage=3 world=2 peak_gib_ranks=20,20 comm_ms_per_step=-1 step_ms=128
RESULT impl=train_t5 orphan line
EOF
python3 bench/zero_scaling_table.py "$T/mismatch.log" >"$T/mismatch.out" 2>"$T/mismatch.err"
check "table: mismatch warned" has "$T/mismatch.out" "RESULT says stage=3, the job was stage=2"
check "table: orphan RESULT warned" has "$T/mismatch.err" "RESULT line without a job line"
check "table: comm not measured" has "$T/mismatch.out" "| not measured |"
check "table: not planned" has "$T/mismatch.out" "| 2 | 64 | train_t5 | not planned | 1000.0 |"

rm -rf "$T"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
