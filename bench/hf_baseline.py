#!/usr/bin/env python3
"""HF transformers T5 training throughput: the baseline train_t5 has to beat.

Measures T5ForConditionalGeneration training steps (forward + backward + AdamW) the way the
"Measured anchors" in docs/DESIGN.md were taken: random init from a named config (nothing is
downloaded), src = tgt = --seq tokens of random ids in [2, 32000) with </s> (1) last and no
padding, torch.optim.AdamW(fused=True) lr 1e-4, dropout as the config default (0.1).

Precision, as HF Trainer does it (transformers 5.17 hands --bf16/--fp16 to accelerate, which
wraps model.forward in torch.autocast and keeps fp32 weights; fp16 adds torch.amp.GradScaler):
  --precision fp32 | bf16 | fp16   autocast over fp32 master weights (bf16, fp16) or plain fp32
  --pure-bf16                      model.to(bfloat16), no autocast, AdamW on bf16 weights
                                   (not what Trainer --bf16 does; for comparison only)

Output: INFO lines for people, and exactly one line per measurement for scripts:
  RESULT impl=hf mode=<eager|compile> model=<name> precision=<fp32|bf16|fp16|bf16-pure>
         batch=<B> seq=<S> samples_per_s=<x> tokens_per_s=<x> tflops=<x> peak_gib=<x>
         status=<ok|oom> gc=<0|1> cap_gib=<x|none> [search=max_batch first_oom_batch=<B|none>]
tokens_per_s counts source + target tokens (samples_per_s x 2 x seq). tflops is model FLOP/s
(formula in flops_per_sample below, the one in DESIGN.md). peak_gib is
torch.cuda.max_memory_allocated() / 2^30 over the whole run (0 on the CPU). An out-of-memory
error is reported as status=oom with exit code 0.

Examples (GPU machine):
  python3 bench/hf_baseline.py --model t5-large --precision bf16 --batch 64
  python3 bench/hf_baseline.py --model t5-large --precision bf16 --batch 64 --compile
  python3 bench/hf_baseline.py --model t5-large --precision fp16 --max-gpu-memory 24 \
      --find-max-batch [--gradient-checkpointing]
CPU check of the logic:
  python3 bench/hf_baseline.py --tiny --device cpu --batch 2 --steps 2 --warmup 1
"""
import argparse
import gc
import math
import os
import sys
import time

T_START = time.perf_counter()

import torch  # noqa: E402
from transformers import T5Config, T5ForConditionalGeneration  # noqa: E402

# d_model, d_kv, d_ff, layers (encoder = decoder), heads; all T5 1.0: relu FFN, tied scaled head.
PRESETS = {
    "tiny": dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
    "t5-small": dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
    "t5-base": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12),
    "t5-large": dict(d_model=1024, d_kv=64, d_ff=4096, num_layers=24, num_heads=16),
    "t5-3b": dict(d_model=1024, d_kv=128, d_ff=16384, num_layers=24, num_heads=32),
    "t5-11b": dict(d_model=1024, d_kv=128, d_ff=65536, num_layers=24, num_heads=128),
}
VOCAB = 32128
GIB = float(1 << 30)


def make_config(name):
    p = PRESETS[name]
    return T5Config(
        vocab_size=VOCAB,
        d_model=p["d_model"],
        d_kv=p["d_kv"],
        d_ff=p["d_ff"],
        num_layers=p["num_layers"],
        num_decoder_layers=p["num_layers"],
        num_heads=p["num_heads"],
        feed_forward_proj="relu",
        tie_word_embeddings=True,
        dropout_rate=0.1,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )


def flops_per_sample(cfg, src_len, tgt_len):
    """Model FLOPs of one training sample (DESIGN.md): train = 3 x forward,
    forward = 2 x (enc matmul params x S + (dec matmul params + LM-head embedding) x T)
              + attention score/value matmuls: 4 S^2 H d_kv per encoder layer,
                4 (T^2 + T S) H d_kv per decoder layer.
    Returns (forward, train)."""
    d, inner = cfg.d_model, cfg.num_heads * cfg.d_kv
    ffn_mats = 3 if cfg.is_gated_act else 2
    ffn = ffn_mats * d * cfg.d_ff
    attn = 4 * d * inner  # q, k, v, o
    enc_params = cfg.num_layers * (attn + ffn)
    dec_params = cfg.num_decoder_layers * (2 * attn + ffn)  # self + cross attention
    head = cfg.vocab_size * d
    linear = 2 * (enc_params * src_len + (dec_params + head) * tgt_len)
    attn_mm = (cfg.num_layers * 4 * src_len * src_len * inner
               + cfg.num_decoder_layers * 4 * (tgt_len * tgt_len + tgt_len * src_len) * inner)
    fwd = linear + attn_mm
    return fwd, 3 * fwd


def synthetic_batch(B, seq, seed, device):
    """The benchmark batch (also bench/ds_baseline.py's): src = tgt = seq random ids in [2, 32000)
    with </s> (1) last, no padding, mask all ones. Returns (input_ids, attention_mask, labels)."""
    g = torch.Generator(device="cpu").manual_seed(seed + B)
    src = torch.randint(2, 32000, (B, seq), generator=g)
    tgt = torch.randint(2, 32000, (B, seq), generator=g)
    src[:, -1] = 1
    tgt[:, -1] = 1
    return src.to(device), torch.ones_like(src).to(device), tgt.to(device)


def is_oom(exc):
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    # torch.compile / cuBLAS can surface an allocation failure as another RuntimeError.
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in msg or "cublas_status_alloc_failed" in msg)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_memory(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class Bench:
    def __init__(self, args, device):
        self.args = args
        self.device = device
        self.cfg = make_config(args.model)
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        init_dev = torch.device("cpu") if args.init_on_cpu else device
        with init_dev:
            model = T5ForConditionalGeneration(self.cfg)
        model.to(device)
        if args.pure_bf16:
            model.to(torch.bfloat16)
        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        self.model = model
        self.fwd = torch.compile(model) if args.compile else model
        sync(device)
        self.init_s = time.perf_counter() - t0
        self.n_params = sum(p.numel() for p in model.parameters())
        if args.precision == "fp16":
            self.amp_dtype = torch.float16
        elif args.precision == "bf16" and not args.pure_bf16:
            self.amp_dtype = torch.bfloat16
        else:
            self.amp_dtype = None
        self.first_step_s = None  # script start to end of the first step, like the anchor

    def batch(self, B):
        return synthetic_batch(B, self.args.seq, self.args.seed, self.device)

    def run(self, B, warmup, steps):
        """Returns (per-step seconds of the timed steps). Raises on OOM."""
        dev = self.device
        opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=(dev.type == "cuda"))
        scaler = torch.amp.GradScaler(dev.type) if self.args.precision == "fp16" else None
        if self.args.simulate_oom_above is not None and B > self.args.simulate_oom_above:
            raise torch.OutOfMemoryError(f"simulated: batch {B} > {self.args.simulate_oom_above}")
        src, mask, tgt = self.batch(B)
        times = []
        loss = None
        try:
            for i in range(warmup + steps):
                sync(dev)
                t0 = time.perf_counter()
                with torch.autocast(dev.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
                    loss = self.fwd(input_ids=src, attention_mask=mask, labels=tgt).loss
                if scaler is not None:
                    scaler.scale(loss).backward()
                    if self.args.max_grad_norm > 0:
                        scaler.unscale_(opt)
                        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
                    scaler.step(opt)
                    scaler.update()
                else:
                    loss.backward()
                    if self.args.max_grad_norm > 0:
                        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
                    opt.step()
                opt.zero_grad(set_to_none=True)
                loss = None
                sync(dev)
                dt = time.perf_counter() - t0
                if self.first_step_s is None:
                    self.first_step_s = time.perf_counter() - T_START
                if i >= warmup:
                    times.append(dt)
            if len(opt.state) == 0 and warmup + steps > 0:
                print("INFO warning: optimizer state was never allocated (every step skipped?); "
                      "peak memory may be low", flush=True)
        finally:
            # Drop everything this attempt allocated, also after an OOM, before the next one.
            self.model.zero_grad(set_to_none=True)
            opt.state.clear()
            del opt, scaler, src, mask, tgt, loss
        return times


def result_line(args, bench, B, samples_per_s, status, extra=""):
    fwd, train = flops_per_sample(bench.cfg, args.seq, args.seq)
    peak = torch.cuda.max_memory_allocated(bench.device) / GIB if bench.device.type == "cuda" else 0.0
    prec = "bf16-pure" if args.pure_bf16 else args.precision
    cap = f"{args.max_gpu_memory:g}" if args.max_gpu_memory else "none"
    return (f"RESULT impl=hf mode={'compile' if args.compile else 'eager'} model={args.model} "
            f"precision={prec} batch={B} seq={args.seq} samples_per_s={samples_per_s:.2f} "
            f"tokens_per_s={samples_per_s * 2 * args.seq:.0f} tflops={samples_per_s * train / 1e12:.2f} "
            f"peak_gib={peak:.2f} status={status} gc={int(args.gradient_checkpointing)} cap_gib={cap}{extra}")


def measure(args, bench, B, warmup, steps):
    """One full measurement: (samples_per_s, status, median step ms)."""
    if bench.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(bench.device)  # peak of this measurement (weights included)
    oom = False
    times = []
    try:
        times = bench.run(B, warmup, steps)
    except Exception as e:  # noqa: BLE001 - only OOM is swallowed
        if not is_oom(e):
            raise
        oom = True
        print(f"INFO B={B}: out of memory ({type(e).__name__})", flush=True)
    free_memory(bench.device)
    if oom or not times:
        return 0.0, "oom", 0.0
    med = sorted(times)[len(times) // 2] * 1e3
    return B * len(times) / sum(times), "ok", med


def fits(args, bench, B):
    """A short trial: first step allocates the optimizer state, the next ones reach steady state."""
    sps, status, _ = measure(args, bench, B, 0, args.trial_steps)
    peak = torch.cuda.max_memory_allocated(bench.device) / GIB if bench.device.type == "cuda" else 0.0
    print(f"INFO trial B={B}: {status} peak_gib={peak:.2f} ({sps:.1f} samples/s over "
          f"{args.trial_steps} steps, first included)", flush=True)
    return status == "ok"


def find_max_batch(args, bench):
    """Largest batch (a multiple of 8, or below 8 when 8 does not fit) that runs under the cap:
    double from --batch until a failure, then bisect; returns (largest_ok or 0, first_oom or None)."""
    b = max(1, args.batch)
    lo, hi = 0, None
    while True:
        if fits(args, bench, b):
            lo = b
            if b >= args.max_batch:
                break
            b = min(b * 2, args.max_batch)
        else:
            hi = b
            break
    if lo == 0:  # the start batch failed: halve down to 1
        b = hi
        while b > 1:
            b //= 2
            if fits(args, bench, b):
                lo = b
                break
            hi = b
        if lo == 0:
            return 0, hi
    step = 8 if lo >= 8 else 1
    while hi is not None and hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        if fits(args, bench, mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="t5-large", choices=[k for k in PRESETS if k != "tiny"])
    ap.add_argument("--tiny", action="store_true", help="a tiny T5 (d_model 64, 2+2 layers) for CPU checks")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--pure-bf16", action="store_true",
                    help="model.to(bfloat16) without autocast (implies --precision bf16)")
    ap.add_argument("--batch", type=int, default=16, help="batch size (start of the search with --find-max-batch)")
    ap.add_argument("--seq", type=int, default=128, help="source and target length")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model)")
    ap.add_argument("--gradient-checkpointing", action="store_true", help="model.gradient_checkpointing_enable()")
    ap.add_argument("--max-gpu-memory", type=float, default=0.0, metavar="GiB",
                    help="cap the caching allocator at GiB (torch.cuda.set_per_process_memory_fraction)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--find-max-batch", action="store_true",
                    help="double then bisect the batch (multiples of 8) under the memory cap; "
                         "report the largest that fits, measured with --warmup/--steps")
    ap.add_argument("--max-batch", type=int, default=2048, help="upper bound of the search")
    ap.add_argument("--trial-steps", type=int, default=3, help="steps per trial of the search")
    ap.add_argument("--max-grad-norm", type=float, default=0.0,
                    help="clip_grad_norm_ like HF Trainer (its default is 1.0); 0 = off, as the anchors")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (torch default: off)")
    ap.add_argument("--init-on-cpu", action="store_true",
                    help="build the model on the CPU then move it (slow start, like from_pretrained)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--simulate-oom-above", type=int, default=None, metavar="B",
                    help="testing only: raise OutOfMemoryError for batches above B (checks the search on the CPU)")
    args = ap.parse_args()
    if args.tiny:
        args.model = "tiny"
    if args.pure_bf16:
        args.precision = "bf16"
    if args.batch < 1 or args.seq < 2 or args.steps < 1 or args.warmup < 0:
        ap.error("--batch >= 1, --seq >= 2, --steps >= 1, --warmup >= 0")

    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda but torch.cuda.is_available() is False (use --device cpu)")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())  # the memory APIs want an index
        torch.cuda.set_device(device)
        if args.max_gpu_memory:
            total = torch.cuda.get_device_properties(device).total_memory
            frac = args.max_gpu_memory * GIB / total
            if frac > 1:
                ap.error(f"--max-gpu-memory {args.max_gpu_memory} GiB > the card's {total / GIB:.1f} GiB")
            torch.cuda.set_per_process_memory_fraction(frac, device)
        torch.cuda.reset_peak_memory_stats(device)
    elif args.max_gpu_memory:
        print("INFO --max-gpu-memory ignored on the CPU", flush=True)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    cfg = make_config(args.model)
    fwd, train = flops_per_sample(cfg, args.seq, args.seq)
    print(f"INFO flops_per_sample model={args.model} seq={args.seq} forward={fwd:.4e} train={train:.4e}",
          flush=True)
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"INFO torch={torch.__version__} transformers={__import__('transformers').__version__} "
          f"device={dev_name}", flush=True)

    try:
        bench = Bench(args, device)
    except Exception as e:  # noqa: BLE001
        if not is_oom(e):
            raise
        # Model (weights) alone does not fit: report it like any other OOM.
        print(f"INFO model does not fit: {type(e).__name__}", flush=True)
        bench = None
    if bench is None:
        class _B:  # enough for result_line
            pass
        bench = _B()
        bench.cfg, bench.device = cfg, device
        extra = " search=max_batch first_oom_batch=1" if args.find_max_batch else ""
        print(result_line(args, bench, 0 if args.find_max_batch else args.batch, 0.0, "oom", extra), flush=True)
        return 0
    print(f"INFO params={bench.n_params} init_s={bench.init_s:.1f} precision={args.precision}"
          f"{' pure-bf16' if args.pure_bf16 else ' autocast' if bench.amp_dtype else ''} "
          f"compile={int(args.compile)} gc={int(args.gradient_checkpointing)}", flush=True)

    extra = ""
    B = args.batch
    if args.find_max_batch:
        if args.compile:
            print("INFO note: every new batch size recompiles under torch.compile", flush=True)
        lo, hi = find_max_batch(args, bench)
        # The measurement can still fail where a short trial passed (fragmentation): step down.
        while lo > 0:
            sps, status, med = measure(args, bench, lo, args.warmup, args.steps)
            if status == "ok":
                break
            hi, lo = lo, (lo - 8 if lo > 8 else lo - 1)
        B = lo
        extra = f" search=max_batch first_oom_batch={hi if hi is not None else 'none'}"
        if B == 0:
            sps, status, med = 0.0, "oom", 0.0
    else:
        sps, status, med = measure(args, bench, B, args.warmup, args.steps)
    if status == "ok":
        print(f"INFO median_step_ms={med:.1f} first_step_end_s={bench.first_step_s:.1f} "
              f"(script start to the end of the first step)", flush=True)
    print(result_line(args, bench, B, sps, status, extra), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
