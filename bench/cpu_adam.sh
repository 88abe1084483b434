#!/usr/bin/env bash
# bench/cpu_adam.sh: ZeRO-Offload's CPU AdamW against DeepSpeedCPUAdam on the same machine,
# in one call (issue 17): the same step on the same inputs (worst relative difference), then
# parameters/s with 1 thread (per core) and with every core. DeepSpeed comes from the wheels
# (docs/BENCH.md, "ds_baseline.py"); its op JIT-builds on first use (~30-60 s).
#   usage (repo root, GPU machine or any x86 host with torch):
#     CPU_ADAM=build/bench/cpu_adam bash bench/cpu_adam.sh
# Environment: CPU_ADAM [build/bench/cpu_adam], PYTHON [python3], BENCH_WHEELS [.whl],
#   ADAM_N [67108864] parameters timed, ADAM_THREADS ["1 $(nproc)"].
set -u
BIN=${CPU_ADAM:-build/bench/cpu_adam}
PY=${PYTHON:-python3}
WHEELS=${BENCH_WHEELS:-.whl}
N=${ADAM_N:-67108864}
THREADS=${ADAM_THREADS:-"1 $(nproc)"}
OUTDIR=${OUT:-/tmp}/cpu_adam
mkdir -p "$OUTDIR"
. bench/ds_env.sh
ds_env_setup "$OUTDIR"
echo "== CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
echo "== same inputs: DeepSpeedCPUAdam's step 2 against ours"
"$PY" bench/cpu_adam_ds.py --compare "$OUTDIR/cmp" 2>&1 | tail -2
"$BIN" --compare "$OUTDIR/cmp"
echo "== parameters/s ($N parameters, best of 5 steps)"
for t in $THREADS; do
    OMP_NUM_THREADS=$t "$PY" bench/cpu_adam_ds.py --time --n "$N" --threads "$t" 2>&1 | grep RESULT
done
"$BIN" --n "$N" --threads "$THREADS"
