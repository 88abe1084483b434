# bench/ds_env.sh: sourced by the benchmarks that run DeepSpeed beside train_t5 (cpu_adam.sh,
# offload_vs_ds.sh, offload_3b.sh): makes DeepSpeed importable from the wheels the device call
# carries, and builds its CPU Adam op before anything is timed. Needs PY (python) and WHEELS
# (the wheel folder) set; ds_env_setup LOGDIR installs into /tmp/site when needed.

# From /tmp: the repository's own deepspeed/ folder (C sources) would pass for a package here.
has_ds() { (cd /tmp && "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('deepspeed.ops') is None)") 2>/dev/null; }

ds_env_setup() {  # LOGDIR
    if ! has_ds && [ -d /tmp/site/deepspeed ]; then  # installed by an earlier call on this machine
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    elif ! has_ds && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        echo "== installing $(ls "$WHEELS"/*.whl | xargs -n1 basename | tr '\n' ' ')into /tmp/site"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl >"$1/pip.log" 2>&1 \
            || { echo "pip install failed (exit $?):"; tail -5 "$1/pip.log"; }
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    has_ds || echo "NOTE: deepspeed cannot be imported (PYTHONPATH=${PYTHONPATH:-}); its rows will be missing"
}

# DeepSpeedCPUAdam's JIT build, alone: it compiles on every core, and a CPU optimizer measured
# beside it runs several times slower (seen: train_t5 5.7 samples/s during the build, 61.7 after).
ds_build_cpu_adam() {  # LOGDIR
    has_ds || return 0
    mkdir -p "$TORCH_EXTENSIONS_DIR"; find "$TORCH_EXTENSIONS_DIR" -name lock -type f -delete
    (cd /tmp && timeout 300 "$PY" -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()") \
        >"$1/jit.log" 2>&1 || { echo "DeepSpeedCPUAdam's JIT build failed:"; tail -3 "$1/jit.log"; }
}
