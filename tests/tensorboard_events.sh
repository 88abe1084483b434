#!/usr/bin/env bash
# tests/tensorboard_events.sh: `--report_to tensorboard` read back by TensorBoard itself.
# Installs the `tensorboard` Python package from PyPI when it is missing (a failed install is a
# failed test, never a skip), runs a short CPU training (logging every step, evaluation during
# training and after it, --disable_tqdm), then with TensorBoard's EventAccumulator checks that
#   - the event file sits in --logging_dir, named events.out.tfevents.<time>.<host>.<pid>.0,
#     and its file_version is brain.Event:2;
#   - every scalar of trainer_state.json's log_history is there, under HF's tag
#     (rewrite_logs: eval_loss -> eval/loss, loss -> train/loss ...), at its step, equal in
#     float32, and nothing else is, except the final --do_eval (HF's evaluate() logs it after
#     trainer_state.json is written), which must equal eval_results.json;
#   - the console lines are HF's: the keys in transformers 5.17's order (the fixture
#     tests/fixtures/hf_log_lines.json records it) and every value f"{v:.4g}" of the full-
#     precision log_history value;
#   - the default logging dir is OUTPUT/runs/<Mon><DD>_<HH>-<MM>-<SS>_<host> (HF's default_logdir);
#   - a run killed with SIGKILL after its first log leaves a file TensorBoard reads.
# Prints OK / NOT OK per check and "N passed, M failed"; exits non-zero on a failure.
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${TRAIN_T5:-./train_t5}
PY=${PYTHON:-python3}
T=$(mktemp -d /tmp/t5_tb_XXXXXX); trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

# ---- tensorboard from PyPI (pip; on a Debian-managed Python, --break-system-packages) ----
if ! "$PY" -c "import tensorboard" >/dev/null 2>&1; then
  echo "tensorboard (Python) is missing: pip install tensorboard"
  if ! "$PY" -m pip --version >/dev/null 2>&1; then
    bad "pip is not available for $PY: cannot install tensorboard (HINT: apt-get install python3-pip, or set PYTHON)"
    finish
  fi
  "$PY" -m pip install --quiet tensorboard >"$T/pip.log" 2>&1 ||
    "$PY" -m pip install --quiet --break-system-packages tensorboard >>"$T/pip.log" 2>&1
  if "$PY" -c "import tensorboard" >/dev/null 2>&1; then ok "pip install tensorboard"
  else
    tail -5 "$T/pip.log"
    bad "pip install tensorboard failed (the log above); HINT: $PY -m pip install tensorboard"
    finish
  fi
fi
ok "tensorboard $("$PY" -c 'import tensorboard; print(tensorboard.__version__)') importable"

# ---- data: the trainer fixture's 24 lines, the first 8 as validation ----
mkdir -p "$T/d"
cp tests/fixtures/trainer_data/train.source tests/fixtures/trainer_data/train.target "$T/d/"
head -n 8 "$T/d/train.source" >"$T/d/val.source"
head -n 8 "$T/d/train.target" >"$T/d/val.target"
COMMON=(--device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model --data_dir "$T/d"
        --task translation_en_to_ro --max_source_length 24 --max_target_length 20 --per_device_train_batch_size 4
        --learning_rate 3e-3 --warmup_steps 2 --seed 42 --sampler sequential --dropout_rate 0 --cache_dir "$T/cache")

# ---- 1. a run: log every step, evaluate every 2 steps and after training ----
"$BIN" "${COMMON[@]}" --max_steps 5 --logging_steps 1 --eval_strategy steps --eval_steps 2 --do_train --do_eval \
  --disable_tqdm --report_to tensorboard --logging_dir "$T/tb" --output_dir "$T/o" >"$T/run.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok "training with --report_to tensorboard --logging_dir (exit 0)"
else tail -5 "$T/run.log"; bad "training with --report_to tensorboard exited $rc"; finish; fi

"$PY" - "$T/tb" "$T/o" "$T/run.log" >"$T/check.out" 2>&1 <<'PY'
import ast, glob, json, os, socket, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

tb, out, run_log = sys.argv[1:4]
npass = nfail = 0
def check(cond, what):
    global npass, nfail
    print(("OK     " if cond else "NOT OK ") + what)
    if cond: npass += 1
    else: nfail += 1

def f32(v):
    return struct.unpack("f", struct.pack("f", v))[0]

def tag(k):  # transformers 5.17 integration_utils.rewrite_logs
    if k.startswith("eval_"): return "eval/" + k[5:]
    if k.startswith("test_"): return "test/" + k[5:]
    return "train/" + k

files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
check(len(files) == 1, f"--logging_dir holds one event file: {[os.path.basename(f) for f in files]}")
name = os.path.basename(files[0]) if files else ""
parts = name.split(".")
check(len(parts) == 7 and parts[3].isdigit() and len(parts[3]) == 10 and parts[4] == socket.gethostname().split(".")[0]
      and parts[5].isdigit() and parts[6] == "0", f"named events.out.tfevents.<time>.<host>.<pid>.0: {name}")
ea = EventAccumulator(tb, size_guidance={"scalars": 0})
ea.Reload()
check(ea.file_version == 2.0, f"file_version brain.Event:2 (EventAccumulator read {ea.file_version})")

state = json.load(open(os.path.join(out, "trainer_state.json")))
hist = state["log_history"]
want = {}  # tag -> [(step, value)] in order
for e in hist:
    check(list(e) == sorted(e), f"trainer_state.json log_history entry at step {e['step']}: keys sorted (HF's sort_keys)")
    for k, v in e.items():
        if k != "step":
            want.setdefault(tag(k), []).append((e["step"], v))
# HF's evaluate() after training logs too (trainer_state.json was saved before it)
ev = json.load(open(os.path.join(out, "eval_results.json")))
final = [(k, v) for k, v in ev.items() if k != "eval_samples"]
for k, v in final:
    want.setdefault(tag(k), []).append((state["global_step"], v))

tags = sorted(ea.Tags()["scalars"])
check(tags == sorted(want), f"scalar tags {tags} (want {sorted(want)})")
nvals = 0
for t in sorted(want):
    got = [(s.step, s.value) for s in ea.Scalars(t)] if t in tags else []
    same = len(got) == len(want[t]) and all(gs == ws and (gv == f32(wv) or abs(gv - wv) <= 1e-6 * max(abs(wv), 1e-30))
                                            for (gs, gv), (ws, wv) in zip(got, want[t]))
    nvals += len(want[t])
    check(same, f"{t}: {len(got)} scalars, steps and float32 values as log_history{' (+ the final eval)' if t.startswith('eval/') else ''}: "
          f"{got[:3]}{' ...' if len(got) > 3 else ''}")
check(any(t == "train/loss" for t in tags) and len(want.get("train/loss", [])) == 5, "train/loss at each of the 5 steps")
check([s for s, _ in want.get("eval/loss", [])] == [2, 4, 5, 5],
      "eval/loss at steps 2, 4, 5 (the last step, as HF's 'steps' strategy) and the final --do_eval at 5")
for t in ("train/learning_rate", "train/grad_norm", "train/epoch"):
    check(t in tags, f"{t} is logged")

# ---- the console lines: HF 5.17's ProgressCallback/PrinterCallback format ----
fx = json.load(open("tests/fixtures/hf_log_lines.json"))
orders = {}  # first key -> HF's key order for that kind of record
for r in fx["records"]:
    keys = [k for k in r["history"] if k != "step"]
    orders.setdefault(keys[0], [])
    for k in keys:
        if k not in orders[keys[0]]: orders[keys[0]].append(k)
lines = [l for l in open(run_log).read().splitlines() if l.startswith("{'")]
entries = [dict(e) for e in hist] + [dict(final, step=state["global_step"])]
check(len(lines) == len(entries), f"{len(lines)} console log lines (want {len(entries)}: log_history + the final eval)")
for line, e in zip(lines, entries):
    d = ast.literal_eval(line)
    e.pop("step")
    first = next(k for k in orders if k in e)
    order = sorted([k for k in e if k != "total_flos"], key=lambda k: orders[first].index(k) if k in orders[first] else 99)
    ok_keys = list(d) == order
    ok_vals = all(d[k] == f"{e[k]:.4g}" for k in order)
    check(ok_keys and ok_vals and line == str({k: f"{e[k]:.4g}" for k in order}),
          f"console line in HF's order and format: {line}")
print(f"{npass} passed, {nfail} failed")
sys.exit(1 if nfail else 0)
PY
py_rc=$?
# the checks above printed OK/NOT OK lines and their count: shown, and the count added to ours
grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$T/check.out"
count=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$T/check.out" | tail -n 1)
if [ -n "$count" ]; then
  p=${count%% passed*}; f=${count#*passed, }; f=${f%% failed*}
  pass=$((pass + p)); fail=$((fail + f))
  [ $py_rc -ne 0 ] && [ "$f" -eq 0 ] && bad "the TensorBoard check exited $py_rc"
else
  bad "the TensorBoard check stopped before its summary (exit $py_rc)"
fi

# ---- 2. the default logging dir: OUTPUT/runs/<Mon><DD>_<HH>-<MM>-<SS>_<host> ----
"$BIN" "${COMMON[@]}" --max_steps 1 --do_train --report_to all --output_dir "$T/o2" >"$T/run2.log" 2>&1
host=$("$PY" -c 'import socket; print(socket.gethostname())')
dirs=$(cd "$T/o2/runs" 2>/dev/null && ls)
if [[ "$dirs" =~ ^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[0-3][0-9]_[0-2][0-9]-[0-5][0-9]-[0-5][0-9]_${host}$ ]] &&
   ls "$T/o2/runs/$dirs"/events.out.tfevents.* >/dev/null 2>&1; then
  ok "--report_to all, no --logging_dir: OUTPUT/runs/$dirs (HF's default_logdir) holds the event file"
else bad "default logging dir: runs/ holds '$dirs' (want MonDD_HH-MM-SS_$host with an event file)"; fi
grep -q "NOTICE: --report_to all: TensorBoard event files" "$T/run2.log" && ok "--report_to all: a notice says it means TensorBoard" \
  || bad "--report_to all: no notice"

# ---- 3. killed after the first log: the file is whole up to there ----
T5_TEST_STALL_RANK=0 T5_TEST_STALL_S=60 "$BIN" "${COMMON[@]}" --max_steps 4 --logging_steps 1 --do_train \
  --disable_tqdm --report_to tensorboard --logging_dir "$T/tb3" --output_dir "$T/o3" >"$T/run3.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "sleeping" "$T/run3.log" 2>/dev/null && break; sleep 0.1; done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
"$PY" - "$T/tb3" <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0}); ea.Reload()
loss = [(s.step, s.value) for s in ea.Scalars("train/loss")] if "train/loss" in ea.Tags()["scalars"] else []
sys.exit(0 if len(loss) == 1 and loss[0][0] == 1 else 1)
PY
[ $? -eq 0 ] && ok "SIGKILL after step 2 (stalled by T5_TEST_STALL_S): TensorBoard reads step 1's scalars" \
             || bad "SIGKILL after the first log: TensorBoard does not read step 1's train/loss"

# ---- 4. refusals: one line naming the reporter, non-zero ----
for r in wandb comet_ml mlflow; do
  "$BIN" "${COMMON[@]}" --max_steps 1 --do_train --report_to $r --output_dir "$T/o4" >"$T/r.log" 2>&1; rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c '^error:' "$T/r.log")" -eq 1 ] && grep -q "^error: --report_to $r: not built" "$T/r.log" &&
     [ ! -e "$T/o4" ]; then ok "--report_to $r refused by name (exit $rc, one line, nothing written)"
  else bad "--report_to $r: exit $rc: $(head -2 "$T/r.log")"; fi
done
# a list (HF's report_to is one): the unbuilt reporter named; none with others contradicts itself
for case in "tensorboard,wandb|--report_to wandb: not built" "none,tensorboard|none with other reporters" \
            "tensorboard,|an empty name in the list"; do
  r=${case%%|*}; want=${case#*|}
  "$BIN" "${COMMON[@]}" --max_steps 1 --do_train --report_to "$r" --output_dir "$T/o8" >"$T/r.log" 2>&1; rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c '^error:' "$T/r.log")" -eq 1 ] && grep -q -- "$want" "$T/r.log" && [ ! -e "$T/o8" ]
  then ok "--report_to $r refused: $want"; else bad "--report_to $r: exit $rc: $(head -2 "$T/r.log")"; fi
done
TENSORBOARD_LOGGING_DIR="$T/elsewhere" "$BIN" "${COMMON[@]}" --max_steps 1 --do_train --report_to tensorboard \
  --logging_dir "$T/tb5" --output_dir "$T/o5" >"$T/r.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "contradict" "$T/r.log" && ok "--logging_dir and a different TENSORBOARD_LOGGING_DIR: refused" \
  || bad "--logging_dir vs TENSORBOARD_LOGGING_DIR: exit $rc: $(head -2 "$T/r.log")"
"$BIN" "${COMMON[@]}" --max_steps 1 --do_train --logging_dir "$T/tb7" --output_dir "$T/o7" >"$T/r.log" 2>&1
grep -q "NOTICE: --logging_dir changes nothing: --report_to is none" "$T/r.log" && [ ! -e "$T/tb7" ] &&
  ok "--logging_dir without --report_to tensorboard: a notice, nothing written there" ||
  bad "--logging_dir with --report_to none: no notice, or $T/tb7 was made"
TENSORBOARD_LOGGING_DIR="$T/tb6" "$BIN" "${COMMON[@]}" --max_steps 1 --do_train --report_to tensorboard \
  --output_dir "$T/o6" >"$T/r.log" 2>&1
ls "$T/tb6"/events.out.tfevents.* >/dev/null 2>&1 && ok "TENSORBOARD_LOGGING_DIR (HF 5.17's variable) is the logging dir" \
  || bad "TENSORBOARD_LOGGING_DIR: no event file in it"
finish
