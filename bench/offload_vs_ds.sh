#!/usr/bin/env bash
# bench/offload_vs_ds.sh: ZeRO-2 + CPU optimizer offload against DeepSpeed's, in one GPU call
# (issue 17, acceptance 3), plus the offloaded step's correctness on the GPU:
#   1. train_t5 t5-large bf16 stage 2, 20 steps of 16 x 128/128 (data/sample) with the GPU AdamW,
#      with configs/ds_config_zero2_offload.json, and with the optimizer state on NVMe (the same
#      config, "device": "nvme", nvme_path $NVME_DIR, default /tmp/t5_nvme: issue 17, acceptance 6):
#      the losses step by step, and each run's samples/s;
#   2. fixed shapes (random 128/128, t5-large bf16, B=16, 5 warm-up + 20 timed steps), both
#      tools reading configs/ds_config_zero2_offload.json: `train_t5 bench --deepspeed` and
#      bench/ds_baseline.py (HF T5 + deepspeed.initialize, DeepSpeedCPUAdam JIT-built);
#   3. bench/cpu_adam.sh (the CPU AdamW alone against DeepSpeedCPUAdam) when CPU_ADAM is set.
#   usage (GPU machine, repo root; DeepSpeed from .whl/): OUT=dir bash bench/offload_vs_ds.sh
#   OVD_SKIP_CHECK=1 leaves out part 1, OVD_SKIP_NVME=1 part 2's NVMe run (9 s a step on the
#   H200 machine's disk).
set -u
OUT=${OUT:-/tmp/offload_vs_ds}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/t5_torch_extensions}
PY=${PYTHON:-python3}
WHEELS=${BENCH_WHEELS:-.whl}
CFG=configs/ds_config_zero2_offload.json
. bench/ds_env.sh
ds_env_setup "$OUT"
ds_build_cpu_adam "$OUT"

NVME_DIR=${NVME_DIR:-/tmp/t5_nvme}; rm -rf "$NVME_DIR"; mkdir -p "$NVME_DIR"
NVME_DIR=$NVME_DIR "$PY" - <<'PY'
import json, os
c = json.load(open("configs/ds_config_zero2_offload.json"))
n = json.loads(json.dumps(c))
n["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": os.environ["NVME_DIR"], "pin_memory": True}
json.dump(n, open("/tmp/ovd_z2_nvme.json", "w"), indent=1)
del c["zero_optimization"]["offload_optimizer"]
json.dump(c, open("/tmp/ovd_z2.json", "w"), indent=1)
PY
if [ "${OVD_SKIP_CHECK:-0}" != 1 ]; then
echo "== 1. offloaded AdamW (host memory, NVMe) against the GPU's, t5-large bf16 stage 2, 20 steps"
COMMON="--init random --seed 42 --device cuda --bf16 --tokenizer_name data/sample/spiece.model --data_dir data/sample
  --task translation_en_to_ro --max_source_length 128 --max_target_length 128 --learning_rate 1e-4 --warmup_steps 5
  --logging_steps 1 --do_train --cache_dir /tmp/ovd_cache --save_strategy no --model t5-large
  --per_device_train_batch_size 16 --max_steps 20 --dropout_rate 0"
for tag in gpu off nvme; do
    cfg=/tmp/ovd_z2.json; [ $tag = off ] && cfg=$CFG; [ $tag = nvme ] && cfg=/tmp/ovd_z2_nvme.json
    timeout 300 ./train_t5 $COMMON --deepspeed $cfg --output_dir /tmp/ovd_$tag > "$OUT/train_$tag.log" 2>&1
    echo "  $tag rc=$? $(grep -o 'offloaded to NVMe: [0-9]* B in [^;]*' "$OUT/train_$tag.log" | head -1)"
done
"$PY" - "$OUT" <<'PY'
import json, sys
def run(tag):
    try:
        h = json.load(open(f"/tmp/ovd_{tag}/trainer_state.json"))["log_history"]
        r = json.load(open(f"/tmp/ovd_{tag}/train_results.json"))
    except OSError:
        return [], {}
    return [e["loss"] for e in h if "loss" in e], r
def worst(a, b):
    return max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
(g, rg), (o, ro), (n, rn) = run("gpu"), run("off"), run("nvme")
for name, l, r in (("GPU AdamW", g, rg), ("CPU offload", o, ro), ("NVMe offload", n, rn)):
    if l:
        print(f"  {name}: loss {l[0]:.5f} -> {l[-1]:.5f} over {len(l)} steps, "
              f"{r.get('train_samples_per_second', 0):.1f} samples/s (train_runtime, start-up included: "
              f"{r.get('train_runtime', 0):.1f} s), peak {r.get('train_peak_gpu_memory_gib', 0):.2f} GiB")
print(f"  worst relative loss difference: CPU offload vs GPU AdamW {worst(g, o):.2e}, NVMe vs CPU offload {worst(o, n):.2e}")
PY
fi

echo "== 2. fixed shapes: t5-large bf16 ZeRO-2 + CPU offload, B=16, 128/128"
./train_t5 bench --model t5-large --bf16 --batch 16 --deepspeed $CFG > "$OUT/bench_t5.log" 2>&1
grep -E "^RESULT|^start-up" "$OUT/bench_t5.log"
if [ "${OVD_SKIP_NVME:-0}" != 1 ]; then
    rm -rf "$NVME_DIR"/*
    ./train_t5 bench --model t5-large --bf16 --batch 16 --deepspeed /tmp/ovd_z2_nvme.json > "$OUT/bench_t5_nvme.log" 2>&1
    echo "NVMe offload ($NVME_DIR): $(grep -E '^RESULT' "$OUT/bench_t5_nvme.log" | grep -oE 'samples_per_s=[0-9.]+|peak_gib=[0-9.]+|step_ms=[0-9.]+' | tr '\n' ' ')"
fi
rm -rf "$NVME_DIR"
if has_ds; then
    timeout 400 torchrun --standalone --nproc_per_node 1 bench/ds_baseline.py --model t5-large --precision bf16 \
        --batch 16 --deepspeed $CFG > "$OUT/bench_ds.log" 2>&1
    grep -E "^RESULT|Error|error" "$OUT/bench_ds.log" | tail -3
fi
"$PY" - "$OUT" <<'PY'
import re, sys
def res(path):
    try:
        for line in open(path):
            if line.startswith("RESULT"):
                return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    except OSError:
        pass
    return {}
t, d = res(sys.argv[1] + "/bench_t5.log"), res(sys.argv[1] + "/bench_ds.log")
print("| tool | samples/s | peak GiB | step ms |\n|---|---|---|---|")
for name, r in (("train_t5", t), ("DeepSpeed", d)):
    print(f"| {name} | {r.get('samples_per_s', '-')} | {r.get('peak_gib', '-')} | {r.get('step_ms', '-')} |")
if t.get("samples_per_s") and d.get("samples_per_s"):
    print(f"ratio {float(t['samples_per_s']) / float(d['samples_per_s']):.2f}x")
PY
if [ -n "${CPU_ADAM:-}" ]; then echo "== 3. CPU AdamW alone"; bash bench/cpu_adam.sh; fi
