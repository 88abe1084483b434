#!/usr/bin/env bash
# tests/progress_tty.sh: on a terminal, evaluation, prediction and bench show a progress line
# within 2 s of starting and redraw it at least every 5 s (common/ticker.c). Each command runs
# under `script` (util-linux), which gives it a terminal and records when each chunk of its
# output came (-T timing file); the progress line's draws are found in the typescript and their
# times read off the timing file. Off a terminal the same commands print no progress line in
# the first 10 s (log files stay as they were). Prints OK / NOT OK and "N passed, M failed".
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${TRAIN_T5:-./train_t5}
T=$(mktemp -d /tmp/t5_progress_XXXXXX); trap 'rm -rf "$T"' EXIT
last_span=0  # check's span of the last command (draws)
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }
command -v script >/dev/null 2>&1 || { bad "script (util-linux) is needed"; echo "$pass passed, $fail failed"; exit 1; }

# draws TYPESCRIPT TIMING MARKER: "first_s max_gap_s count span_s" of the chunks holding MARKER,
# the times counted from the first chunk of output (the typescript's header line comes before
# them); span_s: from the first draw to the run's last output (the task and its wrap-up)
draws() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
data = data[data.index(b"\n") + 1:]  # script's "Script started ..." header
marker = sys.argv[3].encode()
t, pos, times, carry = 0.0, 0, [], b""
for line in open(sys.argv[2]):
    delay, n = line.split()
    t += float(delay)
    chunk = data[pos:pos + int(n)]
    pos += int(n)
    # a draw is a "\r" + marker (the line redrawn in place), whichever chunk it falls in
    seen = (carry + chunk).count(b"\r" + marker) - carry.count(b"\r" + marker)
    times += [t] * seen
    carry = chunk[-len(marker) - 1:]
if not times:
    print("none 0 0 0")
else:
    gaps = [b - a for a, b in zip(times, times[1:])] or [0.0]
    print(f"{times[0]:.2f} {max(gaps):.2f} {len(times)} {t - times[0]:.2f}")
PY
}

# check LABEL MARKER MIN_DRAWS -- COMMAND...: the command under a terminal; its draws of MARKER
check() {
    local label=$1 marker=$2 min=$3; shift 4
    local t0 t1
    t0=$(date +%s.%N)
    script -q -e -T "$T/$label.tim" -c "$(printf '%q ' "$@")" "$T/$label.out" > /dev/null 2>&1; local rc=$?
    t1=$(date +%s.%N)
    read -r first gap count span < <(draws "$T/$label.out" "$T/$label.tim" "$marker")
    last_span=$span
    if [ "$rc" -ne 0 ]; then bad "$label: exit $rc: $(tr '\r' '\n' < "$T/$label.out" | grep -v '^$' | tail -n 2 | tr '\n' ' ' | cut -c1-300)"; return; fi
    if [ "$first" = none ]; then bad "$label: no \"$marker\" line was drawn"; return; fi
    # the line is redrawn every second, so a fast machine's short task has fewer draws: from the
    # first draw to the run's end under 4 s, 2 suffice; under 2 s, 1 (CI saw one draw of a task
    # that ended within the first second, and 2 draws of a 1.5 s run)
    awk "BEGIN{exit !($span >= 4.0)}" || min=2
    awk "BEGIN{exit !($span >= 2.0)}" || min=1
    awk "BEGIN{exit !($count >= $min && $gap <= 5.0)}" \
        && ok "$label: \"$marker\" drawn $count times, every $gap s at most (<= 5; the run took $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s)" \
        || bad "$label: $count draws of \"$marker\" in $span s (want >= $min), largest gap $gap s (want <= 5)"
    # drawn at the task's start: within 2 s of the output that came just before its first draw
    python3 - "$T/$label.out" "$T/$label.tim" "$marker" <<'PY' && ok "$label: the first draw comes within 2 s of the task's start" || bad "$label: the first draw came more than 2 s after the output before it"
import sys
data = open(sys.argv[1], "rb").read()
data = data[data.index(b"\n") + 1:]
marker = b"\r" + sys.argv[3].encode()
at = data.find(marker)
t, pos, prev_t = 0.0, 0, None
for line in open(sys.argv[2]):
    delay, n = line.split()
    t += float(delay)
    end = pos + int(n)
    if end > at:  # the chunk that holds the first draw: the output before it came at prev_t
        sys.exit(0 if prev_t is None or t - prev_t <= 2.0 else 1)
    prev_t, pos = t, end
sys.exit(1)
PY
}

MODEL=(--device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model --data_dir data/sample
       --task translation_en_to_ro --predict_with_generate --generation_num_beams 4
       --per_device_eval_batch_size 4 --cache_dir "$T/cache" --overwrite_output_dir)
check eval "eval: batch" 3 -- "$BIN" "${MODEL[@]}" --generation_max_length 64 --do_eval --n_val 32 --output_dir "$T/o_eval"
check predict "predict: batch" 3 -- "$BIN" "${MODEL[@]}" --generation_max_length 64 --do_predict --n_test 32 \
    --output_dir "$T/o_predict"
# bench long enough (about 5 s on the 2-core dev machine) that its redraws are checked however fast eval is
check bench "bench: " 3 -- "$BIN" bench --device cpu --model tests/fixtures/trainer_model --batch 8 --seq 64 --steps 30 --warmup 2
awk "BEGIN{exit !($last_span >= 2.0)}" && ok "bench: its line was redrawn over a task of $last_span s (>= 2)" \
    || bad "bench: the task took $last_span s: too short to check the redraws (raise --steps)"
# the typescript of eval holds the cleared line: the metrics come after the progress line is gone
if tr '\r' '\n' < "$T/eval.out" | grep -q "eval_loss"; then ok "eval: the metrics are printed after the progress line"; else bad "eval: no metrics"; fi
# off a terminal: no progress line in a run of a few seconds (logs as before)
out=$("$BIN" "${MODEL[@]}" --do_eval --n_val 4 --generation_max_length 16 --output_dir "$T/o_log" 2>&1)
grep -q "eval: batch" <<< "$out" && bad "off a terminal a short evaluation printed a progress line" \
    || ok "off a terminal: a short evaluation prints no progress line"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
