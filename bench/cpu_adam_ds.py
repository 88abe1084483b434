#!/usr/bin/env python3
"""bench/cpu_adam_ds.py: DeepSpeedCPUAdam (DeepSpeed's ZeRO-Offload optimizer) on this CPU,
the other side of bench/cpu_adam.c. Run by bench/cpu_adam.sh.

  --compare DIR   two AdamW steps on 1M random fp32 parameters (lr 1e-3, betas (0.9, 0.999),
                  eps 1e-8, weight decay 0.01, adamw_mode); writes the state before the second
                  step, its gradient, the step number and DeepSpeed's state after it as raw
                  float32 files for `build/bench/cpu_adam --compare DIR`.
  --time          best of --steps steps over --n fp32 parameters with --threads OpenMP threads
                  (set OMP_NUM_THREADS to the same number: DeepSpeed's op reads it); prints
                  RESULT impl=deepspeed ... params_per_s=... per_core=...
"""
import argparse
import os
import time

import torch
from deepspeed.ops.adam import DeepSpeedCPUAdam


def make(n, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(n, generator=g) * 0.5)
    p.grad = torch.randn(n, generator=g) * 0.05
    opt = DeepSpeedCPUAdam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, adamw_mode=True)
    return p, opt, g


def save(path, t):
    t.detach().contiguous().numpy().astype("float32").tofile(path)


def compare(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    p, opt, g = make(1 << 20, 1234)
    opt.step()  # step 1: the moments become non-zero
    p.grad = torch.randn(p.numel(), generator=g) * 0.05
    st = opt.state[p]
    save(f"{out_dir}/param_in.f32", p.data)
    save(f"{out_dir}/grad.f32", p.grad)
    save(f"{out_dir}/exp_avg_in.f32", st["exp_avg"])
    save(f"{out_dir}/exp_avg_sq_in.f32", st["exp_avg_sq"])
    opt.step()  # step 2, compared
    with open(f"{out_dir}/step.txt", "w") as f:
        f.write("2\n")
    save(f"{out_dir}/param_ds.f32", p.data)
    save(f"{out_dir}/exp_avg_ds.f32", st["exp_avg"])
    save(f"{out_dir}/exp_avg_sq_ds.f32", st["exp_avg_sq"])
    print(f"wrote DeepSpeedCPUAdam's step 2 on {p.numel()} parameters to {out_dir}")


def timing(n, steps, threads):
    torch.set_num_threads(threads)
    p, opt, _ = make(n, 7)
    best = float("inf")
    for s in range(steps + 1):  # the first step warms up (and allocates the state)
        t0 = time.perf_counter()
        opt.step()
        dt = time.perf_counter() - t0
        if s > 0:
            best = min(best, dt)
    pps = n / best
    print(f"RESULT impl=deepspeed isa=ds_cpu_adam mode=fp32 threads={threads} n={n} params_per_s={pps:.4g} "
          f"per_core={pps / threads:.4g} best_step_s={best:.4f}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--n", type=int, default=64 << 20)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.compare:
        compare(a.compare)
    if a.time:
        timing(a.n, a.steps, a.threads)
