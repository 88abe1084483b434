#!/usr/bin/env python3
"""The tables of bench/zero_scaling.sh, from its scaling.log (standard library only).

scaling.log has, for every planned run, one line written by the script
  # job impl=<train_t5|deepspeed> mode=<plain|ckpt> stage=K world=N batch=B outcome=<result|failed|notrun> [rc=N] [reason=...]
followed, when the run printed one, by its RESULT line (bench/ds_baseline.py, `train_t5 bench`). The
job line is the key (so a RESULT line that names another stage or world is flagged, not misfiled).

Table 1: per stage, batch per GPU, implementation: samples/s on 1 and 2 GPUs (all GPUs together),
scaling efficiency = 2-GPU / (2 x 1-GPU), peak GiB per GPU (max over ranks), train_t5's
comm_ms_per_step and the exposed communication = 2-GPU step time - 1-GPU step time (ms; step times
from step_ms, else world x batch / samples_per_s).
Table 2: the acceptance ratios, each with PASS / FAIL (n/a when a side did not run).

  python3 bench/zero_scaling_table.py scaling.log [--note TEXT ...]
"""
import argparse
import re
import sys

KEY_FIELDS = ("impl", "mode", "stage", "world", "batch")
IMPL_NAMES = {"train_t5": "train_t5", "deepspeed": "HF + DeepSpeed"}
# acceptance targets
SCALING_TARGET = {64: 1.95, 16: 1.85}
SPEED_TARGET = {2: 3.0, 3: 10.0}
PEAK_TARGET = 0.5


def parse_kv(text):
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", text))


class Cell:
    """One planned run: its outcome and, if it printed one, its RESULT fields."""

    def __init__(self, job):
        self.job = job
        self.result = None
        self.warnings = []

    @property
    def ok(self):
        return self.result is not None and self.result.get("status") == "ok"

    def text(self):
        """What a table cell shows when there is no number."""
        if self.result is not None:
            return self.result.get("status", "?")  # oom (or another non-ok status)
        out = self.job.get("outcome")
        if out == "notrun":
            return f"not run ({self.job.get('reason', '?').replace('_', ' ')})"
        if out == "failed":
            return f"failed (rc {self.job.get('rc', '?')})"
        return "no RESULT"

    def num(self, key):
        if not self.ok:
            return None
        try:
            return float(self.result[key])
        except (KeyError, ValueError):
            return None

    def step_ms(self):
        v = self.num("step_ms")
        if v is not None and v > 0:
            return v
        sps = self.num("samples_per_s")
        if sps:
            return int(self.job["world"]) * int(self.job["batch"]) * 1e3 / sps
        return None


def read_log(lines):
    cells = {}
    last = None
    for raw in lines:
        line = raw.strip()
        if line.startswith("# job "):
            job = parse_kv(line[len("# job "):])
            if not all(k in job for k in KEY_FIELDS):
                print(f"warning: job line without {KEY_FIELDS}: {line}", file=sys.stderr)
                last = None
                continue
            key = tuple(job[k] for k in KEY_FIELDS)
            last = cells[key] = Cell(job)
        elif line.startswith("RESULT "):
            res = parse_kv(line[len("RESULT "):])
            if last is None:
                print(f"warning: RESULT line without a job line before it: {line}", file=sys.stderr)
                continue
            for k in ("impl", "mode", "stage", "world", "batch"):
                if k in res and res[k] != last.job[k]:
                    last.warnings.append(f"RESULT says {k}={res[k]}, the job was {k}={last.job[k]}")
            last.result = res
            last = None  # one RESULT line per job line
    return cells


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def table1(cells, stages, batches, impls, modes):
    out = ["| ZeRO stage | per GPU | implementation | 1 GPU samples/s | 2 GPUs samples/s | scaling efficiency "
           "| 1 GPU peak GiB | 2 GPUs peak GiB (max over ranks) | 2 GPUs comm ms/step | exposed comm ms/step |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for s in stages:
        for b in batches:
            for impl in impls:
                for mode in modes:
                    if mode == "ckpt" and impl != "train_t5":
                        continue
                    c1 = cells.get((impl, mode, s, "1", b))
                    c2 = cells.get((impl, mode, s, "2", b))
                    if c1 is None and c2 is None:
                        continue
                    def val(c, key, d=1):
                        if c is None:
                            return "not planned"
                        return fmt(c.num(key), d) if c.ok else c.text()
                    s1 = c1.num("samples_per_s") if c1 else None
                    s2 = c2.num("samples_per_s") if c2 else None
                    eff = f"{s2 / (2 * s1):.3f}" if s1 and s2 else "-"
                    if impl == "train_t5" and c2 is not None and c2.ok:
                        comm = c2.num("comm_ms_per_step")
                        comm = "not measured" if comm is not None and comm < 0 else fmt(comm, 2)
                    else:
                        comm = "-"
                    t1 = c1.step_ms() if c1 else None
                    t2 = c2.step_ms() if c2 else None
                    exposed = fmt(t2 - t1, 1) if t1 is not None and t2 is not None else "-"
                    name = IMPL_NAMES.get(impl, impl) + (" + grad ckpt" if mode == "ckpt" else "")
                    out.append(f"| {s} | {b} | {name} | {val(c1, 'samples_per_s')} | {val(c2, 'samples_per_s')} | {eff} "
                               f"| {val(c1, 'peak_gib', 2)} | {val(c2, 'peak_gib', 2)} | {comm} | {exposed} |")
    return out


def verdict(value, target, higher_is_better):
    if value is None:
        return "n/a"
    return "PASS" if (value >= target if higher_is_better else value <= target) else "FAIL"


def table2(cells, stages, batches, impls):
    rows = []

    def side(c):
        if c is None:
            return None, "not planned"
        return (c, None) if c.ok else (None, c.text())

    def add(check, s, b, w, num_cell, den_cell, key, target, higher):
        a, why_a = side(num_cell)
        d, why_d = side(den_cell)
        if a is not None and d is not None and d.num(key):
            v = a.num(key) / d.num(key)
            rows.append((check, s, b, w, f"{v:.2f}", f"{'>=' if higher else '<='} {target:g}", verdict(v, target, higher)))
        else:
            why = "; ".join(x for x in (why_a and f"numerator {why_a}", why_d and f"denominator {why_d}") if x)
            rows.append((check, s, b, w, "-", f"{'>=' if higher else '<='} {target:g}", f"n/a ({why or 'zero'})"))

    tt = "train_t5" in impls
    ds = "deepspeed" in impls
    if tt:
        for s in stages:
            for b in batches:
                target = SCALING_TARGET.get(int(b), 1.85)
                add("train_t5 samples/s, 2 GPUs / 1 GPU", s, b, "2 vs 1",
                    cells.get(("train_t5", "plain", s, "2", b)), cells.get(("train_t5", "plain", s, "1", b)),
                    "samples_per_s", target, True)
    if tt and ds:
        for s in stages:
            if int(s) not in SPEED_TARGET:
                continue
            for w in ("2", "1"):
                for b in batches:
                    add(f"train_t5 / DeepSpeed samples/s, stage {s}", s, b, w,
                        cells.get(("train_t5", "plain", s, w, b)), cells.get(("deepspeed", "plain", s, w, b)),
                        "samples_per_s", SPEED_TARGET[int(s)], True)
        for s in stages:
            for w in ("2", "1"):
                for b in batches:
                    add("train_t5 / DeepSpeed peak GiB", s, b, w,
                        cells.get(("train_t5", "plain", s, w, b)), cells.get(("deepspeed", "plain", s, w, b)),
                        "peak_gib", PEAK_TARGET, False)
    out = ["| check | ZeRO stage | per GPU | GPUs | value | target | result |", "|---|---|---|---|---|---|---|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    n = {k: sum(1 for r in rows if r[6].startswith(k)) for k in ("PASS", "FAIL", "n/a")}
    out.append("")
    out.append(f"acceptance: {n['PASS']} PASS, {n['FAIL']} FAIL, {n['n/a']} n/a")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="scaling.log of bench/zero_scaling.sh")
    ap.add_argument("--stages", default="0 1 2 3")
    ap.add_argument("--batches", default="16 64")
    ap.add_argument("--impls", default="train_t5 deepspeed")
    ap.add_argument("--model", default="t5-large")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--seq", default="128")
    ap.add_argument("--note", action="append", default=[], help="a line printed under the tables")
    args = ap.parse_args()
    with open(args.log) as f:
        cells = read_log(f)
    stages, batches, impls = args.stages.split(), args.batches.split(), args.impls.split()
    modes = ["plain"] + (["ckpt"] if any(k[1] == "ckpt" for k in cells) else [])
    out = [f"## ZeRO scaling: {args.model} {args.precision}, src = tgt = {args.seq} tokens, 1 and 2 GPUs", ""]
    out += table1(cells, stages, batches, impls, modes)
    out += ["", "## Acceptance", ""]
    out += table2(cells, stages, batches, impls)
    warnings = [f"{c.job} : {w}" for c in cells.values() for w in c.warnings]
    if warnings:
        out += ["", "Warnings:"] + [f"- {w}" for w in warnings]
    if args.note:
        out += [""] + args.note
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
