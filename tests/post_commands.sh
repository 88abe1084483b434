#!/usr/bin/env bash
# tests/post_commands.sh: the command lines a user brings, with only the program name changed,
# parse and plan on the CPU (--explain: the dry run, nothing trained or written):
#  - the 2021 post's full baseline command (transformers issue #8771, finetune_trainer.py flags,
#    `--model_name_or_path t5-large` found in a Hugging Face cache as from_pretrained finds it),
#    as `python -m torch.distributed.launch` starts each rank (--local-rank=N first);
#  - its DeepSpeed rows (configs/ds_config.json and ds_config_1gpu.json: fp16 from the file);
#  - the Transformers DeepSpeed page's launcher lines (deepspeed --num_gpus, deepspeed
#    --include localhost:1, torchrun, python -m torch.distributed.run), each as the launcher
#    hands it to rank 0 (its flags and environment);
#  - three unknown flags in one command: one error naming all three;
#  - --find_max_batch on the baseline: the batch found fits the plan's cap and one more does not.
# The launchers themselves need a GPU machine: bench/gpu_launch_default.sh runs them there.
# Prints OK / NOT OK per command and "N passed, M failed"; exits non-zero on a failure.
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${TRAIN_T5:-./train_t5}
T=$(mktemp -d /tmp/t5_post_XXXXXX); trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }

# A Hugging Face hub cache holding t5-large's config and tokenizer (no weights: --explain reads none).
SNAP=$T/hub/models--t5-large/snapshots/0123abcd
mkdir -p "$SNAP" "$T/hub/models--t5-large/refs"
printf '0123abcd' > "$T/hub/models--t5-large/refs/main"
cp data/sample/spiece.model "$SNAP/"
cat > "$SNAP/config.json" <<'JSON'
{"architectures": ["T5ForConditionalGeneration"], "d_ff": 4096, "d_kv": 64, "d_model": 1024,
 "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1, "feed_forward_proj": "relu",
 "initializer_factor": 1.0, "is_encoder_decoder": true, "layer_norm_epsilon": 1e-06,
 "model_type": "t5", "n_positions": 512, "num_decoder_layers": 24, "num_heads": 16, "num_layers": 24,
 "pad_token_id": 0, "relative_attention_num_buckets": 32, "vocab_size": 32128}
JSON
export HF_HUB_CACHE=$T/hub

# expect <label> <regex the output must hold> <env and command words...>: exit 0 and the regex
expect() {
    local label=$1 want=$2; shift 2
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ $rc -eq 0 ] && grep -qE -- "$want" <<< "$out"; then ok "$label"
    else bad "$label: exit $rc, wanted /$want/; output: $(tail -n 3 <<< "$out" | tr '\n' ' ' | cut -c1-400)"; fi
}

# The post's full baseline command (#8771), $BS = 16, its data dir replaced by the shipped sample;
# FLAGS: the two flags its ds_config.json contradicts (left out of the DeepSpeed rows: docs/POST.md).
COMMON=(--model_name_or_path t5-large --output_dir "$T/output_dir" --data_dir data/sample
  --do_eval --do_train --evaluation_strategy=steps --freeze_embeds --label_smoothing 0.1 --learning_rate 3e-5
  --logging_first_step --logging_steps 1000 --max_source_length 128 --max_target_length 128
  --num_train_epochs 1 --overwrite_output_dir --per_device_eval_batch_size 16 --per_device_train_batch_size 16
  --predict_with_generate --eval_steps 25000 --sortish_sampler --task translation_en_to_ro
  --test_max_target_length 128 --val_max_target_length 128 --n_train 2000 --n_val 500)
FLAGS=(--adam_eps 1e-06 --warmup_steps 5)
POST=("${COMMON[@]}" "${FLAGS[@]}")
RANK0=(env LOCAL_RANK=0 RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500)
expect "the post's baseline, as torch.distributed.launch starts rank 0" "found in the Hugging Face cache" \
    "${RANK0[@]}" "$BIN" --local-rank=0 "${POST[@]}" --explain
expect "the post's baseline plans t5-large (738M parameters)" "t5-large|737|738" \
    "${RANK0[@]}" "$BIN" --local-rank=0 "${POST[@]}" --explain
test -e "$T/output_dir" && bad "--explain created --output_dir" || ok "--explain wrote no --output_dir"
# the DeepSpeed rows, fp16 from the file: a dry run plans them for a GPU on any machine, saying
# why (the real run on a machine with no GPU answers that fp16 needs one, naming the file's key)
for cfg in configs/ds_config.json configs/ds_config_no_offload.json configs/ds_config_1gpu.json; do
    expect "the post's DeepSpeed row, $cfg, as deepspeed starts rank 0: planned for a GPU in fp16" \
        "^device: cuda \\(default of a dry run: $cfg: fp16.enabled asks for a GPU" \
        "${RANK0[@]}" "$BIN" --local_rank=0 "${COMMON[@]}" --deepspeed "$cfg" --explain
done
expect "a DeepSpeed row run (not a dry run) on a machine with no GPU: fp16 from the file needs one" \
    "^error: configs/ds_config.json: fp16.enabled is true, which needs a GPU" \
    sh -c '! "$@"' - "${RANK0[@]}" "$BIN" --local_rank=0 "${COMMON[@]}" --deepspeed configs/ds_config.json --device cpu
# the --sharded_ddp rows (HF 4.2's boolean flag, bare as the post writes it; HF 4.3's options),
# as torch.distributed.launch starts rank 0: the ZeRO stage each stands for; the --fp16 row
# plans fp16 on a GPU
expect "the post's --sharded_ddp row (bare): ZeRO stage 2" "sharded as ZeRO stage 2.*|ZeRO stage 2" \
    "${RANK0[@]}" "$BIN" --local-rank=0 "${POST[@]}" --sharded_ddp --explain
expect "the post's --sharded_ddp --fp16 row: planned in fp16 on a GPU" "parameters \\(Psi\\), fp16, batch 16" \
    "${RANK0[@]}" "$BIN" --local-rank=0 "${POST[@]}" --sharded_ddp --fp16 --explain
expect "--sharded_ddp zero_dp_3: ZeRO stage 3" "sharded as ZeRO stage 3" \
    "${RANK0[@]}" "$BIN" --local-rank=0 "${POST[@]}" --sharded_ddp zero_dp_3 --explain
expect "--sharded_ddp \"zero_dp_2 offload\": ZeRO stage 2, optimizer state in host memory" \
    "ZeRO stage 2 with the optimizer state in host memory" \
    "${RANK0[@]}" "$BIN" --local-rank=0 "${POST[@]}" --sharded_ddp "zero_dp_2 offload" --explain

# The Transformers DeepSpeed page's lines, <normal cl args> = a translation run on JSON lines.
ARGS=(--model_name_or_path google-t5/t5-large --init random --tokenizer_name t5-large --do_train
  --train_file data/sample/wmt16_sample.jsonl --source_lang en --target_lang ro --source_prefix "translate English to Romanian: "
  --per_device_train_batch_size 1 --output_dir "$T/out2" --overwrite_output_dir --max_train_samples 500
  --num_train_epochs 1 --deepspeed configs/ds_config_zero3.json --explain)
[ -f configs/ds_config_zero3.json ] || bad "configs/ds_config_zero3.json is not shipped"
expect "deepspeed --num_gpus=2 (rank 0: --local_rank=0 first)" "ZeRO|stage" \
    env LOCAL_RANK=0 RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 "$BIN" --local_rank=0 "${ARGS[@]}"
expect "deepspeed --include localhost:1 (CUDA_VISIBLE_DEVICES=1)" "ZeRO|stage" \
    env CUDA_VISIBLE_DEVICES=1 LOCAL_RANK=0 RANK=0 WORLD_SIZE=1 "$BIN" --local_rank=0 "${ARGS[@]}"
expect "torchrun --nproc_per_node=2 / python -m torch.distributed.run (environment only)" "ZeRO|stage" \
    env LOCAL_RANK=0 RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 TORCHELASTIC_RUN_ID=none "$BIN" "${ARGS[@]}"
expect "--local_rank that LOCAL_RANK contradicts is refused" "local_rank" \
    sh -c "! env LOCAL_RANK=1 RANK=0 WORLD_SIZE=1 '$BIN' --local_rank=0 --model t5-small --init random \
      --tokenizer_name data/sample/spiece.model --data_dir data/sample --do_train --output_dir '$T/o3' --explain 2>&1"

# --find_max_batch (bench/blog_table.sh's batch per row): the post's baseline on the CPU, planned
# for a GPU of 24 GiB (a dry run may plan for a GPU from a CPU-only machine: the fp32 plan). The
# batch found fits and one more does not, by the plan --explain prints at each (the run's own).
find_check() {  # LABEL ARGS...: --find_max_batch N fits the plan's cap and N+1 does not
    local label=$1; shift
    local FM=("$BIN" "$@" --device cpu --max_gpu_memory 24 --explain)
    local out rc N at above
    out=$("${FM[@]}" --find_max_batch 2>&1); rc=$?
    N=$(sed -n 's/^--find_max_batch: the largest per-device batch under 24 GiB by the memory plan: \([0-9]*\) .*/\1/p' <<< "$out")
    plan_total() {  # BATCH: the plan's total GiB at that train and eval batch
        "${FM[@]}" --per_device_train_batch_size "$1" --per_device_eval_batch_size "$1" 2>&1 \
            | sed -n 's/^largest batch: .* = total \([0-9.]*\) .*/\1/p'
    }
    if [ $rc -eq 0 ] && [ -n "$N" ]; then
        at=$(plan_total "$N"); above=$(plan_total $((N + 1)))
        if [ -n "$at" ] && [ -n "$above" ] && awk "BEGIN{exit !($at <= 24.0 && $above > 24.0)}"; then
            ok "--find_max_batch, $label: batch $N plans $at GiB <= 24, batch $((N + 1)) plans $above GiB"
        else bad "--find_max_batch, $label: batch $N plans '$at' GiB, $((N + 1)) plans '$above' GiB (cap 24)"; fi
    else bad "--find_max_batch, $label: exit $rc, no batch in: $(tail -n 2 <<< "$out" | tr '\n' ' ' | cut -c1-300)"; fi
}
find_check "the post's baseline" "${POST[@]}"
# 10 validation pairs (the t5-3b rows' --n_val): the run cuts the eval batch to 10, so the search
# must plan generation at 10, not at the train batch (it did, and found a batch 3.9 GiB short on
# the H200's t5-3b row)
find_check "10 validation pairs" "${POST[@]}" --n_val 10
refused() {  # LABEL NEEDLE ARGS...: exit non-zero, one error line holding NEEDLE
    local label=$1 needle=$2; shift 2
    local out rc; out=$("$@" 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ "$(grep -c '^error' <<< "$out")" = 1 ] && grep -qF -- "$needle" <<< "$out"; then ok "$label"
    else bad "$label: exit $rc: $(head -c 300 <<< "$out")"; fi
}
refused "--find_max_batch without --explain" "add --explain" "$BIN" "${POST[@]}" --device cpu --find_max_batch
refused "--find_max_batch without --max_gpu_memory" "add --max_gpu_memory" \
    "$BIN" "${POST[@]}" --device cpu --explain --find_max_batch
refused "--max_gpu_memory on the CPU outside a dry run" "it needs a GPU" \
    "$BIN" "${POST[@]}" --device cpu --max_gpu_memory 3

# The GPU a dry run plans for, checked as the start-up check of every rank checks a real one:
# with a faked compute capability (the test hook) bf16 below 8.0 is refused, and a GPU below
# every target the binary holds refuses to start; both in one line, before anything is read
refused "--bf16 on a (faked) compute capability 7.5 GPU" "bf16 needs an Ampere or newer GPU" \
    env T5_TEST_COMPUTE_CAPABILITY=7.5 "$BIN" "${POST[@]}" --device cuda --bf16 --explain
refused "--tf32 on a (faked) compute capability 7.5 GPU" "TF32 needs an Ampere or newer GPU" \
    env T5_TEST_COMPUTE_CAPABILITY=7.5 "$BIN" "${POST[@]}" --device cuda --tf32 --explain
refused "a (faked) compute capability 6.1 GPU: below every target" "none runs on it" \
    env T5_TEST_COMPUTE_CAPABILITY=6.1 "$BIN" "${POST[@]}" --device cuda --fp16 --explain
expect "--fp16 on a (faked) compute capability 7.5 GPU: planned (the post's Turing cards)" \
    "planned for 1 GPU rank of compute capability 7.5" \
    env T5_TEST_COMPUTE_CAPABILITY=7.5 "$BIN" "${POST[@]}" --device cuda --fp16 --explain
refused "--tf32 on the CPU (HF's refusal)" "--tf32 requires Ampere or a newer GPU arch" \
    "$BIN" "${POST[@]}" --device cpu --tf32 --explain

# Three unknown flags: one error naming the three.
out=$("$BIN" --model t5-small --init random --tokenizer_name data/sample/spiece.model --data_dir data/sample \
      --do_train --output_dir "$T/o4" --frobnicate 1 --no_such_flag --warmup_stpes 3 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c '^error' <<< "$out")" = 1 ] && grep -q -- "--frobnicate" <<< "$out" \
   && grep -q -- "--no_such_flag" <<< "$out" && grep -q -- "--warmup_stpes" <<< "$out"; then
    ok "three unknown flags named in one error"
else bad "three unknown flags: exit $rc: $out"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
