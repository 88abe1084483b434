#!/usr/bin/env bash
# bench/offload_vs_ds.sh: ZeRO-2 + CPU optimizer offload against DeepSpeed's, in one GPU call
# (issue 17, acceptance 3; issue 38, acceptance 3), plus the offloaded step's correctness on the GPU:
#   1. fixed shapes (random 128/128, t5-large bf16, B=16, 5 warm-up + 20 timed steps), both
#      tools reading configs/ds_config_zero2_offload.json: `train_t5 bench --deepspeed` and
#      bench/ds_baseline.py (HF T5 + deepspeed.initialize, DeepSpeedCPUAdam JIT-built), OVD_REPS
#      times (default 1), the two alternating which goes first; each figure, train_t5's phase
#      lines ("offload phases", zero/phases.h), the thread settings of both sides and the host's
#      state before each run (load, dirty pages, busiest processes), then min / median / max of
#      each side and of the ratio;
#   2. train_t5 t5-large bf16 stage 2, 20 steps of 16 x 128/128 (data/sample) with the GPU AdamW,
#      with configs/ds_config_zero2_offload.json, and with the optimizer state on NVMe (the same
#      config, "device": "nvme", nvme_path $NVME_DIR, default /tmp/t5_nvme: issue 17, acceptance 6):
#      the losses step by step, and each run's samples/s; then `train_t5 bench` with NVMe;
#   3. bench/cpu_adam.sh (the CPU AdamW alone against DeepSpeedCPUAdam) when CPU_ADAM is set.
#   usage (GPU machine, repo root; DeepSpeed from .whl/): OUT=dir [OVD_REPS=3] bash bench/offload_vs_ds.sh
#   OVD_SKIP_CHECK=1 leaves out part 2's training runs, OVD_SKIP_NVME=1 its NVMe runs (9 s a step on
#   the H200 machine's disk).
# The timed part runs first (issue 38): the NVMe runs write ~9 GB of optimizer state a step,
# and a measurement right after them shared the host with that write-back; every measurement
# starts after `sync`. DeepSpeed runs as a user runs it (its config untouched, no thread settings
# given); the script only reports the settings each side ran with.
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
REPS=${OVD_REPS:-1}
case $REPS in ''|*[!0-9]*|0) echo "OVD_REPS=$REPS: expected a positive number of repetitions"; exit 2;; esac
# host_state: flush dirty pages, then one line of what else the host is doing
host_state() {
    sync
    echo "  host before $1: load $(cut -d' ' -f1-3 /proc/loadavg), $(awk '/^(Dirty|Writeback):/{printf "%s %d MiB, ", $1, $2/1024}' /proc/meminfo)$(free -g | awk '/Mem/{print $7}') GiB available; busiest (CPU % over each one's life): $(ps -eo pcpu=,comm= --sort=-pcpu | awk '$2 != "ps" && n < 3 {printf "%s %s; ", $2, $1; n++}')"
}
echo "== host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), nproc $(nproc) of $(getconf _NPROCESSORS_ONLN) online, $(lscpu 2>/dev/null | awk -F: '/^(Socket\(s\)|NUMA node\(s\)|Thread\(s\) per core)/{gsub(/^ +/, "", $2); printf "%s %s, ", $1, $2}')THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?'); environment: OMP_NUM_THREADS=${OMP_NUM_THREADS:-(unset)} OMP_PROC_BIND=${OMP_PROC_BIND:-(unset)} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)}"
echo "== 1. fixed shapes: t5-large bf16 ZeRO-2 + CPU offload, B=16, 128/128, $REPS repetition(s)"
run_t5() {  # REP
    host_state "train_t5 #$1"
    ./train_t5 bench --model t5-large --bf16 --batch 16 --deepspeed $CFG > "$OUT/bench_t5_$1.log" 2>&1
    grep -E "^RESULT|^start-up|^offload phases|^error" "$OUT/bench_t5_$1.log" | sed "s/^/  train_t5 #$1: /"
}
run_ds() {  # REP
    has_ds || return 0
    host_state "DeepSpeed #$1"
    timeout 400 torchrun --standalone --nproc_per_node 1 bench/ds_baseline.py --model t5-large --precision bf16 \
        --batch 16 --deepspeed $CFG > "$OUT/bench_ds_$1.log" 2>&1
    grep -E "^RESULT|^INFO threads|^INFO first_step|Error|error" "$OUT/bench_ds_$1.log" | tail -4 | sed "s/^/  DeepSpeed #$1: /"
}
for r in $(seq 1 "$REPS"); do  # alternating which goes first: neither always runs on a fresh host
    if [ $((r % 2)) = 1 ]; then run_t5 "$r"; run_ds "$r"; else run_ds "$r"; run_t5 "$r"; fi
done
"$PY" - "$OUT" "$REPS" <<'PY'
import statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def res(path, tag="RESULT"):
    try:
        for line in open(path):
            if line.startswith(tag + " "):
                return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    except OSError:
        pass
    return {}
rows = []
print("| # | train_t5 samples/s | peak GiB | step ms | CPU AdamW ms (threads) | update waited for by forward ms | "
      "DeepSpeed samples/s | peak GiB | step ms | ratio |\n|---|---|---|---|---|---|---|---|---|---|")
for r in range(1, reps + 1):
    t, d, p = res(f"{out}/bench_t5_{r}.log"), res(f"{out}/bench_ds_{r}.log"), res(f"{out}/bench_t5_{r}.log", "PHASES")
    ratio = float(t["samples_per_s"]) / float(d["samples_per_s"]) if t.get("samples_per_s") and d.get("samples_per_s") else None
    rows.append((float(t["samples_per_s"]) if t.get("samples_per_s") else None,
                 float(d["samples_per_s"]) if d.get("samples_per_s") else None, ratio))
    print(f"| {r} | {t.get('samples_per_s', '-')} | {t.get('peak_gib', '-')} | {t.get('step_ms', '-')} | "
          f"{p.get('adam_ms', '-')} ({p.get('omp_threads', '-')}) | {p.get('fwd_wait_ms', '-')} | "
          f"{d.get('samples_per_s', '-')} | {d.get('peak_gib', '-')} | {d.get('step_ms', '-')} | "
          f"{f'{ratio:.2f}x' if ratio else '-'} |")
for name, k in (("train_t5 samples/s", 0), ("DeepSpeed samples/s", 1), ("ratio", 2)):
    v = [row[k] for row in rows if row[k] is not None]
    if v:
        print(f"{name}: min {min(v):.2f} median {statistics.median(v):.2f} max {max(v):.2f} over {len(v)} run(s)")
PY

if [ "${OVD_SKIP_CHECK:-0}" != 1 ]; then
echo "== 2. offloaded AdamW (host memory, NVMe) against the GPU's, t5-large bf16 stage 2, 20 steps"
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

if [ "${OVD_SKIP_NVME:-0}" != 1 ]; then
    rm -rf "$NVME_DIR"/*
    ./train_t5 bench --model t5-large --bf16 --batch 16 --deepspeed /tmp/ovd_z2_nvme.json > "$OUT/bench_t5_nvme.log" 2>&1
    echo "NVMe offload ($NVME_DIR): $(grep -E '^RESULT' "$OUT/bench_t5_nvme.log" | grep -oE 'samples_per_s=[0-9.]+|peak_gib=[0-9.]+|step_ms=[0-9.]+' | tr '\n' ' ')"
    grep -E "^offload phases" "$OUT/bench_t5_nvme.log"
fi
rm -rf "$NVME_DIR"
if [ -n "${CPU_ADAM:-}" ]; then echo "== 3. CPU AdamW alone"; bash bench/cpu_adam.sh; fi
