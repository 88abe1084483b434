#!/usr/bin/env bash
# bench/gpu_launch_default.sh: on the 2-GPU machine, the command lines a new user types, with no
# --device (the default is the GPU when one is visible): one rank, --num_gpus 2, torchrun
# --no-python, the deepspeed launcher with and without --no_local_rank, torch.distributed.launch
# (--local-rank=N), mpirun -np 2; then the 2021 post's baseline flags (finetune_trainer.py names)
# on 2 GPUs. 3 steps of t5-small each; a run passes when it trained on cuda over the expected ranks.
#   usage (repo root, GPU machine): OUT=dir bash bench/gpu_launch_default.sh
#   NGPU=1 (default: the number of GPUs nvidia-smi lists) runs the same lines with one process
#   per launcher, on a one-GPU machine.
set -u
OUT=${OUT:-/tmp/gpu_launch}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
S=$OUT/launch.log; W=/tmp/launch; mkdir -p $W
N=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ "$N" -ge 1 ] 2>/dev/null || { echo "no GPU visible: this script runs on the GPU machine"; exit 1; }
say() { echo "$*" | tee -a "$S"; }
say "== $N GPU(s), $(date -u +%FT%TZ)"
if [ -d .whl ] && [ ! -d /tmp/site/deepspeed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > $W/pip.log 2>&1
fi
export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
D="--model t5-small --init random --tokenizer_name data/sample/spiece.model --data_dir data/sample
  --task translation_en_to_ro --max_source_length 64 --max_target_length 64 --per_device_train_batch_size 8
  --max_steps 3 --logging_steps 1 --do_train --save_strategy no --cache_dir $W/cache --bf16"
# try <tag> <ranks> <launcher words...> -- <extra train_t5 args>
try() {
  local tag=$1 ranks=$2; shift 2
  local pre=()
  while [ "$1" != "--" ]; do pre+=("$1"); shift; done; shift
  timeout 150 "${pre[@]}" ./train_t5 $D --output_dir $W/$tag "$@" > $W/$tag.log 2>&1
  local rc=$?
  local dev=$(grep -m1 -E '^device: ' $W/$tag.log)
  if [ $rc = 0 ] && grep -q "^device: cuda" $W/$tag.log && grep -q "($ranks rank" $W/$tag.log; then
    say "PASS $tag: rc 0, $dev, $ranks rank(s)"
  else
    say "FAIL $tag: rc $rc, ${dev:-no device line} :: $(grep -E 'error|HINT' $W/$tag.log | head -2 | tr '\n' ' ' | cut -c1-300)"
  fi
  cat $W/$tag.log >> $OUT/runs.log
}
try one_rank 1 env --
try num_gpus $N env -- --num_gpus $N
try torchrun $N torchrun --standalone --nproc_per_node $N --no-python --
try ds_nolocal $N python3 -m deepspeed.launcher.runner --num_gpus $N --no_python --no_local_rank --
try ds_local $N python3 -m deepspeed.launcher.runner --num_gpus $N --no_python --
# torch.distributed.launch runs a Python script (--no-python needs --use-env, which drops the flag):
# a shim that execs the program, so that train_t5 gets the launcher's --local-rank=N
printf '%s\n' 'import os, sys' 'a = sys.argv[1:]' 'lr = [x for x in a if x.startswith(("--local-rank=", "--local_rank="))]' \
  'rest = [x for x in a if x not in lr]' 'os.execv(rest[0], rest + lr)' > $W/exec_shim.py
try dist_launch $N python3 -m torch.distributed.launch --nproc_per_node $N $W/exec_shim.py --
try dist_launch_env $N python3 -m torch.distributed.launch --nproc_per_node $N --use-env --no-python --
try mpirun $N mpirun --allow-run-as-root -np $N -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE --
# the post's baseline flags (finetune_trainer.py spellings), all GPUs, no --device
try post_baseline $N env -- --num_gpus $N --adam_eps 1e-06 --label_smoothing 0.1 --learning_rate 3e-5 \
  --num_train_epochs 1 --freeze_embeds --warmup_steps 5 --sortish_sampler --predict_with_generate \
  --n_train 64 --n_val 16 --do_eval --per_device_eval_batch_size 8 --logging_first_step
say "== done $(date -u +%FT%TZ)"
