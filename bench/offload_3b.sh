#!/usr/bin/env bash
# bench/offload_3b.sh: t5-3b bf16 under a 24 GiB cap with gradient checkpointing, ZeRO-2 with
# the optimizer offloaded to the CPU (configs/ds_config_zero2_offload.json), train_t5 against
# DeepSpeed in one GPU call (issue 17, acceptance 4):
#   1. train_t5 bench at B=64 (random 128/128 shapes, 2 warm-up + 8 timed steps; T5_STEP_TIMES=1
#      prints where each step's time goes), then --find_max_batch (the largest batch, multiple
#      of 8, whose memory plan fits the cap, run for 3 steps);
#   2. bench/ds_baseline.py (HF T5 + deepspeed.initialize, DeepSpeedCPUAdam, the allocator
#      capped with set_per_process_memory_fraction) at B=64, then --grow-batch on the same
#      engine: 128, 192, ... until one runs out of memory.
#   usage (GPU machine, repo root; DeepSpeed from .whl/): OUT=dir bash bench/offload_3b.sh
#   O3B_SKIP_DS=1 leaves out part 2; O3B_GROW="128,256" sets the batches DeepSpeed tries;
#   O3B_T5_ARGS adds flags to train_t5's runs (e.g. "--checkpoint_sub_batch 16").
set -u
OUT=${OUT:-/tmp/offload_3b}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/t5_torch_extensions}
PY=${PYTHON:-python3}
WHEELS=${BENCH_WHEELS:-.whl}
CFG=configs/ds_config_zero2_offload.json
CAP=24
. bench/ds_env.sh
ds_env_setup "$OUT"

echo "== 1. train_t5: t5-3b bf16, ZeRO-2 + CPU offload, gradient checkpointing, cap $CAP GiB"
T5_STEP_TIMES=1 timeout 150 ./train_t5 bench --model t5-3b --bf16 --batch 64 --gradient_checkpointing \
    --max_gpu_memory $CAP --deepspeed $CFG --steps 8 --warmup 2 ${O3B_T5_ARGS:-} > "$OUT/t5_b64.log" 2>&1
grep -E "^memory plan|^activations|^start-up|^RESULT|error" "$OUT/t5_b64.log"
grep -E "times|update \(" "$OUT/t5_b64.log" | tail -4
timeout 200 ./train_t5 bench --model t5-3b --bf16 --batch 64 --gradient_checkpointing --find_max_batch \
    --max_gpu_memory $CAP --deepspeed $CFG --steps 3 --warmup 1 ${O3B_T5_ARGS:-} > "$OUT/t5_max.log" 2>&1
grep -E "^memory plan|largest|^RESULT|error" "$OUT/t5_max.log"

if [ "${O3B_SKIP_DS:-0}" != 1 ] && has_ds; then
    echo "== 2. DeepSpeed: the same config, model and shapes"
    ds_build_cpu_adam "$OUT"
    timeout ${O3B_DS_TIMEOUT:-400} torchrun --standalone --nproc_per_node 1 bench/ds_baseline.py --model t5-3b --precision bf16 \
        --batch 64 --gradient-checkpointing --max-gpu-memory $CAP --deepspeed $CFG --steps 5 --warmup 2 \
        --grow-batch "${O3B_GROW:-128,192,256,320,384,448,512,640,768}" > "$OUT/ds.log" 2>&1
    grep -E "^RESULT|^INFO (params|grow|first)|Error" "$OUT/ds.log" | cut -c1-300
fi
"$PY" - "$OUT" <<'PY'
import sys
def res(path, key="RESULT"):
    try:
        for line in open(path):
            if line.startswith(key + " "):
                return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    except OSError:
        pass
    return {}
o = sys.argv[1]
t, tm, d, dm = res(o + "/t5_b64.log"), res(o + "/t5_max.log"), res(o + "/ds.log"), res(o + "/ds.log", "RESULT_MAX")
print("| t5-3b bf16, ZeRO-2 + CPU offload, ckpt, 24 GiB cap | train_t5 | DeepSpeed | ratio |\n|---|---|---|---|")
def row(name, a, b, better_low=False):
    try:
        r = float(b) / float(a) if better_low else float(a) / float(b)
        ratio = f"{r:.2f}x"
    except (TypeError, ValueError, ZeroDivisionError):
        ratio = "-"
    print(f"| {name} | {a or '-'} | {b or '-'} | {ratio} |")
row("B=64 samples/s", t.get("samples_per_s"), d.get("samples_per_s"))
row("B=64 peak GiB", t.get("peak_gib"), d.get("peak_gib"), better_low=True)
row("largest batch", tm.get("batch"), dm.get("largest_batch"))
grow = {}
try:
    for line in open(o + "/ds.log"):
        if line.startswith("INFO grow batch=") and "status=ok" in line:
            grow = dict(kv.split("=", 1) for kv in line.split()[2:] if "=" in kv)
except OSError:
    pass
row("samples/s at the largest batch", tm.get("samples_per_s"), grow.get("samples_per_s", d.get("samples_per_s")))
PY
