#!/usr/bin/env python3
"""tools/make_torch_bin_fixtures.py: torch.save files made WITHOUT torch, for the .bin reader's
tests (formats/torch_file.c, tests/test_torch_bin.c): the same weights as a model.safetensors,
written in torch's zip format and its legacy (< 1.6) format with the exact pickles torch.save
writes (protocol 2; torch._utils._rebuild_tensor_v2 over ('storage', torch.FloatStorage, key,
location, numel[, view]) persistent ids; collections.OrderedDict), plus the corner cases and
damaged files that a real torch would rarely produce on demand.

    python3 tools/make_torch_bin_fixtures.py tests/fixtures/relu_tied tests/fixtures/torch_bin

Stand-in modules named torch and torch._utils are registered only inside this process so that
pickle writes GLOBAL torch.FloatStorage etc.; nothing is imported from a real torch. The files
made by a real torch (save_pretrained, torch.save) are tools/make_ds_checkpoint.py's.
Output (deterministic):
  zip/        pytorch_model.bin (zip; lm_head.weight and encoder/decoder.embed_tokens.weight
              share shared.weight's storage, as tied weights do) + config.json
  legacy/     the legacy format, with a storage view (view_metadata) and a tensor at a
              storage offset
  bf16/       zip with every tensor bfloat16 (round to nearest even), f16/ likewise float16
  zip64/      zip with ZIP64 records (central directory, end record) forced
  sharded/    pytorch_model-0000{1,2}-of-00002.bin + pytorch_model.bin.index.json
  both/       model.safetensors (the source) AND a pytorch_model.bin of other values:
              safetensors must win
  bad/        noncontig.bin (a transposed view), protocol4.bin (data.pkl written with
              pickle protocol 4: opcode FRAME), missing_storage.bin (data/1 left out),
              not_a_dict.bin (a list of tensors), compressed.bin (deflated entries)
"""
import collections
import json
import os
import pickle
import struct
import sys
import types
import zipfile

# ---- stand-ins for torch's pickled names -------------------------------------------------
torch_mod = types.ModuleType("torch")
utils_mod = types.ModuleType("torch._utils")
torch_mod._utils = utils_mod
sys.modules["torch"] = torch_mod
sys.modules["torch._utils"] = utils_mod

DTYPES = {"F32": ("FloatStorage", 4), "F16": ("HalfStorage", 2), "BF16": ("BFloat16Storage", 2)}
for cls_name, _ in DTYPES.values():
    c = type(cls_name, (), {"__module__": "torch"})
    setattr(torch_mod, cls_name, c)


def _rebuild_tensor_v2(*args):  # never called: only its name is pickled
    raise RuntimeError("stand-in")


_rebuild_tensor_v2.__module__ = "torch._utils"
utils_mod._rebuild_tensor_v2 = _rebuild_tensor_v2


class Storage:
    def __init__(self, key, dtype, data):
        self.key, self.dtype, self.data = key, dtype, data  # data: little-endian bytes

    @property
    def numel(self):
        return len(self.data) // DTYPES[self.dtype][1]


class Tensor:
    def __init__(self, storage, offset, shape, stride=None, view=None):
        self.storage, self.offset, self.shape, self.view = storage, offset, tuple(shape), view
        if stride is None:
            stride, acc = [], 1
            for d in reversed(self.shape):
                stride.insert(0, acc)
                acc *= d
        self.stride = tuple(stride)

    def __reduce_ex__(self, proto):
        return (_rebuild_tensor_v2, (self, self.offset, self.shape, self.stride, False, collections.OrderedDict()))


class StoragePid:  # what persistent_id sees: the tensor's storage, wrapped per tensor
    pass


def pickle_state(obj, legacy, protocol=2):
    """torch.save's main pickle: tensors reduce to _rebuild_tensor_v2(storage, ...); the storage
    is a persistent id."""
    import io
    storages = {}

    class P(pickle.Pickler):
        def reducer_override(self, o):
            if isinstance(o, Tensor):
                return o.__reduce_ex__(2)
            return NotImplemented

        def persistent_id(self, o):
            if isinstance(o, Tensor):  # the storage slot of _rebuild_tensor_v2 (see below)
                return None
            if isinstance(o, Storage):
                storages[o.key] = o
                cls = getattr(torch_mod, DTYPES[o.dtype][0])
                if legacy:
                    return ("storage", cls, o.key, "cpu", o.numel, None)
                return ("storage", cls, o.key, "cpu", o.numel)
            if isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], Storage):  # a legacy view
                root, (view_key, off, size) = o
                storages[root.key] = root
                cls = getattr(torch_mod, DTYPES[root.dtype][0])
                return ("storage", cls, root.key, "cpu", root.numel, (view_key, off, size))
            return None

    # _rebuild_tensor_v2's first argument is the storage (or a view of it)
    def reduce_tensor(t):
        st = (t.storage, t.view) if t.view else t.storage
        return (_rebuild_tensor_v2, (st, t.offset, t.shape, t.stride, False, collections.OrderedDict()))

    Tensor.__reduce_ex__ = lambda self, proto: reduce_tensor(self)
    buf = io.BytesIO()
    P(buf, protocol=protocol).dump(obj)
    return buf.getvalue(), storages


# ---- bf16 / f16 from f32 bytes -------------------------------------------------------------
def f32_values(data):
    return struct.unpack(f"<{len(data) // 4}f", data)


def to_bf16(data):
    out = bytearray()
    for (u,) in struct.iter_unpack("<I", data):
        r = ((u >> 16) & 1) + 0x7FFF
        out += struct.pack("<H", ((u + r) >> 16) & 0xFFFF)
    return bytes(out)


def to_f16(data):
    return struct.pack(f"<{len(data) // 4}e", *f32_values(data))


# ---- safetensors in --------------------------------------------------------------------------
def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        body = f.read()
    hdr.pop("__metadata__", None)
    out = collections.OrderedDict()
    for name, e in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        assert e["dtype"] == "F32", name
        b, t = e["data_offsets"]
        out[name] = (e["shape"], body[b:t])
    return out


# ---- writers ---------------------------------------------------------------------------------
def write_zip(path, obj, prefix="archive", protocol=2, drop=(), compression=zipfile.ZIP_STORED, force_zip64=False):
    data, storages = pickle_state(obj, legacy=False, protocol=protocol)
    old = zipfile.ZIP64_LIMIT
    if force_zip64:
        zipfile.ZIP64_LIMIT = 1  # every size and offset goes into ZIP64 fields
    try:
        with zipfile.ZipFile(path, "w", compression=compression) as z:
            def put(name, payload):  # a fixed timestamp: the same bytes on every run
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = compression
                z.writestr(info, payload)
            put(f"{prefix}/data.pkl", data)
            put(f"{prefix}/byteorder", "little")
            for key in sorted(storages):
                if key not in drop:
                    put(f"{prefix}/data/{key}", storages[key].data)
            put(f"{prefix}/version", "3\n")
    finally:
        zipfile.ZIP64_LIMIT = old


MAGIC = 0x1950A86A20F9469CFC6C


def write_legacy(path, obj):
    data, storages = pickle_state(obj, legacy=True)
    keys = sorted(storages)
    with open(path, "wb") as f:
        pickle.dump(MAGIC, f, protocol=2)
        pickle.dump(1001, f, protocol=2)
        pickle.dump({"protocol_version": 1001, "little_endian": True,
                     "type_sizes": {"short": 2, "int": 4, "long": 4}}, f, protocol=2)
        f.write(data)
        pickle.dump(keys, f, protocol=2)
        for k in keys:
            s = storages[k]
            f.write(struct.pack("<q", s.numel))
            f.write(s.data)


def state_dict(weights, dtype="F32", tie=True):
    """OrderedDict name -> Tensor, one storage per tensor; the embedding's aliases share it."""
    sd = collections.OrderedDict()
    for i, (name, (shape, data)) in enumerate(weights.items()):
        if dtype == "BF16":
            data = to_bf16(data)
        elif dtype == "F16":
            data = to_f16(data)
        sd[name] = Tensor(Storage(str(i), dtype, data), 0, shape)
    if tie and "shared.weight" in sd:
        for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
            sd[alias] = sd["shared.weight"]
    return sd


def main():
    src, out = sys.argv[1], sys.argv[2]
    weights = read_safetensors(os.path.join(src, "model.safetensors"))
    cfg = open(os.path.join(src, "config.json")).read()

    def mkdir(d):
        os.makedirs(os.path.join(out, d), exist_ok=True)
        if d != "bad":
            with open(os.path.join(out, d, "config.json"), "w") as f:
                f.write(cfg)
        return os.path.join(out, d)

    write_zip(os.path.join(mkdir("zip"), "pytorch_model.bin"), state_dict(weights), prefix="pytorch_model")
    write_zip(os.path.join(mkdir("bf16"), "pytorch_model.bin"), state_dict(weights, "BF16"))
    write_zip(os.path.join(mkdir("f16"), "pytorch_model.bin"), state_dict(weights, "F16"))
    write_zip(os.path.join(mkdir("zip64"), "pytorch_model.bin"), state_dict(weights), force_zip64=True)

    # legacy: the first block's q and k in one root storage: q at offset 0, k at a storage
    # offset; v as a storage view (view_metadata) of another root holding [pad, v]
    sd = state_dict(weights)
    q, k, v = (f"encoder.block.0.layer.0.SelfAttention.{x}.weight" for x in "qkv")
    qs, qd = weights[q]
    ks, kd = weights[k]
    root = Storage("qk", "F32", qd + kd)
    sd[q] = Tensor(root, 0, qs)
    sd[k] = Tensor(root, len(qd) // 4, ks)
    vs, vd = weights[v]
    pad = struct.pack("<3f", 7.0, 8.0, 9.0)
    vroot = Storage("vroot", "F32", pad + vd)
    sd[v] = Tensor(vroot, 0, vs, view=("vview", 3, len(vd) // 4))
    write_legacy(os.path.join(mkdir("legacy"), "pytorch_model.bin"), sd)

    # sharded: the first half of the names in shard 1
    names = list(weights)
    half = len(names) // 2
    d = mkdir("sharded")
    wm = {}
    for i, part in enumerate((names[:half], names[half:])):
        fname = f"pytorch_model-0000{i + 1}-of-00002.bin"
        write_zip(os.path.join(d, fname), state_dict(collections.OrderedDict((n, weights[n]) for n in part), tie=False),
                  prefix=f"pytorch_model-0000{i + 1}-of-00002")
        wm.update({n: fname for n in part})
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(len(w[1]) for w in weights.values())}, "weight_map": wm}, f, indent=2)

    # both: the .bin holds other values (all zeros); safetensors must be the one loaded
    d = mkdir("both")
    with open(os.path.join(src, "model.safetensors"), "rb") as f, open(os.path.join(d, "model.safetensors"), "wb") as g:
        g.write(f.read())
    zeros = collections.OrderedDict((n, (s, bytes(len(b)))) for n, (s, b) in weights.items())
    write_zip(os.path.join(d, "pytorch_model.bin"), state_dict(zeros))

    # damaged and unsupported files
    d = mkdir("bad")
    sd = state_dict(weights)
    name = "encoder.block.0.layer.0.SelfAttention.o.weight"
    shape, data = weights[name]
    sd[name] = Tensor(Storage("T", "F32", data), 0, (shape[1], shape[0]), stride=(1, shape[1]))  # a .t() view
    write_zip(os.path.join(d, "noncontig.bin"), sd)
    write_zip(os.path.join(d, "protocol4.bin"), state_dict(weights), protocol=4)
    write_zip(os.path.join(d, "missing_storage.bin"), state_dict(weights), drop=("1",))
    write_zip(os.path.join(d, "not_a_dict.bin"), list(state_dict(weights).values())[:2])
    write_zip(os.path.join(d, "compressed.bin"), state_dict(weights), compression=zipfile.ZIP_DEFLATED)
    print("wrote", out)


if __name__ == "__main__":
    main()
