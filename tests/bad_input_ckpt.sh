#!/usr/bin/env bash
# tests/bad_input_ckpt.sh: checkpoints that lie (issue 35), under the AddressSanitizer build.
# Each bad input must end with exit code 1 (not a signal, not a sanitizer report) and ONE
# stderr line "error: ..." (optionally a second "HINT: ..." line) naming the file and field,
# with nothing written (no --output_dir, no export or import OUT).
#  1. Shard identity (zero/checkpoint.c): a 2-rank checkpoint (mpirun) whose shards are swapped
#     together with their sizes and CRC-32Cs in the index (the issue's example: resumed with the
#     weights' halves exchanged, exit 0, and exported), a shard of another save, a shard copied
#     under another rank's name, the index of another checkpoint, `latest` naming another save:
#     refused by --resume_from_checkpoint (1 rank) and `train_t5 export`. tests/test_ckpt_identity.c
#     has the whole family at 1 and 2 ranks.
#  2. import-deepspeed (cmd/import_deepspeed.c, formats/ds_checkpoint.c): DeepSpeed
#     checkpoints made without torch (tools/make_ds_synthetic_fixtures.py) holding what a resume
#     would refuse or what misleads: `latest` naming "..", an absolute path, a path, ".", nothing,
#     a NUL; --tag ".."; the loss scaler's cur_scale nan / -4 / 0 / inf / a string, cur_iter,
#     last_overflow_iter and cur_hysteresis below their range, dynamic 5; global_steps -5 and
#     2^40, skipped_steps -1; HF's trainer_state.json with global_step 1e300 or 3.5 or
#     total_flos -1; a nan or negative moment, a nan weight. The valid checkpoint imports.
#   TRAIN_T5=path/to/binary tests/bad_input_ckpt.sh    (default ./build-asan/train_t5)
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${TRAIN_T5:-./build-asan/train_t5}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "OK     $1"; }
notok() { fail=$((fail + 1)); echo "NOT OK $1"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

if [ ! -x "$BIN" ]; then
  notok "$BIN is not built (make test builds it with AddressSanitizer)"
  finish
fi
for tool in python3 mpirun; do
  command -v $tool >/dev/null 2>&1 || { notok "$tool is needed"; finish; }
done
T=$(mktemp -d /tmp/t5_bad_ckpt.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT

run() { # run ENV_ASAN_OPTIONS ARGS... (the train_t5 command line)
  local opts=$1; shift
  ASAN_OPTIONS=$opts UBSAN_OPTIONS=print_stacktrace=1 "$BIN" "$@" >"$T/out" 2>"$T/err"
  rc=$?
}
sanitizer_report() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|UndefinedBehaviorSanitizer' "$T/err"; }

expect_error_cmd() { # expect_error_cmd NAME NEEDLE ARGS...
  local name=$1 needle=$2 why=""
  shift 2
  run "detect_leaks=0" "$@"
  local lines first second
  lines=$(wc -l <"$T/err")
  first=$(sed -n 1p "$T/err")
  second=$(sed -n 2p "$T/err")
  if [ "$rc" -ne 1 ]; then why="exit code $rc, want 1"
  elif sanitizer_report; then why="sanitizer report"
  elif [ "${first#error:}" = "$first" ]; then why="stderr does not start with \"error:\""
  elif [ "$lines" -gt 2 ] || { [ "$lines" -eq 2 ] && [ "${second#HINT:}" = "$second" ]; }; then
    why="stderr has $lines lines (want one error line, optionally a HINT line)"
  elif ! grep -qF -- "$needle" "$T/err"; then why="message does not name \"$needle\""
  fi
  if [ -z "$why" ]; then
    ok "$(printf '%-24s %s' "$name" "$(cut -c1-200 <<<"$first")")"
  else
    notok "$name: $why"
    sed -n '1,12s/^/       | /p' "$T/err"
  fi
}

expect_run_ok() { # NAME LEAKS ARGS...: exit 0, no sanitizer report (LEAKS 1: leaks checked too; a training
  local name=$1 leaks=$2; shift 2  # run's are not, as in bad_input.sh)
  run "detect_leaks=$leaks" "$@"
  if [ "$rc" -ne 0 ] || sanitizer_report; then
    notok "$name: exit code $rc$(sanitizer_report && echo ', sanitizer report')"; sed -n '1,12s/^/       | /p' "$T/err"
    return 1
  fi
  ok "$name: exit 0"
}

nothing_at() { # NAME PATH: the refused command left nothing at PATH
  if [ -e "$2" ]; then notok "$1: $2 was written"; rm -rf "$2"; fi
}

# ---- 1. shard identity -----------------------------------------------------------------
TM=tests/fixtures/trainer_model
TRAIN=(--device cpu --model "$TM" --tokenizer_name data/sample/spiece.model --data_dir tests/fixtures/trainer_data
       --task translation_en_to_ro --max_source_length 24 --max_target_length 20 --max_steps 4 --save_steps 2
       --logging_steps 1 --sampler sequential --dropout_rate 0 --do_train --cache_dir "$T/cache")
if ! OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS \
     -x ASAN_OPTIONS -np 2 "$BIN" "${TRAIN[@]}" --per_device_train_batch_size 4 --output_dir "$T/run" \
     >"$T/run.log" 2>&1; then
  notok "the 2-rank run that makes the checkpoints failed"; sed -n '1,12s/^/       | /p' "$T/run.log"
fi
CK=$T/run/checkpoint-2
lie() { # lie NAME: a copy of checkpoint-2 as $T/NAME (its path on stdout)
  rm -rf "$T/$1"; cp -r "$CK" "$T/$1"; echo "$T/$1"
}
match_index() { # match_index DIR: the index's bytes and crc32c made the files' (so only the identity can tell)
  python3 - "$1/global_step2" <<'PY'
import json, os, sys
g = sys.argv[1]
table = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
def crc32c(b):
    crc = 0xFFFFFFFF
    for x in b: crc = table[(crc ^ x) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
ip = os.path.join(g, "zero_index.json"); idx = json.load(open(ip))
for s in idx["shards"]:
    b = open(os.path.join(g, s["file"]), "rb").read()
    s["bytes"], s["crc32c"] = len(b), crc32c(b)
json.dump(idx, open(ip, "w"))
PY
}
resume_refused() { # NAME NEEDLE CKPT
  expect_error_cmd "$1" "$2" "${TRAIN[@]}" --per_device_train_batch_size 8 --output_dir "$T/res_out" \
    --resume_from_checkpoint "$3"
  nothing_at "$1" "$T/res_out"
}
export_refused() { # NAME NEEDLE CKPT
  expect_error_cmd "$1" "$2" export "$3" "$T/exp_out"
  nothing_at "$1" "$T/exp_out"
}
g=global_step2
d=$(lie swapped)
mv "$d/$g/rank_00000.safetensors" "$d/x" && mv "$d/$g/rank_00001.safetensors" "$d/$g/rank_00000.safetensors" &&
  mv "$d/x" "$d/$g/rank_00001.safetensors" && match_index "$d"
resume_refused "swapped shards" 'rank_00000.safetensors: __metadata__ "rank" is "1"' "$d"
export_refused "export swapped" 'rank_00000.safetensors: __metadata__ "rank" is "1"' "$d"
d=$(lie other_save); cp "$T/run/checkpoint-4/global_step4/rank_00001.safetensors" "$d/$g/"; match_index "$d"
resume_refused "shard of step 4" 'rank_00001.safetensors: __metadata__ "global_step" is "4"' "$d"
export_refused "export shard of step 4" 'rank_00001.safetensors: __metadata__ "global_step" is "4"' "$d"
d=$(lie copied); cp "$d/$g/rank_00000.safetensors" "$d/$g/rank_00001.safetensors"; match_index "$d"
resume_refused "shard under rank 1's name" 'rank_00001.safetensors: __metadata__ "rank" is "0"' "$d"
d=$(lie index4); cp "$T/run/checkpoint-4/global_step4/zero_index.json" "$d/$g/"
resume_refused "index of checkpoint-4" "zero_index.json: global_step 4, but it lies in global_step2" "$d"
d=$(lie latest4); cp -r "$T/run/checkpoint-4/global_step4" "$d/"; printf global_step4 >"$d/latest"
export_refused "latest names step 4" "trainer_state.json says 2" "$d"
expect_run_ok "the checkpoint as written resumes" 0 "${TRAIN[@]}" --per_device_train_batch_size 8 \
  --output_dir "$T/res_ok" --resume_from_checkpoint "$CK"
expect_run_ok "the checkpoint as written exports" 1 export "$CK" "$T/exp_ok"

# ---- 2. import-deepspeed -----------------------------------------------------------------
python3 - "$T" <<'PY' || { notok "python3 could not write the DeepSpeed checkpoints"; finish; }
import os, sys
sys.path.insert(0, "tools")
import make_ds_synthetic_fixtures as m

root, src = sys.argv[1], "tests/fixtures/relu_tied"
BASE = dict(stage=2, ws=2, frozen=("encoder.final_layer_norm.weight",), trainer_state=True)
Q = "decoder.block.0.layer.0.SelfAttention.q.weight"

def v(name, **kw):
    m.make(src, os.path.join(root, name), **dict(BASE, **kw))

def poison(which, value):
    def f(vals, m1, m2):
        {"w": vals, "m": m1, "v": m2}[which][Q][3] = value
    return f

v("ds_good")
v("ds3_good", stage=3, ws=3, frozen=("decoder.final_layer_norm.weight",), trainer_state=False)
for name, val in [("nan", float("nan")), ("m4", -4.0), ("zero", 0.0), ("inf", float("inf")), ("str", "big")]:
    v("ds_scale_" + name, scaler_state={"cur_scale": val})
v("ds3_scale_nan", stage=3, ws=3, frozen=("decoder.final_layer_norm.weight",), trainer_state=False,
  scaler_state={"cur_scale": float("nan")})
v("ds_iter_m3", scaler_state={"cur_iter": -3})
v("ds_overflow_m7", scaler_state={"last_overflow_iter": -7})
v("ds_hyst_m2", scaler_state={"cur_hysteresis": -2})
v("ds_dynamic_5", scaler_state={"dynamic": 5})
v("ds_steps_m5", model_state={"global_steps": -5})
v("ds_steps_m5_nohf", model_state={"global_steps": -5}, trainer_state=False)
v("ds_steps_2e40", model_state={"global_steps": 2 ** 40}, trainer_state=False)
v("ds_skipped_m1", model_state={"skipped_steps": -1}, trainer_state=False)
v("ds_hf_1e300", trainer_state={"global_step": 1e300})
v("ds_hf_3_5", trainer_state={"global_step": 3.5})
v("ds_hf_flos", trainer_state={"total_flos": -1})
v("ds_v_neg", poison=poison("v", -1e-6))
v("ds_m_nan", poison=poison("m", float("nan")))
v("ds_w_nan", poison=poison("w", float("nan")))
PY
imp_refused() { # NAME NEEDLE CKPT_DIR [ARGS...]
  local name=$1 needle=$2 dir=$3; shift 3
  expect_error_cmd "$name" "$needle" import-deepspeed "$dir" "$T/imp_out" "$@"
  nothing_at "$name" "$T/imp_out"
}
good=$T/ds_good/checkpoint
lat() { # lat NAME TEXT: a copy of the good checkpoint whose latest holds TEXT (printf format)
  rm -rf "$T/$1"; mkdir -p "$(dirname "$T/$1")"; cp -r "$good" "$T/$1"; printf "$2" >"$T/$1/latest"; echo "$T/$1"
}
# ".." and "." where the folder named holds a checkpoint's files too (DeepSpeed would read them)
d=$(lat lat_up/inner '..'); cp "$good"/global_step3/*.pt "$T/lat_up/"
imp_refused "latest: .." 'the tag ".." names the checkpoint folder itself or its parent' "$d"
d=$(lat lat_dot '.\n'); cp "$good"/global_step3/*.pt "$d/"
imp_refused "latest: ." 'the tag "." names the checkpoint folder itself' "$d"
imp_refused "latest: absolute" "is a path, not a folder name" "$(lat lat_abs "$good/global_step3")"
imp_refused "latest: a path" "is a path, not a folder name" "$(lat lat_path 'global_step3/../global_step3')"
imp_refused "latest: empty" 'the tag "" is empty' "$(lat lat_empty ' \n')"
imp_refused "latest: NUL" "holds a NUL byte" "$(lat lat_nul 'global_step3\0x')"
imp_refused "latest: missing tag" 'the tag folder "global_step9" is not there' "$(lat lat_missing 'global_step9')"
imp_refused "--tag .." '--tag: the tag ".."' "$good" --tag ..
OPT=bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt
MS=mp_rank_00_model_states.pt
for k in nan m4 zero inf; do
  want=$(case $k in nan) echo nan;; m4) echo -4;; zero) echo 0;; inf) echo inf;; esac)
  imp_refused "cur_scale $want" "$OPT: optimizer_state_dict.loss_scaler.cur_scale is $want, expected a finite number > 0" \
    "$T/ds_scale_$k/checkpoint"
done
imp_refused "cur_scale a string" "$OPT: optimizer_state_dict.loss_scaler.cur_scale is str, expected a number" \
  "$T/ds_scale_str/checkpoint"
imp_refused "ZeRO-3 cur_scale nan" "optimizer_state_dict.loss_scaler.cur_scale is nan" "$T/ds3_scale_nan/checkpoint"
imp_refused "cur_iter -3" "loss_scaler.cur_iter is -3, expected a whole number in [0," "$T/ds_iter_m3/checkpoint"
imp_refused "last_overflow_iter -7" "loss_scaler.last_overflow_iter is -7" "$T/ds_overflow_m7/checkpoint"
imp_refused "cur_hysteresis -2" "loss_scaler.cur_hysteresis is -2" "$T/ds_hyst_m2/checkpoint"
imp_refused "dynamic 5" "loss_scaler.dynamic is 5, expected a whole number in [0, 1]" "$T/ds_dynamic_5/checkpoint"
imp_refused "global_steps -5" "$MS: global_steps is -5" "$T/ds_steps_m5/checkpoint"
imp_refused "global_steps -5, no HF" "$MS: global_steps is -5" "$T/ds_steps_m5_nohf/checkpoint"
imp_refused "global_steps 2^40" "$MS: global_steps is 1099511627776" "$T/ds_steps_2e40/checkpoint"
imp_refused "skipped_steps -1" "$MS: skipped_steps is -1" "$T/ds_skipped_m1/checkpoint"
imp_refused "HF global_step 1e300" 'trainer_state.json: "global_step" is 1e+300' "$T/ds_hf_1e300/checkpoint"
imp_refused "HF global_step 3.5" 'trainer_state.json: "global_step" is 3.5' "$T/ds_hf_3_5/checkpoint"
imp_refused "HF total_flos -1" 'trainer_state.json: "total_flos" must be a finite number >= 0' "$T/ds_hf_flos/checkpoint"
imp_refused "exp_avg_sq < 0" '"decoder.block.0.layer.0.SelfAttention.q.weight" (exp_avg_sq) holds -1e-06' \
  "$T/ds_v_neg/checkpoint"
imp_refused "exp_avg nan" '"decoder.block.0.layer.0.SelfAttention.q.weight" (exp_avg) holds nan' "$T/ds_m_nan/checkpoint"
imp_refused "weight nan" '"decoder.block.0.layer.0.SelfAttention.q.weight" (the fp32 weights) holds nan' \
  "$T/ds_w_nan/checkpoint"
expect_run_ok "import ZeRO-2 as written" 1 import-deepspeed "$good" "$T/imp_good"
expect_run_ok "import ZeRO-3 as written" 1 import-deepspeed "$T/ds3_good/checkpoint" "$T/imp_good3"

finish
