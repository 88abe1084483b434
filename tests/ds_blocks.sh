#!/usr/bin/env bash
# tests/ds_blocks.sh: the DeepSpeed config's blocks around training (issue 36), each acted on
# or named at start-up as changing nothing, through ./train_t5 on the CPU:
#   1. configs/ds_config_all_blocks.json (every block, values as DeepSpeed's docs show them)
#      trains 3 steps; every key of its blocks is either acted on (the line that says so is
#      checked) or named in a NOTICE;
#   2. tensorboard + csv_monitor: the files DeepSpeed 0.19.8's monitors write, where they write
#      them (output_path/job_name; "" = the working directory), Train/Samples/lr at step =
#      samples (train_batch_size per step, gradient accumulation counted), the lr after each
#      step (a linear schedule's known values), TensorBoard reads the event file back; a second
#      run appends to the .csv with a header of its own (DeepSpeed's 'a+');
#   3. activation_checkpointing: gradient checkpointing on (said), the same losses as
#      --gradient_checkpointing;
#   4. comms_logger under mpirun (2 CPU ranks, stage 2): DeepSpeed's table once (rank 0) with
#      the collectives of training; verbose lines from rank 0 only; prof_all false + prof_ops
#      restricts it; enabled false records nothing and says so;
#   5. flops_profiler on the CPU: a NOTICE per key, the run trains as without it;
#   6. aio: the NVMe engine's settings on the start-up line, the losses those of the defaults.
# Prints OK / NOT OK per check and "N passed, M failed"; exits non-zero on a failure.
#   TRAIN_T5=path/to/binary tests/ds_blocks.sh    (default ./train_t5)
set -u
cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
BIN=${TRAIN_T5:-./train_t5}
case $BIN in /*) ;; *) BIN="$REPO/$BIN" ;; esac
PY=${PYTHON:-python3}
T=$(mktemp -d /tmp/t5_ds_blocks_XXXXXX); trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
# the OK/NOT OK counts of a Python check's last line "N passed, M failed" (anything else: one failure)
add_counts() {
  local last; last=$(tail -1 "$1")
  if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    pass=$((pass + BASH_REMATCH[1])); fail=$((fail + BASH_REMATCH[2]))
  else bad "the Python check ended without its summary: $(tail -3 "$1" | tr '\n' ' ' | head -c 300)"; fi
}
[ -x "$BIN" ] || { bad "$BIN is not built (make)"; finish; }

COMMON=(--device cpu --model "$REPO/tests/fixtures/trainer_model" --tokenizer_name "$REPO/data/sample/spiece.model"
        --data_dir "$REPO/tests/fixtures/trainer_data" --task translation_en_to_ro --max_source_length 24
        --max_target_length 20 --seed 42 --sampler sequential --dropout_rate 0 --logging_steps 1 --disable_tqdm
        --do_train --cache_dir "$T/cache")
losses() { "$PY" -c "import json,sys; print(' '.join(repr(e['loss']) for e in json.load(open(sys.argv[1]))['log_history'] if 'loss' in e))" "$1/trainer_state.json" 2>/dev/null; }

# ---- 1. the all-blocks config: trains, every key acted on or named ----------------------------
mkdir -p "$T/w1"
(cd "$T/w1" && "$BIN" "${COMMON[@]}" --max_steps 3 --per_device_train_batch_size 4 \
   --deepspeed "$REPO/configs/ds_config_all_blocks.json" --output_dir "$T/o1" >"$T/o1.log" 2>&1)
rc=$?
check "[ $rc -eq 0 ]" "ds_config_all_blocks.json trains 3 steps on the CPU (exit $rc)"
[ $rc -eq 0 ] || tail -5 "$T/o1.log"
check "[ \"\$(losses $T/o1 | wc -w)\" = 3 ]" "ds_config_all_blocks.json: 3 losses logged ($(losses "$T/o1"))"
"$PY" - "$REPO/configs/ds_config_all_blocks.json" "$T/o1.log" >"$T/keys.out" 2>&1 <<'PY'
import json, re, sys
cfg, log = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
blocks = ["activation_checkpointing", "aio", "tensorboard", "csv_monitor", "flops_profiler", "comms_logger", "wandb", "comet"]
# what acts says so: the line that shows each acted-on key's effect
acted = {
    "tensorboard.enabled": "DeepSpeed tensorboard monitor: output/ds_logs/train_bert/events.out.tfevents.",
    "tensorboard.output_path": "DeepSpeed tensorboard monitor: output/ds_logs/",
    "tensorboard.job_name": "output/ds_logs/train_bert/events.out",
    "csv_monitor.enabled": "DeepSpeed csv_monitor: output/ds_logs/train_bert/Train_Samples_lr.csv",
    "csv_monitor.output_path": "DeepSpeed csv_monitor: output/ds_logs/",
    "csv_monitor.job_name": "output/ds_logs/train_bert/Train_Samples_lr.csv",
    "comms_logger.enabled": "Comm. Op            Message Size",
    "comms_logger.prof_all": "DeepSpeed comms_logger: every collective recorded",
    "comms_logger.verbose": None,  # false: no per-collective lines (checked below)
}
npass = nfail = 0
for b in blocks:
    for k in cfg[b]:
        key = b + "." + k
        if key in acted and acted[key]:
            good, how = acted[key] in log, "acted on: " + acted[key][:60]
        elif key in acted:
            good, how = "comm op:" not in log, "acted on: verbose false, no per-collective line"
        else:
            # aio.thread_count is the docs' name of intra_op_parallelism: the NOTICE gives both
            named = '"aio.intra_op_parallelism" (or its other name "thread_count")' if key == "aio.thread_count" else '"%s"' % key
            good = re.search(r'NOTICE: .*' + re.escape(named), log) is not None
            how = "named in a NOTICE"
        print(("OK     " if good else "NOT OK ") + "all_blocks key %-50s %s" % (key, how))
        npass += good; nfail += not good
good = "gradient checkpointing is on, as --gradient_checkpointing" in log
print(("OK     " if good else "NOT OK ") + "all_blocks: activation_checkpointing said to turn gradient checkpointing on")
npass += good; nfail += not good
print("%d passed, %d failed" % (npass, nfail))
PY
cat "$T/keys.out" | grep -E '^(OK|NOT OK)'
add_counts "$T/keys.out"
check "[ -f $T/w1/output/ds_logs/train_bert/Train_Samples_lr.csv ] && ls $T/w1/output/ds_logs/train_bert/events.out.tfevents.* >/dev/null 2>&1" \
  "all_blocks: the monitors wrote under the working directory's output/ds_logs/train_bert (DeepSpeed's relative path)"
check "[ ! -e $REPO/output/ds_logs ]" "all_blocks: nothing written into the repository"
check "grep -q 'NOTICE: .*\"flops_profiler.enabled\" is accepted and changes nothing here: the profiler times CUDA ops' $T/o1.log" \
  "flops_profiler on the CPU: named as changing nothing (the run trains)"

# ---- 2. tensorboard + csv_monitor: files, tags, steps, values ----------------------------------
cat >"$T/mon.json" <<EOF
{"zero_optimization": {"stage": 1}, "gradient_clipping": "auto", "train_micro_batch_size_per_gpu": "auto",
 "gradient_accumulation_steps": "auto",
 "tensorboard": {"enabled": true, "output_path": "$T/logs", "job_name": "tb_job"},
 "csv_monitor": {"enabled": true, "output_path": "", "job_name": "csv_job"}}
EOF
mkdir -p "$T/w2"
run_mon() {
  (cd "$T/w2" && "$BIN" "${COMMON[@]}" --max_steps 4 --per_device_train_batch_size 2 --gradient_accumulation_steps 2 \
     --learning_rate 1e-3 --lr_scheduler_type linear --deepspeed "$T/mon.json" --output_dir "$T/$1" \
     --overwrite_output_dir >"$T/$1.log" 2>&1)
}
run_mon o2; rc=$?
check "[ $rc -eq 0 ]" "monitors: training exits 0"
CSV="$T/w2/csv_job/Train_Samples_lr.csv"
check "[ -f '$CSV' ]" "csv_monitor: output_path \"\" -> the working directory's csv_job/Train_Samples_lr.csv"
check "[ ! -e '$T/w2/csv_job/Train_Samples_loss_scale.csv' ]" "csv_monitor: no loss_scale file without fp16 (as DeepSpeed)"
"$PY" - "$CSV" "$T/logs/tb_job" >"$T/mon.out" 2>&1 <<'PY'
import glob, os, struct, sys
csv_path, tb_dir = sys.argv[1:3]
npass = nfail = 0
def check(c, what):
    global npass, nfail
    print(("OK     " if c else "NOT OK ") + what)
    npass += bool(c); nfail += not c
raw = open(csv_path, "rb").read()
# transformers' linear schedule from the flags, lr after step k of 4: 1e-3 * (4 - k) / 4;
# DeepSpeed's monitor step: samples = k * (2 per device x 2 accumulation x 1 rank)
want = [(4 * k, 1e-3 * (4 - k) / 4) for k in range(1, 5)]
check(raw.startswith(b"step,lr\r\n"), "csv: header row step,lr with \\r\\n (Python's csv writer): %r" % raw[:12])
rows = [r.split(b",") for r in raw.split(b"\r\n")[1:] if r]
check([int(r[0]) for r in rows] == [s for s, _ in want], "csv: steps = samples so far %s" % [int(r[0]) for r in rows])
vals = [float(r[1]) for r in rows]
check(all(abs(v - w) <= 1e-12 for v, (_, w) in zip(vals, want)) and len(vals) == 4, "csv: lr after each step %s" % vals)
check(all(r[1].decode() == repr(float(r[1])) for r in rows), "csv: values as Python's repr %s" % [r[1].decode() for r in rows])
files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
check(len(files) == 1, "tensorboard: one event file in output_path/job_name: %s" % [os.path.basename(f) for f in files])
try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    ea = EventAccumulator(tb_dir); ea.Reload()
    tags = ea.Tags()["scalars"]
    check(tags == ["Train/Samples/lr"], "tensorboard: scalar tags %s (want Train/Samples/lr only, fp32)" % tags)
    ev = ea.Scalars("Train/Samples/lr") if "Train/Samples/lr" in tags else []
    f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]
    check([(e.step, e.value) for e in ev] == [(s, f32(v)) for s, v in want],
          "tensorboard: (step, value) %s" % [(e.step, round(e.value, 8)) for e in ev])
except ImportError:
    check(False, "tensorboard (Python) is needed to read the event file back: pip install tensorboard")
print("%d passed, %d failed" % (npass, nfail))
PY
grep -E '^(OK|NOT OK)' "$T/mon.out"
add_counts "$T/mon.out"
check "grep -q 'DeepSpeed tensorboard monitor: $T/logs/tb_job/events.out.tfevents' $T/o2.log && grep -q 'DeepSpeed csv_monitor: csv_job/Train_Samples_lr.csv' $T/o2.log" \
  "monitors: start-up lines say where they write"
run_mon o2b; rc=$?
check "[ $rc -eq 0 ] && [ \"\$(grep -c '^step,lr' '$CSV')\" = 2 ] && [ \"\$(wc -l <'$CSV')\" = 10 ]" \
  "csv_monitor: a second run appends (a header of its own, 4 more rows), as DeepSpeed's 'a+'"
check "[ \"\$(ls $T/logs/tb_job | wc -l)\" = 2 ]" "tensorboard: a second run writes an event file of its own"
mkdir -p "$T/w3" && touch "$T/w3/notadir"
cat >"$T/mon_bad.json" <<EOF
{"csv_monitor": {"enabled": true, "output_path": "notadir", "job_name": "j"}}
EOF
(cd "$T/w3" && "$BIN" "${COMMON[@]}" --max_steps 1 --per_device_train_batch_size 2 --deepspeed "$T/mon_bad.json" \
   --output_dir "$T/o3" >"$T/o3.out" 2>"$T/o3.err"); rc=$?
check "[ $rc -eq 1 ] && [ \"\$(grep -c . $T/o3.err)\" -le 2 ] && grep -q '^error: .*csv_monitor.*notadir' $T/o3.err" \
  "csv_monitor: an output_path that is a file: one error line naming the block ($(head -c 150 "$T/o3.err"))"

# ---- 3. activation_checkpointing = --gradient_checkpointing ------------------------------------
echo '{"activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": true}}' >"$T/ac.json"
"$BIN" "${COMMON[@]}" --max_steps 3 --per_device_train_batch_size 4 --deepspeed "$T/ac.json" --output_dir "$T/o4" \
  >"$T/o4.log" 2>&1; rc1=$?
echo '{}' >"$T/none.json"  # the same DeepSpeed defaults (gradient_clipping 0), the flag instead of the block
"$BIN" "${COMMON[@]}" --max_steps 3 --per_device_train_batch_size 4 --gradient_checkpointing --deepspeed "$T/none.json" \
  --output_dir "$T/o5" \
  >"$T/o5.log" 2>&1; rc2=$?
check "[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]" "activation_checkpointing run and --gradient_checkpointing run exit 0"
check "grep -q 'activations: gradient checkpointing: each block keeps its input only' $T/o4.log" \
  "activation_checkpointing: the activation plan is the checkpointed one"
check "[ -n \"\$(losses $T/o4)\" ] && [ \"\$(losses $T/o4)\" = \"\$(losses $T/o5)\" ]" \
  "activation_checkpointing: the losses of --gradient_checkpointing ($(losses "$T/o4"))"
check "grep -q '\"activation_checkpointing.partition_activations\" = true is accepted and changes nothing' $T/o4.log && grep -q '\"activation_checkpointing.cpu_checkpointing\" = true is accepted and changes nothing here: the checkpointed block inputs stay in device memory' $T/o4.log" \
  "activation_checkpointing: partition_activations and cpu_checkpointing true named as changing nothing"

# ---- 4. comms_logger under mpirun --------------------------------------------------------------
if command -v mpirun >/dev/null 2>&1; then
  comms() { # comms NAME JSON_BLOCK
    echo "{\"zero_optimization\": {\"stage\": 2}, \"gradient_clipping\": \"auto\", \"comms_logger\": $2}" >"$T/$1.json"
    OMP_NUM_THREADS=1 timeout 300 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -np 2 "$BIN" \
      "${COMMON[@]}" --max_steps 2 --per_device_train_batch_size 2 --deepspeed "$T/$1.json" --output_dir "$T/$1" \
      >"$T/$1.log" 2>&1
  }
  comms c1 '{"enabled": true, "verbose": true, "prof_all": true, "debug": false}'; rc=$?
  check "[ $rc -eq 0 ]" "comms_logger, 2 ranks: exit 0"
  check "[ \"\$(grep -c '^Comm. Op  *Message Size  *Count  *Total Latency(ms)  *Avg Latency(ms)  *tput_avg (Gbps)  *busbw_avg (Gbps)' $T/c1.log)\" = 1 ]" \
    "comms_logger: DeepSpeed's table header, once (rank 0)"
  check "grep -q '^reduce_scatter_tensor\$' $T/c1.log && grep -q '^all_gather_into_tensor\$' $T/c1.log && grep -q '^all_reduce\$' $T/c1.log" \
    "comms_logger: stage 2's collectives in the table (reduce_scatter_tensor, all_gather_into_tensor, all_reduce)"
  check "grep -Eq '^ {20}[0-9.]+ (B|KB|MB)  +[0-9]+  +[0-9.]+  +[0-9.]+  +[0-9.]+  +[0-9.]+' $T/c1.log" \
    "comms_logger: rows of size, count, total and average latency, algbw, busbw"
  check "grep -q '^\[Rank 0\] comm op: reduce_scatter_tensor | time (ms): [0-9.]* | msg size: ' $T/c1.log && ! grep -q '^\[Rank 1\]' $T/c1.log" \
    "comms_logger verbose: a line per collective, rank 0 only"
  comms c2 '{"enabled": true, "prof_all": false, "prof_ops": ["all_reduce", "all_to_all"]}'; rc=$?
  check "[ $rc -eq 0 ] && grep -q '^all_reduce\$' $T/c2.log && ! grep -q '^reduce_scatter_tensor\$' $T/c2.log && ! grep -q '^all_gather_into_tensor\$' $T/c2.log" \
    "comms_logger prof_all false, prof_ops [all_reduce]: only all_reduce recorded"
  check "grep -q '\"comms_logger.prof_ops\": \"all_to_all\" records nothing here' $T/c2.log" \
    "comms_logger: a prof_ops name train_t5 never runs is said"
  comms c3 '{"enabled": false, "verbose": true}'; rc=$?
  check "[ $rc -eq 0 ] && ! grep -q 'Comm. Op' $T/c3.log && grep -q '\"comms_logger.verbose\" is accepted and changes nothing here: \"comms_logger.enabled\" is false' $T/c3.log" \
    "comms_logger enabled false: no table, its keys named as changing nothing"
else
  bad "mpirun is needed for the comms_logger checks (make deps installs openmpi)"
fi

# ---- 5b. bench reads the same config: checkpointing on, the loop's blocks named ---------------
mkdir -p "$T/wb"
(cd "$T/wb" && timeout 300 "$BIN" bench --model "$REPO/tests/fixtures/trainer_model" --device cpu --batch 2 --seq 16 \
   --steps 1 --warmup 0 --deepspeed "$REPO/configs/ds_config_all_blocks.json" >"$T/bench.log" 2>&1); rc=$?
check "[ $rc -eq 0 ] && grep -q 'RESULT .*mode=ckpt' $T/bench.log" "bench with the all-blocks config: gradient checkpointing (mode=ckpt)"
check "grep -q '\"tensorboard.enabled\" is accepted and changes nothing here: bench writes no monitor files' $T/bench.log && grep -q '\"comms_logger.enabled\" is accepted and changes nothing here: bench' $T/bench.log && [ -z \"\$(ls -A $T/wb)\" ]" \
  "bench: the monitors and comms_logger named as changing nothing, no files written"

# ---- 6. aio: the engine's settings on the start-up line ---------------------------------------
mkdir -p "$T/nvme"
cat >"$T/aio.json" <<EOF
{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "$T/nvme"}},
 "gradient_clipping": "auto",
 "aio": {"block_size": 8192, "queue_depth": 3, "thread_count": 2, "single_submit": true, "overlap_events": false}}
EOF
cat >"$T/aio0.json" <<EOF
{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "$T/nvme"}},
 "gradient_clipping": "auto"}
EOF
T5_OFFLOAD_CHUNK=4096 "$BIN" "${COMMON[@]}" --max_steps 3 --per_device_train_batch_size 4 --deepspeed "$T/aio.json" \
  --output_dir "$T/o6" >"$T/o6.log" 2>&1; rc1=$?
T5_OFFLOAD_CHUNK=4096 "$BIN" "${COMMON[@]}" --max_steps 3 --per_device_train_batch_size 4 --deepspeed "$T/aio0.json" \
  --output_dir "$T/o7" >"$T/o7.log" 2>&1; rc2=$?
check "[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]" "aio: NVMe offload runs with the block and without it (exit $rc1, $rc2)"
check "grep -Eq 'offloaded to NVMe: .*I/O: (Linux native AIO.*requests of 8192 B, queue depth 3, 2 threads, single submits, batch-wise completions|pread/pwrite.*requests of 8192 B, 2 threads)' $T/o6.log" \
  "aio: the start-up line shows the block's settings ($(grep -o 'I/O: [^)]*' "$T/o6.log" | head -1))"
check "grep -Eq 'I/O: .*requests of 1048576 B' $T/o7.log" "aio: without the block, DeepSpeed's defaults (1 MiB requests)"
check "[ -n \"\$(losses $T/o6)\" ] && [ \"\$(losses $T/o6)\" = \"\$(losses $T/o7)\" ]" \
  "aio: the same losses either way ($(losses "$T/o6"))"
finish
