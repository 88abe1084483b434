#!/usr/bin/env python3
"""tools/make_ds_synthetic_fixtures.py: DeepSpeed ZeRO-2/3 checkpoints of SEVERAL ranks made
without torch or DeepSpeed, for formats/ds_checkpoint.c's tests (tests/test_torch_bin.c).

tools/make_ds_checkpoint.py makes the real thing, but on one GPU: one rank, where ZeRO's
padding and ZeRO-3's per-parameter split never show. Here known weights (a model.safetensors)
are partitioned the way DeepSpeed 0.19 partitions them (stage_1_and_2.py: each param group
flattened, padded to a multiple of 2 * world_size, cut in world_size equal partitions, the
padding dropped from the last rank's single_partition_of_fp32_groups but kept in its Adam
state; stage3.py: every parameter cut in ceil(numel / world_size) pieces, padded at the end,
a rank's pieces concatenated in parameter order and split into sub-groups), pickled as
torch.save pickles them (protocol 2, zip format), with HF's two param groups (decay, no
decay), shared (tied) parameters, a frozen parameter, an opaque loss-scaler object and
IntEnum/dataclass values, and ZeRO-2's elastic_checkpoint state (per-group lists). The expected results are the known weights and moments, written as
zero_to_fp32.safetensors and moments.safetensors (the layout make_ds_checkpoint.py uses).

    python3 tools/make_ds_synthetic_fixtures.py tests/fixtures/relu_tied tests/fixtures/ds_synth
"""
import collections
import json
import os
import random
import struct
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_torch_bin_fixtures as tb  # noqa: E402  (the stand-in torch module and the zip writer)

# stand-ins for the classes DeepSpeed pickles
ds = types.ModuleType("deepspeed.runtime.fp16.loss_scaler")
sys.modules["deepspeed"] = types.ModuleType("deepspeed")
sys.modules["deepspeed.runtime.fp16.loss_scaler"] = ds
zc = types.ModuleType("deepspeed.runtime.zero.config")
sys.modules["deepspeed.runtime.zero.config"] = zc
tf_mod = types.ModuleType("deepspeed.utils.tensor_fragment")
sys.modules["deepspeed.utils.tensor_fragment"] = tf_mod


class DynamicLossScaler:  # pickled as NEWOBJ + BUILD(__dict__), as any plain instance
    pass


DynamicLossScaler.__module__ = ds.__name__
ds.DynamicLossScaler = DynamicLossScaler


class ZeroStageEnum(int):  # an IntEnum pickles as REDUCE(cls, (value,))
    def __reduce__(self):
        return (ZeroStageEnum, (int(self),))


ZeroStageEnum.__module__ = zc.__name__
zc.ZeroStageEnum = ZeroStageEnum


class fragment_address:  # a dataclass
    def __init__(self, numel, start):
        self.numel, self.start = numel, start


fragment_address.__module__ = tf_mod.__name__
tf_mod.fragment_address = fragment_address


class Size(tuple):  # torch.Size pickles as REDUCE(torch.Size, (tuple,))
    def __reduce__(self):
        return (Size, (tuple(self),))


Size.__module__ = "torch"
tb.torch_mod.Size = Size

STEPS = 3


def f32(vals):
    return struct.pack(f"<{len(vals)}f", *vals)


class Keys:
    def __init__(self):
        self.n = 0

    def tensor(self, vals, shape=None, dtype="F32"):
        data = f32(vals)
        if dtype == "BF16":
            data = tb.to_bf16(data)
        self.n += 1
        return tb.Tensor(tb.Storage(str(self.n - 1), dtype, data), 0, shape if shape is not None else (len(vals),))


def groups_of(weights, frozen):
    """HF Trainer's param groups: weight decay, then no decay (norms and 'bias' names)."""
    names = [n for n in weights if n not in frozen and n not in ALIASES]
    nodecay = [n for n in names if "layer_norm" in n or "bias" in n]
    decay = [n for n in names if n not in nodecay]
    return [decay, nodecay]


ALIASES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")


def make(src, out, stage, ws, frozen, sub_group_params=5, trainer_state=False, elastic=False, scaler_state=None,
         model_state=None, poison=None):
    """One checkpoint in OUT/checkpoint (+ the oracles). Hostile variants for the import's tests
    (tests/bad_input_ckpt.sh): trainer_state a dict updates HF's trainer_state.json, scaler_state
    the loss scaler's attributes, model_state the model-states dict (global_steps, ...), and
    poison(weights, exp_avg, exp_avg_sq) edits the values (dicts name -> list) before they are
    partitioned."""
    w = tb.read_safetensors(os.path.join(src, "model.safetensors"))
    vals = {n: list(tb.f32_values(b)) for n, (s, b) in w.items()}
    shapes = {n: s for n, (s, b) in w.items()}
    rng = random.Random(stage * 100 + ws)
    m1 = {n: [rng.uniform(-1e-3, 1e-3) for _ in v] for n, v in vals.items()}
    m2 = {n: [rng.uniform(0, 1e-6) for _ in v] for n, v in vals.items()}
    # round through fp32 so the expected values are what the files hold
    for d in (m1, m2):
        for n in d:
            d[n] = list(tb.f32_values(f32(d[n])))
    if poison:
        poison(vals, m1, m2)
    groups = groups_of(w, frozen)
    tag = f"global_step{STEPS}"
    ck = os.path.join(out, "checkpoint")
    os.makedirs(os.path.join(ck, tag), exist_ok=True)
    with open(os.path.join(ck, "latest"), "w") as f:
        f.write(tag)
    with open(os.path.join(src, "config.json")) as f, open(os.path.join(ck, "config.json"), "w") as g:
        g.write(f.read())
    if trainer_state:
        with open(os.path.join(ck, "trainer_state.json"), "w") as f:
            st = {"global_step": STEPS, "log_history": [{"loss": 2.5, "step": STEPS}], "max_steps": 10}
            st.update(trainer_state if isinstance(trainer_state, dict) else {})
            json.dump(st, f)
    ds_config = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                 "zero_optimization": {"stage": stage}, "gradient_clipping": 1.0}
    param_shapes = [collections.OrderedDict((n, Size(shapes[n])) for n in g) for g in groups]
    shared = collections.OrderedDict((a, "shared.weight") for a in ALIASES)
    scaler = DynamicLossScaler()
    scaler.__dict__.update(cur_scale=1.0, dynamic=False, cur_iter=STEPS, last_overflow_iter=-1)
    scaler.__dict__.update(scaler_state or {})
    keys = Keys()

    def step_tensor():
        return keys.tensor([float(STEPS)], shape=())

    if stage == 2:
        align = 2 * ws
        fp32_parts = [[] for _ in range(ws)]
        m_parts = [[] for _ in range(ws)]
        v_parts = [[] for _ in range(ws)]
        paddings = []
        for g in groups:
            flat = sum((vals[n] for n in g), [])
            fm = sum((m1[n] for n in g), [])
            fv = sum((m2[n] for n in g), [])
            padded = -(-len(flat) // align) * align
            pad = padded - len(flat)
            flat += [0.0] * pad
            fm += [0.0] * pad
            fv += [0.0] * pad
            ps = padded // ws
            paddings.append(pad)
            for r in range(ws):
                lean = ps - (pad if r == ws - 1 else 0)
                fp32_parts[r].append(flat[r * ps:r * ps + lean])
                m_parts[r].append(fm[r * ps:(r + 1) * ps])  # the Adam state keeps the padding
                v_parts[r].append(fv[r * ps:(r + 1) * ps])
        for r in range(ws):
            keys.n = 0
            if elastic:  # zero_optimization.elastic_checkpoint: per-group states, padding cut
                base = [{"step": step_tensor(), "exp_avg": keys.tensor(m_parts[r][i][:len(fp32_parts[r][i])]),
                         "exp_avg_sq": keys.tensor(v_parts[r][i][:len(fp32_parts[r][i])])} for i in range(len(groups))]
            else:  # torch's Optimizer.state_dict() over the padded partitions
                base = {"state": {i: {"step": step_tensor(), "exp_avg": keys.tensor(m_parts[r][i]),
                                      "exp_avg_sq": keys.tensor(v_parts[r][i])} for i in range(len(groups))},
                        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "weight_decay": wd, "params": [i]}
                                         for i, wd in enumerate((0.01, 0.0))]}
            osd = {"loss_scaler": scaler, "dynamic_loss_scale": False, "overflow": False, "clip_grad": 1.0,
                   "base_optimizer_state": base,
                   "single_partition_of_fp32_groups": [keys.tensor(p) for p in fp32_parts[r]],
                   "zero_stage": ZeroStageEnum(2), "group_paddings": [p if r == ws - 1 else 0 for p in paddings],
                   "partition_count": [ws] * len(groups), "ds_version": "0.19.8",
                   "param_slice_mappings": [collections.OrderedDict((n, fragment_address(5, 0)) for n in g)
                                            for g in groups]}
            tb.write_zip(os.path.join(ck, tag, f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"),
                         {"optimizer_state_dict": osd, "ds_config": ds_config, "ds_version": "0.19.8"})
        keys.n = 0
        module = collections.OrderedDict((n, keys.tensor(vals[n], shapes[n], "BF16")) for n in w)
        frags = collections.OrderedDict((n, keys.tensor(vals[n], shapes[n])) for n in frozen)
        ms = model_states(module, param_shapes, frozen, shapes, frags, shared, ds_config, ws, model_state or {})
        tb.write_zip(os.path.join(ck, tag, "mp_rank_00_model_states.pt"), ms)
    else:
        names = [n for g in groups for n in g]
        pieces = [[] for _ in range(ws)]  # per rank: (fp32, m, v) lists of pieces in param order
        for n in names:
            pn = -(-len(vals[n]) // ws)
            for r in range(ws):
                def cut(x):
                    p = x[r * pn:(r + 1) * pn]
                    return p + [0.0] * (pn - len(p))
                pieces[r].append((cut(vals[n]), cut(m1[n]), cut(m2[n])))
        # sub-groups: within each param group, every sub_group_params parameters
        bounds, k = [], 0
        for g in groups:
            for s in range(0, len(g), sub_group_params):
                bounds.append((k + s, k + min(s + sub_group_params, len(g))))
            k += len(g)
        for r in range(ws):
            keys.n = 0
            subs = [[sum((pieces[r][i][j] for i in range(a, b)), []) for (a, b) in bounds] for j in range(3)]
            n_in_g0 = sum(1 for (a, b) in bounds if b <= len(groups[0]))
            base = {"state": {i: {"step": step_tensor(), "exp_avg": keys.tensor(subs[1][i]),
                                  "exp_avg_sq": keys.tensor(subs[2][i])} for i in range(len(bounds))},
                    "param_groups": [{"lr": 1e-3, "weight_decay": 0.01, "params": list(range(n_in_g0))},
                                     {"lr": 1e-3, "weight_decay": 0.0, "params": list(range(n_in_g0, len(bounds)))}]}
            osd = {"zero_stage": ZeroStageEnum(3), "loss_scaler": scaler, "dynamic_loss_scale": False,
                   "overflow": False, "partition_count": ws, "optimizer_state_dict": base,
                   "fp32_flat_groups": [keys.tensor(s) for s in subs[0]]}
            tb.write_zip(os.path.join(ck, tag, f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"),
                         {"optimizer_state_dict": osd, "ds_config": ds_config, "ds_version": "0.19.8"})
            keys.n = 0
            frags = collections.OrderedDict()
            for n in frozen:
                pn = -(-len(vals[n]) // ws)
                p = vals[n][r * pn:(r + 1) * pn]
                frags[n] = keys.tensor(p + [0.0] * (pn - len(p)))
            ms = model_states(collections.OrderedDict(), param_shapes, frozen, shapes, frags, shared, ds_config, ws,
                              model_state or {})
            tb.write_zip(os.path.join(ck, tag, f"zero_pp_rank_{r}_mp_rank_00_model_states.pt"), ms)

    # the oracles: every state-dict name (aliases included) and the trainable moments
    full = collections.OrderedDict((n, (shapes[n], vals[n])) for n in w)
    for a in ALIASES:
        full[a] = full["shared.weight"]
    write_st(os.path.join(out, "zero_to_fp32.safetensors"), full)
    mom = collections.OrderedDict()
    for n in [n for g in groups for n in g]:
        mom[n + ".exp_avg"] = (shapes[n], m1[n])
        mom[n + ".exp_avg_sq"] = (shapes[n], m2[n])
    write_st(os.path.join(out, "moments.safetensors"), mom)


def model_states(module, param_shapes, frozen, shapes, frags, shared, ds_config, ws, edit):
    return dict({"module": module, "buffer_names": [], "optimizer": None, "param_shapes": param_shapes,
                 "frozen_param_shapes": collections.OrderedDict((n, Size(shapes[n])) for n in frozen) if frozen else None,
                 "shared_params": shared, "frozen_param_fragments": frags if frozen else None, "lr_scheduler": None,
                 "data_sampler": None, "random_ltd": None, "sparse_tensor_module_names": set(), "skipped_steps": 0,
                 "global_steps": STEPS, "global_samples": STEPS * 2 * ws, "dp_world_size": ws, "mp_world_size": 1,
                 "ds_config": ds_config, "ds_version": "0.19.8"}, **edit)


def write_st(path, tensors):
    hdr, off, body = {}, 0, b""
    for n, (shape, v) in tensors.items():
        b = f32(v)
        hdr[n] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        body += b
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


VARIANTS = {
    "zero2_ws2": dict(stage=2, ws=2, frozen=("encoder.final_layer_norm.weight",), trainer_state=True),
    "zero3_ws3": dict(stage=3, ws=3, frozen=("decoder.final_layer_norm.weight",)),
    "zero2_ws3_elastic": dict(stage=2, ws=3, frozen=(), elastic=True),
}


def main():
    """SRC OUT [VARIANT ...]: every variant, or the ones named (tests/bad_input.sh makes one of
    its trainer model at run time, too large to commit)."""
    src, out = sys.argv[1], sys.argv[2]
    for name in sys.argv[3:] or list(VARIANTS):
        make(src, os.path.join(out, name), **VARIANTS[name])
    print("wrote", out)


if __name__ == "__main__":
    main()
