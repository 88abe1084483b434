#!/usr/bin/env bash
# bench/gpu_two.sh: the two-GPU issue's correctness acceptance on nvidia-h200-x2, in one call
# (bench/zero_scaling.sh is the speed half):
#   A. stages 0-3 on 2 GPUs x 16 vs 1 GPU x 32 (same global batch, same examples), 20 steps,
#      dropout 0, t5-small random init: per-step losses, fp32 (<= 1e-5 relative) and bf16
#      (<= 5e-4); fp16 on 2 GPUs with an overflow injected into rank 1's backward at step 12
#      (T5_TEST_OVERFLOW_STEP=12:1): both ranks must skip step 12;
#   B. a checkpoint of 2 GPUs at stage 3 resumed on 1 GPU at stage 2, and one of 1 GPU at
#      stage 2 resumed on 2 GPUs at stage 3 (fp32): steps 11-20 against the uninterrupted runs;
#   C. eval + predict with 4 beams on 500 validation pairs at stage 3, 2 GPUs vs 1 GPU
#      (t5-large bf16 random init, batch 64): eval loss and generated_predictions.txt;
#   D. a rank killed (SIGKILL) or frozen (SIGSTOP) mid-step under --num_gpus 2, torchrun and
#      mpirun: seconds until the job ended, its message, processes left;
#   E. the launchers as users type them (torchrun --no-python, deepspeed --no_python with and
#      without --no_local_rank, mpirun -np 2): 5 steps each on 2 GPUs.
# The binary and libcjson are carried (.carry/lib); DeepSpeed's launcher from .whl.
#   usage (repo root, on the GPU machine): OUT=dir bash bench/gpu_two.sh [A B C D E]
# A CPU rehearsal of part D's mechanics (mpirun only, a tiny model):
#   TWO_CPU=1 bash bench/gpu_two.sh D
set -u
OUT=${OUT:-/tmp/gpu_two}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
S=$OUT/two.log
W=/tmp/two; mkdir -p $W
PARTS=${*:-A B C D E}
say() { echo "$*" | tee -a "$S"; }
want() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
say "== $(date -u +%FT%TZ) $(nvidia-smi -L 2>&1 | tr '\n' ' ') $(nproc) cores"
# every stage from configs/ds_config_zero3.json with only "stage" changed: the same optimizer,
# scheduler (WarmupDecayLR) and buckets, so that runs of different stages are comparable step
# by step (ds_config_zero2.json's WarmupLR would differ from step 3 on)
for st in 0 1 2 3; do sed "s/\"stage\": 3/\"stage\": $st/" configs/ds_config_zero3.json > $W/s$st.json; done
# evaluation alone: stage 3 without the scheduler (an "auto" total_num_steps needs training steps)
python3 -c "import json; c = json.load(open('configs/ds_config_zero3.json')); del c['scheduler']; json.dump(c, open('$W/s3_eval.json', 'w'))"
COMMON="--init random --seed 42 --tokenizer_name data/sample/spiece.model --data_dir data/sample
  --task translation_en_to_ro --max_source_length 64 --max_target_length 64 --learning_rate 1e-4 --warmup_steps 2
  --logging_steps 1 --do_train --cache_dir $W/cache --dropout_rate 0 --sampler sequential --save_strategy no"
# run <tag> <timeout> <launcher words...> -- <train_t5 args...>
run() {
  local tag=$1 t=$2; shift 2
  local pre=()
  while [ "$1" != "--" ]; do pre+=("$1"); shift; done; shift
  local t0=$(date +%s.%N)
  timeout "$t" "${pre[@]}" ./train_t5 $COMMON --output_dir "$W/$tag" "$@" > "$W/$tag.log" 2>&1
  local rc=$?
  say "$tag rc=$rc $(python3 -c "print('%.1f s' % ($(date +%s.%N) - $t0))") :: $(grep -E '^ZeRO stage|error|rank [0-9]+: step' "$W/$tag.log" | head -4 | cut -c1-300 | tr '\n' ' ')"
  cat "$W/$tag.log" >> "$OUT/runs.log"
}
one="env CUDA_VISIBLE_DEVICES=0"
run_two() { local tag=$1 t=$2; shift 2; run "$tag" "$t" env -- --num_gpus 2 "$@"; }

compare() {  # compare <tolerance> <ref tag> <tags...>: per-step losses
  python3 - "$W" "$@" <<'PY' | tee -a "$S"
import json, sys
w, tol, ref, tags = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
def losses(t):
    try: return [h["loss"] for h in json.load(open(f"{w}/{t}/trainer_state.json"))["log_history"] if "loss" in h]
    except Exception as e: return None
r = losses(ref)
for t in tags:
    l = losses(t)
    if not r or not l: print(f"FAIL {t} vs {ref}: no result"); continue
    n = min(len(r), len(l))
    worst = max(abs(a - b) / abs(b) for a, b in zip(l[:n], r[:n]))
    ok = worst <= tol and n == len(r)
    print(f"{'PASS' if ok else 'FAIL'} {t} vs {ref}: {n} steps, loss {l[0]:.6f} -> {l[n-1]:.6f}, worst rel diff {worst:.2e} (tol {tol:g})")
PY
}

if want A; then
  say "--- A. stages 0-3: 2 GPUs x 16 vs 1 GPU x 32, 20 steps, dropout 0 (t5-small)"
  for prec in fp32 bf16; do
    flag=""; [ $prec = bf16 ] && flag=--bf16
    run ${prec}_1g_s0 150 $one -- --model t5-small --device cuda $flag --per_device_train_batch_size 32 --max_steps 20 --deepspeed $W/s0.json
    for st in 0 1 2 3; do
      extra=""; [ $prec = fp32 ] && [ $st = 3 ] && extra="--save_strategy steps --save_steps 10"
      run_two ${prec}_2g_s$st 150 --model t5-small --device cuda $flag --per_device_train_batch_size 16 --max_steps 20 --deepspeed $W/s$st.json $extra
    done
    tol=1e-5; [ $prec = bf16 ] && tol=5e-4
    compare $tol ${prec}_1g_s0 ${prec}_2g_s0 ${prec}_2g_s1 ${prec}_2g_s2 ${prec}_2g_s3
  done
  say "--- A. fp16, overflow injected into rank 1's backward at step 12"
  T5_TEST_OVERFLOW_STEP=12:1 run_two fp16_inject 150 --model t5-small --device cuda --fp16 --per_device_train_batch_size 16 --max_steps 20 --deepspeed $W/s2.json
  grep -E "^rank [01]: step" $W/fp16_inject.log | tee -a "$S"
  for r in 0 1; do
    grep -q "^rank $r: step 12: gradient overflow" $W/fp16_inject.log && say "PASS rank $r skipped step 12" || say "FAIL rank $r did not report skipping step 12"
  done
fi

if want B; then
  say "--- B. resume across world sizes and stages (fp32, t5-small, checkpoint at step 10)"
  [ -d $W/fp32_2g_s3/checkpoint-10 ] || run_two fp32_2g_s3 150 --model t5-small --device cuda --per_device_train_batch_size 16 --max_steps 20 --deepspeed $W/s3.json --save_strategy steps --save_steps 10
  run fp32_1g_s2 150 $one -- --model t5-small --device cuda --per_device_train_batch_size 32 --max_steps 20 --deepspeed $W/s2.json --save_strategy steps --save_steps 10
  run res_2g3_to_1g2 150 $one -- --model t5-small --device cuda --per_device_train_batch_size 32 --max_steps 20 --deepspeed $W/s2.json --resume_from_checkpoint $W/fp32_2g_s3/checkpoint-10
  run_two res_1g2_to_2g3 150 --model t5-small --device cuda --per_device_train_batch_size 16 --max_steps 20 --deepspeed $W/s3.json --resume_from_checkpoint $W/fp32_1g_s2/checkpoint-10
  compare 1e-5 fp32_2g_s3 res_2g3_to_1g2
  compare 1e-5 fp32_1g_s2 res_1g2_to_2g3
fi

if want C; then
  say "--- C. eval + predict, 4 beams, 500 validation pairs, stage 3: 2 GPUs vs 1 GPU (t5-large bf16)"
  EV="--model t5-large --device cuda --bf16 --deepspeed $W/s3_eval.json --do_eval --n_val 500 --do_predict --n_test 500
    --predict_with_generate --generation_num_beams 4 --generation_max_length 128 --max_source_length 128
    --per_device_eval_batch_size 64"
  # evaluation only: COMMON (which trains) is not used here
  for w in 1 2; do
    t0=$(date +%s.%N)
    if [ $w = 1 ]; then env CUDA_VISIBLE_DEVICES=0 timeout 300 ./train_t5 $EV --init random --seed 42 --tokenizer_name data/sample/spiece.model --data_dir data/sample --task translation_en_to_ro --cache_dir $W/cache --output_dir $W/eval_${w}g > $W/eval_${w}g.log 2>&1
    else timeout 300 ./train_t5 --num_gpus 2 $EV --init random --seed 42 --tokenizer_name data/sample/spiece.model --data_dir data/sample --task translation_en_to_ro --cache_dir $W/cache --output_dir $W/eval_${w}g > $W/eval_${w}g.log 2>&1; fi
    say "eval_${w}g rc=$? $(python3 -c "print('%.1f s' % ($(date +%s.%N) - $t0))") :: $(grep -E 'eval_loss|eval_runtime|predict_runtime|error' $W/eval_${w}g.log | tr -s ' ' | tr '\n' ' ')"
    cat $W/eval_${w}g.log >> "$OUT/runs.log"
  done
  python3 - $W <<'PY' | tee -a "$S"
import json, sys, filecmp
w = sys.argv[1]
try:
    a, b = json.load(open(f"{w}/eval_1g/all_results.json")), json.load(open(f"{w}/eval_2g/all_results.json"))
    for k in ("eval_loss", "predict_loss", "eval_bleu", "predict_bleu", "eval_gen_len"):
        d = abs(a[k] - b[k]) / max(abs(a[k]), 1e-30)
        print(f"{'PASS' if d <= 1e-5 else 'FAIL'} {k}: 1 GPU {a[k]!r}, 2 GPUs {b[k]!r} (rel {d:.1e})")
    print(f"eval_runtime 1 GPU {a['eval_runtime']:.1f} s, 2 GPUs {b['eval_runtime']:.1f} s; predict {a['predict_runtime']:.1f} / {b['predict_runtime']:.1f} s")
    same = filecmp.cmp(f"{w}/eval_1g/generated_predictions.txt", f"{w}/eval_2g/generated_predictions.txt", shallow=False)
    print(f"{'PASS' if same else 'FAIL'} generated_predictions.txt byte-identical ({sum(1 for _ in open(f'{w}/eval_2g/generated_predictions.txt'))} lines)")
except Exception as e:
    print(f"FAIL eval comparison: {e}")
PY
fi

# failure <tag> <signal> <launcher> <rank>: start a long run, signal one rank mid-run, time the end
failure() {
  local tag=$1 sig=$2 how=$3 victim=$4
  local args=${FAIL_ARGS:-"--model t5-small --device cuda --bf16 --per_device_train_batch_size 16 --max_steps 100000 --deepspeed $W/s2.json"}
  case $how in
    num_gpus) setsid -w ./train_t5 --num_gpus 2 $COMMON --output_dir $W/$tag $args > $W/$tag.log 2>&1 & ;;
    torchrun) setsid -w torchrun --standalone --nproc_per_node 2 --no-python ./train_t5 $COMMON --output_dir $W/$tag $args > $W/$tag.log 2>&1 & ;;
    mpirun) setsid -w mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE ./train_t5 $COMMON --output_dir $W/$tag $args > $W/$tag.log 2>&1 & ;;
  esac
  local lpid=$!
  # wait until training steps are logged (mid-run), at most 90 s
  for i in $(seq 1 180); do grep -q '"step":3' $W/$tag.log 2>/dev/null && break; sleep 0.5; done
  local pid=""
  for p in $(pgrep -f "train_t5 .*$W/$tag"); do
    grep -qz "^RANK=$victim$" /proc/$p/environ 2>/dev/null && pid=$p
    grep -qz "^OMPI_COMM_WORLD_RANK=$victim$" /proc/$p/environ 2>/dev/null && pid=$p
  done
  if [ -z "$pid" ]; then say "FAIL $tag: rank $victim not found"; pkill -9 -f "train_t5 .*$W/$tag"; return; fi
  local t0=$(date +%s.%N)
  kill -$sig $pid
  local ended=0
  for i in $(seq 1 120); do kill -0 $lpid 2>/dev/null || { ended=1; break; }; sleep 0.5; done
  local dt=$(python3 -c "print('%.1f' % ($(date +%s.%N) - $t0))")
  wait $lpid 2>/dev/null; local rc=$?
  sleep 1
  local left=$(pgrep -f "train_t5 .*$W/$tag" | wc -l)
  [ "$left" != 0 ] && pkill -9 -f "train_t5 .*$W/$tag"
  local named=$(grep -ciE "error.*rank $victim|rank $victim[^0-9].*(stopped|ended|killed|signal|exited)|process rank $victim" $W/$tag.log)
  local verdict=PASS
  python3 -c "import sys; sys.exit(0 if $ended and $dt <= 30 else 1)" || verdict=FAIL
  [ "$left" = 0 ] && [ "$named" -gt 0 ] && [ $rc != 0 ] || verdict=FAIL
  say "$verdict $tag: SIG$sig to rank $victim (pid $pid) under $how: job ended after $dt s, rc $rc, $left process(es) left, rank named in $named line(s)"
  grep -iE "error|rank $victim|HINT" $W/$tag.log | grep -v '"loss"' | tail -4 | cut -c1-300 | tee -a "$S"
  cat $W/$tag.log >> "$OUT/runs.log"
}

if want D; then
  say "--- D. a killed or frozen rank ends the job (heartbeat timeout ${T5_HEARTBEAT_TIMEOUT:-default})"
  if [ "${TWO_CPU:-0}" = 1 ]; then
    FAIL_ARGS="--model tests/fixtures/trainer_model --init pretrained --device cpu --per_device_train_batch_size 2 --max_steps 100000 --max_source_length 16 --max_target_length 16"
    failure stop_mpirun STOP mpirun 1
    failure kill_mpirun KILL mpirun 0
  else
    failure kill_numgpus KILL num_gpus 1
    failure stop_numgpus STOP num_gpus 1
    failure stop0_numgpus STOP num_gpus 0
    failure stop_torchrun STOP torchrun 1
    failure stop_mpirun STOP mpirun 1
  fi
fi

if want E; then
  say "--- E. launchers as typed (5 steps, t5-small bf16, stage 2, 2 GPUs)"
  if [ -d .whl ] && [ ! -d /tmp/site/deepspeed ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > $W/pip.log 2>&1 || say "pip install of .whl failed: $(tail -2 $W/pip.log)"
  fi
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  L="--model t5-small --device cuda --bf16 --per_device_train_batch_size 16 --max_steps 5 --deepspeed $W/s2.json"
  run launch_torchrun 120 torchrun --standalone --nproc_per_node 2 --no-python -- $L
  run launch_ds_nolocal 120 python3 -m deepspeed.launcher.runner --num_gpus 2 --no_python --no_local_rank -- $L
  run launch_ds_local 120 python3 -m deepspeed.launcher.runner --num_gpus 2 --no_python -- $L
  run launch_mpirun 120 mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -- $L
  for t in launch_torchrun launch_ds_nolocal launch_ds_local launch_mpirun; do
    grep -q "train_loss" $W/$t/train_results.json 2>/dev/null && grep -q "over 2 ranks\|(2 ranks)" $W/$t.log && say "PASS $t: 2 ranks trained" || say "FAIL $t"
  done
fi
say "== done $(date -u +%FT%TZ)"
