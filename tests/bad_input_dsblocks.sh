#!/usr/bin/env bash
# tests/bad_input_dsblocks.sh: issue 36's family "DeepSpeed blocks a user's config carries"
# (activation_checkpointing, aio, tensorboard, csv_monitor, flops_profiler, comms_logger,
# wandb, comet), on the AddressSanitizer build, every run under a 10 s limit: what cannot be
# acted on is refused in one line naming the key (wandb/comet enabled, GPUDirect Storage, a
# block size O_DIRECT cannot use, wrong types, null where DeepSpeed takes none, typos), and
# what DeepSpeed accepts loads (null where it takes None, the blocks disabled, an empty
# block, a profile_step past the run, a prof_ops name never run), with no sanitizer report.
# Before issue 36 every one of these blocks was refused outright ("does not support").
#   TRAIN_T5=path/to/binary tests/bad_input_dsblocks.sh    (default ./build-asan/train_t5)
set -u
cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
BIN=${TRAIN_T5:-./build-asan/train_t5}
case $BIN in /*) ;; *) BIN="$REPO/$BIN" ;; esac
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "OK     $1"; }
notok() { fail=$((fail + 1)); echo "NOT OK $1"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

if [ ! -x "$BIN" ]; then
  notok "$BIN is not built (make test-asan builds it with AddressSanitizer)"
  finish
fi
for tool in python3 mkfifo timeout; do
  command -v $tool >/dev/null 2>&1 || { notok "$tool is needed"; finish; }
done
T=$(mktemp -d /tmp/t5_bad_dsblocks.XXXXXX) || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT

TM=$REPO/tests/fixtures/trainer_model
TOK=$REPO/data/sample/spiece.model
LIMIT=10
n_out=0  # every run its own --output_dir

# ---- running ---------------------------------------------------------------------------------
run() { # run ARGS...: the train_t5 command line, stdin closed, at most $LIMIT seconds
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 timeout -k 2 "$LIMIT" "$BIN" "$@" \
    >"$T/out" 2>"$T/err" </dev/null
  rc=$?
}
sanitizer_report() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|UndefinedBehaviorSanitizer' "$T/err"; }
show() { sed -n '1,8s/^/       | /p' "$T/err"; }

# expect_error NAME NEEDLE ARGS...: exit 1 within the limit, one error line (plus a HINT line)
# naming NEEDLE; NOTICE lines before it are allowed when NOTICES=1
expect_error() {
  local name=$1 needle=$2 why=""
  shift 2
  run "$@"
  grep -v '^NOTICE: ' "$T/err" >"$T/err1" || true
  [ "${NOTICES:-0}" = 1 ] || cp "$T/err" "$T/err1"
  local lines first second
  lines=$(wc -l <"$T/err1")
  first=$(sed -n 1p "$T/err1")
  second=$(sed -n 2p "$T/err1")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="hung: killed after $LIMIT s"
  elif [ "$rc" -ne 1 ]; then why="exit code $rc, want 1"
  elif sanitizer_report; then why="sanitizer report"
  elif [ "${first#error:}" = "$first" ]; then why="stderr does not start with \"error:\""
  elif [ "$lines" -gt 2 ] || { [ "$lines" -eq 2 ] && [ "${second#HINT:}" = "$second" ]; }; then
    why="stderr has $lines lines (want one error line, optionally a HINT line)"
  elif ! grep -qF -- "$needle" "$T/err1"; then why="message does not name \"$needle\""
  fi
  if [ -z "$why" ]; then ok "$(printf '%-30s %.170s' "$name" "$first")"
  else notok "$name: $why"; show; fi
}

# expect_ok NAME FILE PATTERN ARGS...: exit 0, no sanitizer report, grep -E PATTERN in out or err
expect_ok() {
  local name=$1 file=$2 pattern=$3 why=""
  shift 3
  run "$@"
  if [ "$rc" -ne 0 ]; then why="exit code $rc, want 0"
  elif sanitizer_report; then why="sanitizer report"
  elif ! grep -qE -- "$pattern" "$T/$file"; then why="$file does not match /$pattern/"
  fi
  if [ -z "$why" ]; then ok "$(printf '%-30s %.170s' "$name" "$(grep -E -- "$pattern" "$T/$file" | head -n 1)")"
  else notok "$name: $why"; show; sed -n '1,6s/^/       o /p' "$T/out"; fi
}

# ---- inputs ----------------------------------------------------------------------------------
mkdir -p "$T/d_ok"
head -n 8 "$REPO/data/sample/train.source" >"$T/d_ok/train.source"
head -n 8 "$REPO/data/sample/train.target" >"$T/d_ok/train.target"
TRAIN=(--model "$TM" --tokenizer_name "$TOK" --data_dir "$T/d_ok" --cache_dir "$T/cache" --per_device_train_batch_size 4
       --max_steps 1 --do_train --device cpu)
n_cfg=0
ds() { # ds JSON: writes the next config file, $CFG its path
  n_cfg=$((n_cfg + 1)); CFG="$T/ds$n_cfg.json"; printf '%s' "$1" >"$CFG"
}
bad_cfg() { # bad_cfg NAME NEEDLE JSON
  local name=$1 needle=$2
  n_out=$((n_out + 1)); ds "$3"
  expect_error "$name" "$needle" "${TRAIN[@]}" --output_dir "$T/o$n_out" --deepspeed "$CFG"
}
good_cfg() { # good_cfg NAME PATTERN JSON: trains one step (in $T/w, the monitors' working directory)
  local name=$1 pattern=$2
  n_out=$((n_out + 1)); mkdir -p "$T/w"; ds "$3"
  cd "$T/w" || exit 1
  expect_ok "$name" out "$pattern" "${TRAIN[@]}" --output_dir "$T/o$n_out" --deepspeed "$CFG"
  cd "$REPO" || exit 1
}

# ---- refused: acting is impossible, or the value is not DeepSpeed's type ----------------------
bad_cfg wandb_enabled '"wandb.enabled": true asks for Weights & Biases' '{"wandb": {"enabled": true, "project": "p"}}'
bad_cfg comet_enabled '"comet.enabled": true asks for Comet' '{"comet": {"enabled": true, "api_key": "k"}}'
bad_cfg aio_use_gds '"aio.use_gds"' '{"aio": {"use_gds": true}}'
bad_cfg aio_block_unaligned 'not a multiple of 4096' '{"aio": {"block_size": 1000000}}'
bad_cfg aio_block_huge '"aio.block_size"' '{"aio": {"block_size": 1e12}}'
bad_cfg aio_queue_negative '"aio.queue_depth"' '{"aio": {"queue_depth": -8}}'
bad_cfg aio_threads_zero '"aio.intra_op_parallelism"' '{"aio": {"intra_op_parallelism": 0}}'
bad_cfg aio_both_names '"thread_count" and "intra_op_parallelism" are the same setting' '{"aio": {"thread_count": 1, "intra_op_parallelism": 1}}'
bad_cfg act_ckpt_list '"activation_checkpointing"' '{"activation_checkpointing": [true]}'
bad_cfg act_ckpt_number_zero '"activation_checkpointing.number_checkpoints"' '{"activation_checkpointing": {"number_checkpoints": 0}}'
bad_cfg act_ckpt_number_string '"activation_checkpointing.number_checkpoints"' '{"activation_checkpointing": {"number_checkpoints": "4"}}'
bad_cfg act_ckpt_unknown 'did you mean "activation_checkpointing.partition_activations"' '{"activation_checkpointing": {"partitioned_activations": true}}'
bad_cfg tensorboard_enabled_string '"tensorboard.enabled"' '{"tensorboard": {"enabled": "true"}}'
bad_cfg tensorboard_path_null '"tensorboard.output_path"' '{"tensorboard": {"enabled": true, "output_path": null}}'
bad_cfg csv_job_list '"csv_monitor.job_name"' '{"csv_monitor": {"enabled": true, "job_name": ["a"]}}'
bad_cfg flops_step_fraction '"flops_profiler.profile_step"' '{"flops_profiler": {"enabled": true, "profile_step": 1.5}}'
bad_cfg flops_factor_negative '"flops_profiler.recompute_fwd_factor"' '{"flops_profiler": {"recompute_fwd_factor": -1}}'
bad_cfg flops_output_empty_list '"flops_profiler.output_file"' '{"flops_profiler": {"output_file": []}}'
bad_cfg comms_ops_object '"comms_logger.prof_ops"' '{"comms_logger": {"enabled": true, "prof_ops": {"all_reduce": 1}}}'
bad_cfg comms_ops_too_many '"comms_logger.prof_ops"' "{\"comms_logger\": {\"prof_ops\": [$(printf '"op%d",' $(seq 1 17) | sed 's/,$//')]}}"
bad_cfg comms_debug_null '"comms_logger.debug"' '{"comms_logger": {"debug": null}}'
bad_cfg comet_interval_fraction '"comet.samples_log_interval"' '{"comet": {"samples_log_interval": 0.5}}'
bad_cfg wandb_team_number '"wandb.team"' '{"wandb": {"team": 7}}'

# ---- accepted: DeepSpeed takes them; the run trains and says what it did ----------------------
good_cfg act_ckpt_nulls 'gradient checkpointing is on' '{"activation_checkpointing": {"number_checkpoints": null}}'
good_cfg blocks_empty '"flops_profiler.enabled" is false|activation_checkpointing' '{"activation_checkpointing": {}, "aio": {}, "tensorboard": {}, "csv_monitor": {}, "flops_profiler": {"enabled": false}, "comms_logger": {}, "wandb": {}, "comet": {}}'
good_cfg wandb_comet_off '"comet.api_key" = \(set; not shown\)' '{"wandb": {"enabled": false, "group": null, "team": null}, "comet": {"enabled": false, "api_key": "SECRET_K", "online": null, "mode": null}}'
if grep -q SECRET_K "$T/out" "$T/err"; then notok "comet.api_key printed"; else ok "comet.api_key's value appears nowhere in the output"; fi
good_cfg flops_step_past_run 'no step is profiled|changes nothing here: the profiler times CUDA ops' '{"flops_profiler": {"enabled": true, "profile_step": 100, "output_file": null}}'
good_cfg comms_unknown_op 'Comm. Op' '{"comms_logger": {"enabled": true, "prof_all": false, "prof_ops": ["all_reduce", "my_op"]}}'
good_cfg csv_job_absolute 'DeepSpeed csv_monitor: '"$T"'/abs_job/Train_Samples_lr.csv' '{"csv_monitor": {"enabled": true, "output_path": "ignored", "job_name": "'"$T"'/abs_job"}}'
good_cfg aio_without_nvme '"aio.block_size" is accepted and changes nothing here: no NVMe offload' '{"aio": {"block_size": 4096, "queue_depth": 1, "single_submit": true}}'
finish
