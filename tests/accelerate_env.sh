#!/usr/bin/env bash
# tests/accelerate_env.sh: the HF + DeepSpeed routes to a DeepSpeed config that are not a file
# path. --deepspeed as JSON text and as base64 of it (deepspeed/ds_source.c), and the
# environment `accelerate launch --no_python ./train_t5 ...` sets (trainer/accelerate_env.c):
# the DeepSpeed plugin's variables give the ZeRO stage and offload they name (a config file's
# "auto" filled from them), ACCELERATE_MIXED_PRECISION the precision, and what cannot be
# honoured is one error line. Each run trains 2 steps of the demo model on the CPU, or is
# an --explain dry run. Prints OK / NOT OK and "N passed, M failed".
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${TRAIN_T5:-./train_t5}
T=$(mktemp -d /tmp/t5_accel_XXXXXX); trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }
# the launcher's own variables from the calling shell would change what these runs mean
unset $(env | grep -oE '^ACCELERATE_[A-Z0-9_]*') 2>/dev/null

RUN=(--model data/sample/t5-demo --init random --tokenizer_name data/sample/spiece.model --data_dir data/sample
     --task translation_en_to_ro --max_source_length 16 --max_target_length 16 --per_device_train_batch_size 4
     --max_steps 2 --logging_steps 1 --do_train --cache_dir "$T/cache" --overwrite_output_dir)
n=0
# trains NAME NEEDLE... -- ENV... FLAGS...: runs ENV ./train_t5 RUN FLAGS; exit 0, train_loss printed, each
# NEEDLE in the output (kept in LAST_OUT)
trains() {
    local name=$1; shift
    local needles=()
    while [ "$1" != "--" ]; do needles+=("$1"); shift; done; shift
    local envs=() flags=()  # NAME=value items are the environment, the rest flags
    for x in "$@"; do if [[ $x =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$x"); else flags+=("$x"); fi; done
    n=$((n + 1))
    local out; out=$(env "${envs[@]}" "$BIN" "${RUN[@]}" --output_dir "$T/out$n" "${flags[@]}" 2>&1); local rc=$?
    LAST_OUT=$out
    if [ $rc -ne 0 ] || ! grep -q 'train_loss' <<<"$out"; then
        bad "$name: exit $rc: $(tail -2 <<<"$out" | tr '\n' ' ')"; return
    fi
    for nd in "${needles[@]}"; do
        grep -qF -- "$nd" <<<"$out" || { bad "$name: \"$nd\" not in the output"; return; }
    done
    ok "$name: trains, $(grep -m1 -F -- "${needles[0]}" <<<"$out" | cut -c1-150)"
}
# refused NAME NEEDLE ENV... [-- FLAGS...]: exit 1, one error line holding NEEDLE, no output dir
refused() {
    local name=$1 needle=$2; shift 2
    local envs=() flags=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift && flags=("$@")
    n=$((n + 1))
    local err; err=$(env "${envs[@]}" "$BIN" "${RUN[@]}" --output_dir "$T/out$n" "${flags[@]}" 2>&1 >/dev/null); local rc=$?
    local lines; lines=$(grep -c '^error:' <<<"$err")
    if [ $rc -eq 1 ] && [ "$lines" = 1 ] && grep -qF -- "$needle" <<<"$err" && [ ! -e "$T/out$n" ]; then
        ok "$name: exit 1: $(grep '^error:' <<<"$err" | cut -c1-160)"
    else
        bad "$name: exit $rc, want one error line with \"$needle\": $(tr '\n' ' ' <<<"$err" | cut -c1-300)"
    fi
}

# ---- --deepspeed as text ----
JSON='{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}'
trains "--deepspeed JSON text" "DeepSpeed config --deepspeed (JSON text):" "zero stage 2" -- X=1 --deepspeed "$JSON"
B64=$(printf '%s' '{"zero_optimization": {"stage": 1}, "gradient_clipping": 0.5}' | base64 -w0 | tr '+/' '-_')
trains "--deepspeed urlsafe base64" "DeepSpeed config --deepspeed (base64 of JSON text):" "clip 0.5" "zero stage 1" \
  -- X=1 --deepspeed "$B64"
B64STD=$(printf '%s' '{"zero_optimization": {"stage": 3}}' | base64 -w0)
trains "--deepspeed standard base64" "zero stage 3" -- X=1 --deepspeed "$B64STD"
refused "--deepspeed JSON text, syntax error" "--deepspeed (JSON text): invalid JSON" -- --deepspeed '{"zero_optimization": {"stage": 2,}}'
refused "--deepspeed JSON text, not a config key" "--deepspeed (JSON text): unknown key" -- --deepspeed '{"zero_optimisation": {}}'
refused "--deepspeed neither file nor text" "cannot open the DeepSpeed config" -- --deepspeed no_such.json

# ---- accelerate launch's variables ----
trains "plugin: stage 3, optimizer on the CPU" "ACCELERATE_DEEPSPEED_* (accelerate's plugin config): " "zero stage 3" \
  "optimizer offloaded" -- ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=3 \
  ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=cpu ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE=none
trains "plugin: stage 2 by default, as accelerate's" "zero stage 2" -- ACCELERATE_USE_DEEPSPEED=TRUE
trains "plugin: clipping" "clip 0.25" "zero stage 1" -- ACCELERATE_USE_DEEPSPEED=yes ACCELERATE_DEEPSPEED_ZERO_STAGE=1 \
  ACCELERATE_GRADIENT_CLIPPING=0.25
printf '%s' '{"zero_optimization": {"stage": "auto"}, "gradient_clipping": "auto"}' > "$T/auto.json"
trains "config file: its \"auto\" stage filled from the variable" "DeepSpeed config $T/auto.json:" "zero stage 1" \
  -- ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_CONFIG_FILE="$T/auto.json" ACCELERATE_DEEPSPEED_ZERO_STAGE=1
trains "config file: explicit values win" "DeepSpeed config configs/ds_config_zero2.json:" "zero stage 2" -- \
  ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_CONFIG_FILE=configs/ds_config_zero2.json ACCELERATE_DEEPSPEED_ZERO_STAGE=3
trains "not DeepSpeed: the variables are not read" "Total optimization steps = 2" -- ACCELERATE_USE_DEEPSPEED=false \
  ACCELERATE_DEEPSPEED_ZERO_STAGE=3
if grep -q 'DeepSpeed config\|ZeRO stage [1-3]' <<<"$LAST_OUT"; then bad "ACCELERATE_USE_DEEPSPEED=false still ran DeepSpeed"
else ok "ACCELERATE_USE_DEEPSPEED=false: no DeepSpeed config line"; fi
trains "--deepspeed wins over the variables" "the --deepspeed config is used" "zero stage 1" -- \
  ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=3 --deepspeed configs/ds_config_zero1.json
refused "plugin: stage 4" "ACCELERATE_DEEPSPEED_ZERO_STAGE=\"4\"" ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=4
refused "plugin: accumulation differs from the flag" "--gradient_accumulation_steps 2 to train_t5" \
  ACCELERATE_USE_DEEPSPEED=true ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2
trains "plugin: accumulation given to both" "accumulation 2" -- ACCELERATE_USE_DEEPSPEED=true \
  ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2 --gradient_accumulation_steps 2
refused "config file beside accelerate-config fields" "ACCELERATE_CONFIG_DS_FIELDS has \"gradient_clipping\"" \
  ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_CONFIG_FILE=configs/ds_config_zero2.json \
  ACCELERATE_CONFIG_DS_FIELDS=deepspeed_multinode_launcher,gradient_clipping
printf '%s' '{"fp16": {"enabled": "auto"}}' > "$T/nozero.json"
refused "config file without zero_optimization" "no \"zero_optimization\" section" ACCELERATE_USE_DEEPSPEED=true \
  ACCELERATE_DEEPSPEED_CONFIG_FILE="$T/nozero.json"
refused "config file missing" "ACCELERATE_DEEPSPEED_CONFIG_FILE=$T/none.json: cannot open" ACCELERATE_USE_DEEPSPEED=true \
  ACCELERATE_DEEPSPEED_CONFIG_FILE="$T/none.json"
refused "a bool accelerate would not read" "ACCELERATE_USE_DEEPSPEED=\"maybe\"" ACCELERATE_USE_DEEPSPEED=maybe
refused "FSDP" "ACCELERATE_USE_FSDP=true" ACCELERATE_USE_FSDP=true
refused "Megatron-LM" "ACCELERATE_USE_MEGATRON_LM=true" ACCELERATE_USE_MEGATRON_LM=1
refused "fp8 is --fp8 --bf16: on the CPU it names the variable" "ACCELERATE_MIXED_PRECISION=fp8 needs a GPU" \
  ACCELERATE_MIXED_PRECISION=fp8
refused "unknown precision" "ACCELERATE_MIXED_PRECISION=\"fp4\"" ACCELERATE_MIXED_PRECISION=fp4
# precision: bf16 needs a GPU, and the error names the variable; a dry run plans it
refused "bf16 on the CPU names the variable" "ACCELERATE_MIXED_PRECISION=bf16 needs a GPU" ACCELERATE_MIXED_PRECISION=bf16
out=$(ACCELERATE_MIXED_PRECISION=bf16 ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=3 "$BIN" "${RUN[@]}" \
      --output_dir "$T/dry" --explain 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q 'bf16' <<<"$out" && grep -q 'ZeRO stage 3' <<<"$out"; then
    ok "dry run plans ACCELERATE_MIXED_PRECISION=bf16 at the plugin's stage 3: $(grep -m1 'ZeRO stage 3' <<<"$out" | cut -c1-120)"
else
    bad "dry run with the variables: exit $rc: $(tail -3 <<<"$out" | tr '\n' ' ')"
fi
trains "inert variables named" "NOTICE: ACCELERATE_DYNAMO_BACKEND is accepted and changes nothing here" \
  "NOTICE: ACCELERATE_DEEPSPEED_ZERO3_INIT=true is accepted and changes nothing here" \
  -- ACCELERATE_MIXED_PRECISION=no ACCELERATE_DYNAMO_BACKEND=inductor ACCELERATE_USE_DEEPSPEED=true \
  ACCELERATE_DEEPSPEED_ZERO3_INIT=true
printf '%s' '{"zero_optimization": {"stage": 2}, "fp16": {"enabled": true}}' > "$T/fp16.json"
refused "precision against the file's other precision" "accelerate refuses this pair too" ACCELERATE_MIXED_PRECISION=bf16 \
  ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_CONFIG_FILE="$T/fp16.json" -- --explain
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
