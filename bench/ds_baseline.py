#!/usr/bin/env python3
"""HF transformers T5 + DeepSpeed ZeRO training throughput: the multi-GPU baseline train_t5 has to beat.

What HF Trainer --deepspeed does, on fixed synthetic shapes, one process per GPU:
  torchrun --standalone --nproc_per_node N bench/ds_baseline.py --model t5-large --precision bf16 \\
      --batch 16 --deepspeed configs/ds_config_zero2.json [--stage 0|1|2|3] [--gradient-checkpointing]

The DeepSpeed config is the SAME configs/*.json file that train_t5 reads; its "auto" values are
filled by transformers' own code, as HF Trainer fills them: TrainingArguments(per_device_train_batch_size=B,
gradient_accumulation_steps=1, learning_rate=1e-4, max_grad_norm=1.0, bf16/fp16, warmup_steps=--warmup,
max_steps=--warmup + --steps, deepspeed=<dict>) runs HfTrainerDeepSpeedConfig.trainer_config_process
(batch sizes, clipping, AdamW lr/betas/eps/weight decay, scheduler lr, fp16/bf16) and accelerate's
DeepSpeedPlugin (steps_per_print = inf); then, with the model built, trainer_config_finalize
(reduce_bucket_size = d_model^2; ZeRO-3: stage3_prefetch_bucket_size = int(0.9 d_model^2),
stage3_param_persistence_threshold = 10 d_model; the scheduler's warm-up and total steps).
Values that are not "auto" must match TrainingArguments or transformers refuses the config (as the
Trainer does). --stage replaces zero_optimization.stage in the loaded dict before all this.

Model: random init from a named T5 config, exactly as bench/hf_baseline.py builds it (T5 1.0, relu,
tied scaled head, dropout 0.1, model.train()). Stages 0-2: built on the GPU, then deepspeed.initialize.
ZeRO-3: built with T5ForConditionalGeneration._from_config, which is what AutoModelForSeq2SeqLM.from_config
does, so transformers wraps it in deepspeed.zero.Init (partitioned while it is built), as an HF Trainer
script gets it (--no-zero-init builds it whole on the GPU instead). Then
deepspeed.initialize(model=model, model_parameters=<trainable parameters>, config=<resolved dict>):
optimizer and scheduler come from the config (AdamW -> DeepSpeed's FusedAdam, JIT-compiled on first
use, cached in TORCH_EXTENSIONS_DIR).

Batch: bench/hf_baseline.py's synthetic_batch (src = tgt = --seq random ids, </s> last, no padding,
labels = target), the same on every rank. Timing: --warmup untimed steps, then --steps steps of
  loss = engine(input_ids=..., attention_mask=..., labels=...).loss; engine.backward(loss); engine.step()
between a barrier + torch.cuda.synchronize() + perf_counter and a synchronize + perf_counter; the
slowest rank's time counts. samples_per_s = world x batch x steps / time (all GPUs together).

Output (rank 0): INFO lines (versions, the resolved zero_optimization section, optimizer, seconds
from start to the end of the first step), then one line for scripts:
  RESULT impl=deepspeed mode=<plain|ckpt> model=<name> precision=<bf16|fp16|fp32> batch=<B per GPU>
         seq=<S> samples_per_s=<x> tokens_per_s=<x> tflops=<x> peak_gib=<max over ranks> status=<ok|oom>
         stage=<K> world=<N> peak_gib_ranks=<a,b,...> step_ms=<mean ms per step>
The keys up to status are those of bench/hf_baseline.py and `train_t5 bench`. peak_gib is
torch.cuda.max_memory_allocated() / 2^30 over the whole process (model build and DeepSpeed
initialisation included). An out-of-memory error is reported as status=oom by the rank that hit it
(peak_gib_ranks then has only its own figure); exit code 0 with one process, 17 with several, so
that torchrun stops the other ranks at once instead of leaving them in a collective until NCCL's
timeout.

--dry-run: resolve and print the config, build nothing (no model, no DeepSpeed engine); runs on
a CPU machine (use torchrun --nproc_per_node 2 for world size 2: TrainingArguments sets up the
process group, gloo on the CPU).
--wait-file PATH: after the imports, wait until PATH exists before touching the GPU (lets a
benchmark script import the next run while the current one runs); PATH containing "skip" ends
the run without measuring. --device cpu (with --tiny) runs the whole thing on the CPU, for checks.
"""
import argparse
import copy
import json
import math
import os
import socket
import sys
import tempfile
import time

T_START = time.perf_counter()

# DeepSpeed 0.19.8's JIT builder parses TORCH_CUDA_ARCH_LIST as numbers and fails on an
# arch-specific entry such as "9.0a" (ValueError: invalid literal for int(): '0a'), which the
# GPU machine's image sets; FusedAdam needs no arch-specific instructions, so the suffix goes.
_ARCH = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
if any(part.rstrip("+PTX").endswith("a") for part in _ARCH.replace(",", ";").replace(" ", ";").split(";") if part):
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(
        p[:-1] if p.endswith("a") else p for p in _ARCH.replace(",", ";").replace(" ", ";").split(";") if p)
    print(f"INFO TORCH_CUDA_ARCH_LIST={_ARCH!r} -> {os.environ['TORCH_CUDA_ARCH_LIST']!r} (DeepSpeed's JIT builder "
          "cannot parse arch-specific entries)", flush=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_baseline import GIB, PRESETS, flops_per_sample, is_oom, make_config, synthetic_batch  # noqa: E402

# zero_optimization keys DeepSpeed's pydantic config types as int: a float there that is not a
# whole number (0.9 * d * d) is rejected. transformers 5.17 already writes int(0.9 * d * d); this
# guard converts (and says so) only if some other version or a hand-written value does not.
ZERO_INT_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                 "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                 "stage3_max_reuse_distance", "sub_group_size")
OOM_EXIT_MULTI_RANK = 17


def say(*a):
    """Rank 0 prints (every rank before the process group exists is rank 0 of its own)."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(*a, flush=True)


def die(msg, hint=None):
    print(f"error: {msg}", file=sys.stderr, flush=True)
    if hint:
        print(f"HINT: {hint}", file=sys.stderr, flush=True)
    sys.exit(2)


def load_ds_config(path, stage):
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as e:
        die(f"--deepspeed {path}: {e.strerror}", "give the path of a DeepSpeed JSON config, e.g. configs/ds_config_zero2.json")
    except json.JSONDecodeError as e:
        die(f"--deepspeed {path}: not valid JSON: {e}", "the file must be plain JSON (as configs/*.json)")
    if not isinstance(cfg, dict):
        die(f"--deepspeed {path}: the top level must be a JSON object")
    if stage is not None:
        zero = cfg.setdefault("zero_optimization", {})
        if not isinstance(zero, dict):
            die(f"--deepspeed {path}: \"zero_optimization\" must be an object to override its stage")
        zero["stage"] = stage
    return cfg


def make_training_args(args, ds_dict, use_cpu, out_dir):
    """HF Trainer's arguments for this run; creating them fills the batch/optimizer/precision "auto"s."""
    from transformers import TrainingArguments
    return TrainingArguments(
        output_dir=out_dir,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        learning_rate=args.lr,
        max_grad_norm=1.0,
        bf16=args.precision == "bf16",
        fp16=args.precision == "fp16",
        warmup_steps=args.warmup,
        max_steps=args.warmup + args.steps,
        gradient_checkpointing=args.gradient_checkpointing,
        deepspeed=copy.deepcopy(ds_dict),
        report_to="none",
        save_strategy="no",
        use_cpu=use_cpu,
    )


def finalize_config(targs, model, num_training_steps):
    """trainer_config_finalize (hidden-size and scheduler "auto"s), the int guard; returns the dict."""
    hf = targs.hf_deepspeed_config
    try:
        hf.trainer_config_finalize(targs, model, num_training_steps)
    except ValueError as e:
        die(f"transformers refuses this DeepSpeed config with these arguments:\n{e}",
            "set the listed keys to \"auto\" (as configs/ds_config_zero2.json does) or pass matching "
            "--precision / --lr")
    cfg = hf.config
    zero = cfg.get("zero_optimization", {})
    for k in ZERO_INT_KEYS:
        v = zero.get(k)
        if isinstance(v, float) and math.isfinite(v) and not v.is_integer():
            zero[k] = int(v)
            say(f"INFO zero_optimization.{k}={v} is not a whole number; DeepSpeed wants an int: using {int(v)}")
    return cfg


class ConfigOnly:
    """What trainer_config_finalize reads of a model (model.config.hidden_size), for --dry-run."""
    def __init__(self, cfg):
        self.config = cfg


def build_model(args, cfg, device, zero3):
    from transformers import T5ForConditionalGeneration
    torch.manual_seed(args.seed)
    if zero3 and not args.no_zero_init:
        # AutoModelForSeq2SeqLM.from_config's path: under ZeRO-3 transformers builds it inside
        # deepspeed.zero.Init (each rank keeps its partition) and initialises the weights gathered.
        model = T5ForConditionalGeneration._from_config(cfg)
    else:
        with device:
            model = T5ForConditionalGeneration(cfg)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()  # what Trainer does for --gradient_checkpointing
    model.train()
    return model


def wait_for(path):
    t0 = time.perf_counter()
    while not os.path.exists(path):
        time.sleep(0.05)
    time.sleep(0.05)  # let the writer finish the line
    with open(path) as f:
        skip = "skip" in f.read()
    return time.perf_counter() - t0, skip


def result_line(args, stage, world, sps, status, peaks, step_ms):
    cfg = make_config(args.model)
    _, train = flops_per_sample(cfg, args.seq, args.seq)
    return (f"RESULT impl=deepspeed mode={'ckpt' if args.gradient_checkpointing else 'plain'} model={args.model} "
            f"precision={args.precision} batch={args.batch} seq={args.seq} samples_per_s={sps:.2f} "
            f"tokens_per_s={sps * 2 * args.seq:.0f} tflops={sps * train / 1e12:.2f} "
            f"peak_gib={max(peaks) if peaks else 0.0:.2f} status={status} stage={stage} world={world} "
            f"peak_gib_ranks={','.join(f'{p:.2f}' for p in peaks)} step_ms={step_ms:.1f}")


def peak_gib(device):
    return torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else 0.0


def run(args, ds_dict, device, use_cpu, state):
    """Resolve, build, initialise, measure. Returns (samples_per_s, peaks per rank, mean step ms)."""
    import deepspeed

    out_dir = tempfile.mkdtemp(prefix="ds_baseline.")
    targs = make_training_args(args, ds_dict, use_cpu, out_dir)  # sets up the process group
    # On the GPU, accelerate has already called this (PartialState for DeepSpeed); with use_cpu
    # (checks) it made a plain gloo group, which zero.Init must see as DeepSpeed's.
    deepspeed.init_distributed(dist_backend=dist.get_backend() if dist.is_initialized() else None,
                               auto_mpi_discovery=False)
    world, rank = targs.world_size, targs.process_index
    state["world"] = world
    hf = targs.hf_deepspeed_config
    state["stage"] = hf.config.get("zero_optimization", {}).get("stage", 0)
    zero3 = hf.is_zero3()
    cfg = make_config(args.model)

    t0 = time.perf_counter()
    model = build_model(args, cfg, device, zero3)
    resolved = finalize_config(targs, model, args.warmup + args.steps)
    say(f"INFO world={world} zero_optimization={json.dumps(resolved.get('zero_optimization', {}), sort_keys=True)}")
    say(f"INFO resolved train_batch_size={resolved.get('train_batch_size')} "
        f"micro_batch={resolved.get('train_micro_batch_size_per_gpu')} gradient_clipping={resolved.get('gradient_clipping')} "
        f"optimizer={json.dumps(resolved.get('optimizer'))} scheduler={json.dumps(resolved.get('scheduler'))} "
        f"bf16={json.dumps(resolved.get('bf16'))} fp16.enabled={resolved.get('fp16', {}).get('enabled')}")
    n_params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    build_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=resolved)
    init_s = time.perf_counter() - t0
    inner = getattr(optimizer, "optimizer", optimizer)
    say(f"INFO params={n_params} zero_init={int(zero3 and not args.no_zero_init)} model_build_s={build_s:.1f} "
        f"deepspeed_initialize_s={init_s:.1f} optimizer={type(optimizer).__name__}/{type(inner).__name__} "
        f"gradient_checkpointing={int(args.gradient_checkpointing)}")

    src, mask, tgt = synthetic_batch(args.batch, args.seq, args.seed, engine.device)

    def step():
        if args.simulate_oom_rank in (rank, -1):
            raise torch.OutOfMemoryError(f"simulated on rank {rank} (--simulate-oom-rank)")
        loss = engine(input_ids=src, attention_mask=mask, labels=tgt).loss
        engine.backward(loss)
        engine.step()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    first_loss = None
    for i in range(args.warmup):
        loss = step()
        if i == 0:
            sync()
            first_loss = loss.item()
            state["first_step_end_s"] = time.perf_counter() - T_START
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    elapsed = time.perf_counter() - t0
    if "first_step_end_s" not in state:
        state["first_step_end_s"] = time.perf_counter() - T_START
    last_loss = loss.item()

    gathered = [None] * world
    dist.all_gather_object(gathered, (peak_gib(device), elapsed))
    peaks = [g[0] for g in gathered]
    slowest = max(g[1] for g in gathered)
    say(f"INFO loss first={first_loss if first_loss is not None else float('nan'):.4f} last={last_loss:.4f} "
        f"time_s per rank={','.join(f'{g[1]:.3f}' for g in gathered)} skipped_steps={getattr(engine, 'skipped_steps', 'n/a')}")
    if args.grow_batch:
        grow_batch(args, engine, device, world)
    return world * args.batch * args.steps / slowest, peaks, slowest / args.steps * 1e3


def grow_batch(args, engine, device, world):
    """--grow-batch: the same engine on larger batches, ascending, 2 steps each, until one runs
    out of memory; the largest that ran is the largest this config fits (one process: DeepSpeed's
    start-up with an offloaded optimizer takes minutes, so it is not repeated per trial)."""
    best = args.batch
    for b in sorted(set(args.grow_batch)):
        if b <= args.batch:
            continue
        src, mask, tgt = synthetic_batch(b, args.seq, args.seed, engine.device)
        try:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            t = []
            for _ in range(2):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                loss = engine(input_ids=src, attention_mask=mask, labels=tgt).loss
                engine.backward(loss)
                engine.step()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - only OOM ends the search
            if not is_oom(e):
                raise
            say(f"INFO grow batch={b} status=oom ({type(e).__name__})")
            break
        best = b
        say(f"INFO grow batch={b} status=ok step_ms={t[-1] * 1e3:.1f} samples_per_s={world * b / t[-1]:.2f} "
            f"peak_gib={peak_gib(device):.2f} loss={loss.item():.4f}")
        del src, mask, tgt, loss
    cap = f"{args.max_gpu_memory:g}" if args.max_gpu_memory else "none"
    say(f"RESULT_MAX impl=deepspeed model={args.model} largest_batch={best} cap_gib={cap} "
        f"tried={','.join(str(b) for b in sorted(set(args.grow_batch)))}")


def dry_run(args, ds_dict, use_cpu):
    out_dir = tempfile.mkdtemp(prefix="ds_baseline.")
    targs = make_training_args(args, ds_dict, use_cpu, out_dir)
    resolved = finalize_config(targs, ConfigOnly(make_config(args.model)), args.warmup + args.steps)
    say(f"INFO dry run: world={targs.world_size} model={args.model} d_model={make_config(args.model).d_model} "
        f"precision={args.precision} batch={args.batch} file={args.deepspeed}"
        f"{'' if args.stage is None else f' stage overridden to {args.stage}'}")
    say(f"INFO zero_optimization={json.dumps(resolved.get('zero_optimization', {}), sort_keys=True)}")
    say(json.dumps(resolved, indent=2))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="t5-large", choices=[k for k in PRESETS if k != "tiny"])
    ap.add_argument("--tiny", action="store_true", help="a tiny T5 (d_model 64, 2+2 layers) for CPU checks")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"],
                    help="TrainingArguments bf16/fp16 (fills the config's \"auto\" enabled flags)")
    ap.add_argument("--batch", type=int, default=16, help="per GPU (per_device_train_batch_size)")
    ap.add_argument("--seq", type=int, default=128, help="source and target length")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before them (also the lr warm-up steps)")
    ap.add_argument("--lr", type=float, default=1e-4, help="TrainingArguments learning_rate")
    ap.add_argument("--deepspeed", required=True, metavar="FILE", help="DeepSpeed JSON config (configs/*.json)")
    ap.add_argument("--stage", type=int, choices=[0, 1, 2, 3], default=None,
                    help="replace zero_optimization.stage of the loaded config")
    ap.add_argument("--gradient-checkpointing", action="store_true", help="model.gradient_checkpointing_enable()")
    ap.add_argument("--no-zero-init", action="store_true",
                    help="ZeRO-3: build the whole model on each GPU instead of under deepspeed.zero.Init")
    ap.add_argument("--dry-run", action="store_true", help="resolve and print the config; build nothing")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: checks only (with --tiny)")
    ap.add_argument("--wait-file", default=None, metavar="PATH",
                    help="after the imports, wait for PATH to exist (\"skip\" in it: end without measuring)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-gpu-memory", type=float, default=0.0, metavar="GiB",
                    help="cap the caching allocator at GiB (torch.cuda.set_per_process_memory_fraction)")
    ap.add_argument("--grow-batch", type=lambda v: [int(x) for x in v.split(",") if x], default=None,
                    metavar="B1,B2,...", help="after the measurement, the same engine on these larger batches "
                    "(2 steps each, ascending) until one runs out of memory: RESULT_MAX largest_batch=...")
    ap.add_argument("--simulate-oom-rank", type=int, default=None, metavar="R",
                    help="testing only: raise OutOfMemoryError in the first step on rank R (-1: every rank)")
    args = ap.parse_args()
    if args.tiny:
        args.model = "tiny"
    if args.batch < 1 or args.seq < 2 or args.steps < 1 or args.warmup < 0:
        ap.error("--batch >= 1, --seq >= 2, --steps >= 1, --warmup >= 0")

    if "RANK" not in os.environ:  # plain `python3 bench/ds_baseline.py`: one process, as torchrun would set it
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed
    import transformers
    ds_dict = load_ds_config(args.deepspeed, args.stage)
    use_cpu = args.device == "cpu" or (args.dry_run and not torch.cuda.is_available())
    say(f"INFO torch={torch.__version__} transformers={transformers.__version__} deepspeed={deepspeed.__version__} "
        f"python={sys.version.split()[0]} imports_s={time.perf_counter() - T_START:.1f}")
    if args.dry_run:
        dry_run(args, ds_dict, use_cpu)
        return 0

    waited = 0.0
    if args.wait_file:
        waited, skip = wait_for(args.wait_file)
        say(f"INFO waited {waited:.1f}s for {args.wait_file}{' (skip)' if skip else ''}")
        if skip:
            return 0
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cpu:
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            die("--device cuda but torch.cuda.is_available() is False", "use --device cpu --tiny for a CPU check")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        if args.max_gpu_memory:
            total = torch.cuda.get_device_properties(device).total_memory
            if args.max_gpu_memory * GIB > total:
                ap.error(f"--max-gpu-memory {args.max_gpu_memory} GiB > the card's {total / GIB:.1f} GiB")
            torch.cuda.set_per_process_memory_fraction(args.max_gpu_memory * GIB / total, device)
        say(f"INFO device={torch.cuda.get_device_name(device)} cuda={torch.version.cuda} "
            f"TORCH_EXTENSIONS_DIR={os.environ.get('TORCH_EXTENSIONS_DIR', '(default)')} "
            f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE', '(unset)')}")

    # the CPU side's thread settings, as this process runs them (observed, not set: DeepSpeed
    # runs as a user runs it; DeepSpeedCPUAdam's OpenMP team takes OMP_NUM_THREADS, else every
    # core the process may use)
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    say(f"INFO threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')} "
        f"OMP_PROC_BIND={os.environ.get('OMP_PROC_BIND', '(unset)')} OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')} "
        f"torch.get_num_threads()={torch.get_num_threads()} cpu_count={os.cpu_count()} affinity_cpus={affinity}")
    state = {"world": int(os.environ.get("WORLD_SIZE", "1")), "stage": args.stage}
    try:
        sps, peaks, step_ms = run(args, ds_dict, device, use_cpu, state)
    except Exception as e:  # noqa: BLE001 - only OOM is reported as a result
        if not is_oom(e):
            raise
        rank = int(os.environ.get("RANK", "0"))
        print(f"INFO rank {rank}: out of memory ({type(e).__name__}: {str(e).splitlines()[0][:200]})", flush=True)
        print(result_line(args, state["stage"], state["world"], 0.0, "oom", [peak_gib(device)], 0.0), flush=True)
        sys.stdout.flush()
        if state["world"] > 1:
            os._exit(OOM_EXIT_MULTI_RANK)  # torchrun then stops the other ranks
        return 0
    say(f"INFO first_step_end_s={state['first_step_end_s']:.1f} (script start to the end of the first step)"
        + (f"; {state['first_step_end_s'] - waited:.1f} without the {waited:.1f} s waiting for --wait-file"
           if args.wait_file else ""))
    say(result_line(args, state["stage"], state["world"], sps, "ok", peaks, step_ms))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
