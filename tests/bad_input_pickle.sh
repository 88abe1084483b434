#!/usr/bin/env bash
# tests/bad_input_pickle.sh: hostile pytorch_model.bin files (issue 35, "Pickle VM"): the pickle
# VM (formats/torch_pickle.c) and the zip / legacy container (formats/torch_file.c) as a hostile
# user or a damaged download would feed them, through `train_t5 info --model DIR` under the
# AddressSanitizer build. Each hostile file must end in exit code 1 (no signal, no sanitizer
# report) with ONE "error: ..." line (optionally a HINT line) naming the file and what is
# wrong, within 10 s and 2 GiB of memory; valid files must load with the weights torch would
# give. Families: time (N keys, N storages, N zip entries: hashed, not compared N^2), the
# memo (any index, memory by what is stored), sizes and offsets that overflow, container
# lies (zip entries, ZIP64, legacy counts), opcodes with lengths, nesting, and what Python
# would read differently (a repeated key takes the last value). Files are written by plain
# python3 (no torch), the pickles by hand.
#   TRAIN_T5=path/to/binary tests/bad_input_pickle.sh    (default ./build-asan/train_t5)
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${TRAIN_T5:-./build-asan/train_t5}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "OK     $1"; }
notok() { fail=$((fail + 1)); echo "NOT OK $1"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

if [ ! -x "$BIN" ]; then
  notok "$BIN is not built (make test builds it with AddressSanitizer)"
  finish
fi
if ! command -v python3 >/dev/null 2>&1; then
  notok "python3 is needed to write the test files"
  finish
fi
T=$(mktemp -d /tmp/t5_bad_pickle.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT

# ---- write the files -----------------------------------------------------------------------
python3 - "$T" <<'PY' || { notok "python3 could not write the test files"; finish; }
import json, os, pickle, shutil, struct, sys, warnings, zipfile

warnings.simplefilter("ignore")  # zipfile warns of the duplicate names written on purpose

root = sys.argv[1]
FIX = "tests/fixtures/ds_ckpt"
# the tiny model (47 tensors, 12000 parameters) whose config.json every case uses
with open(os.path.join(FIX, "hf_safetensors/model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
    body = f.read()
hdr.pop("__metadata__", None)
W = [(name, e["shape"], body[e["data_offsets"][0]:e["data_offsets"][1]])
     for name, e in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])]
SHARED = next(k for k, (name, _, _) in enumerate(W) if name == "shared.weight")

# ---- pickle opcodes by hand (protocol 2) ----
def u(s):
    b = s if isinstance(s, bytes) else s.encode()
    return b"X" + struct.pack("<I", len(b)) + b
def i(v):
    if 0 <= v < 256: return b"K" + bytes([v])
    if 0 <= v < 65536: return b"M" + struct.pack("<H", v)
    if -2**31 <= v < 2**31: return b"J" + struct.pack("<i", v)
    return b"\x8a\x08" + v.to_bytes(8, "little", signed=True)
def g(mod, name): return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"
def tup(*items): return b"(" + b"".join(items) + b"t"
OD = g("collections", "OrderedDict") + b")R"
PROTO = b"\x80\x02"
def pid(key, numel, dtype="FloatStorage", six=False, view=None):
    items = [u("storage"), g("torch", dtype), u(key), u("cpu"), i(numel)]
    if six or view:
        items.append(b"N" if view is None else tup(u(view[0]), i(view[1]), i(view[2])))
    return tup(*items) + b"Q"
def contiguous(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.insert(0, acc)
        acc *= d
    return st
def tensor(key, numel, shape, offset=0, stride=None, fn=("torch._utils", "_rebuild_tensor_v2"), **kw):
    stride = contiguous(shape) if stride is None else stride
    return g(*fn) + tup(pid(key, numel, **kw), i(offset), tup(*map(i, shape)), tup(*map(i, stride)), b"\x89", OD) + b"R"
def numel(shape):
    n = 1
    for d in shape: n *= d
    return n
def state_dict(entries):  # entries: [(name, value pickle)]
    return PROTO + OD + b"(" + b"".join(u(k) + v for k, v in entries) + b"u."
def good_entries(edit=None):
    """The model as torch.save writes it: one storage per tensor, key str(k). edit(k, name, shape, data)
    may return a replacement value pickle."""
    out = []
    for k, (name, shape, data) in enumerate(W):
        v = edit(k, name, shape, data) if edit else None
        out.append((name, v if v is not None else tensor(str(k), numel(shape), shape)))
    return out
GOOD_STORAGES = {str(k): data for k, (_, _, data) in enumerate(W)}

def zip_bytes(entries):  # entries: [(name, bytes)] stored, in this order
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, payload in entries:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), payload)
    return buf.getvalue()
def torch_zip(pkl, storages=None, prefix="archive", first=(), last=()):
    storages = GOOD_STORAGES if storages is None else storages
    return zip_bytes(list(first) + [(f"{prefix}/data.pkl", pkl), (f"{prefix}/byteorder", b"little")] +
                     [(f"{prefix}/data/{k}", v) for k, v in storages.items()] + [(f"{prefix}/version", b"3\n")] +
                     list(last))
LEGACY_MAGIC = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
def legacy(main_pkl, keys, counts, storages):
    out = bytearray(LEGACY_MAGIC + pickle.dumps(1001, protocol=2))
    out += pickle.dumps({"protocol_version": 1001, "little_endian": True,
                         "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2)
    out += main_pkl + pickle.dumps(keys, protocol=2)
    for k in keys:
        out += struct.pack("<q", counts[k]) + storages[k]
    return bytes(out)

def case(name, blob):
    d = os.path.join(root, name)
    os.makedirs(d)
    shutil.copy(os.path.join(FIX, "hf_bin_zip/config.json"), d)
    with open(os.path.join(d, "pytorch_model.bin"), "wb") as f:
        f.write(blob)

# ---- valid files (controls) ----
case("good_zip", torch_zip(state_dict(good_entries())))
LEG_ENTRIES = [(name, tensor(str(k), numel(shape), shape, six=True)) for k, (name, shape, _) in enumerate(W)]
case("good_legacy", legacy(state_dict(LEG_ENTRIES), list(GOOD_STORAGES),
                           {k: len(v) // 4 for k, v in GOOD_STORAGES.items()}, GOOD_STORAGES))
# OrderedDict state (state_dict()'s _metadata): a BUILD on the dict, items untouched
case("good_metadata", torch_zip(state_dict(good_entries())[:-1] + b"}" + u("_metadata") + OD + b"sb."))

# ---- time: names looked up by hash ----
N = 100_000
case("dict_100k", torch_zip(PROTO + b"}(" + b"".join(u("k%d" % k) + b"N" for k in range(N)) + b"u."))
case("dict_1m", torch_zip(PROTO + b"}(" + b"".join(u("k%d" % k) + b"N" for k in range(1_000_000)) + b"u."))
case("setitem_100k", torch_zip(PROTO + b"}" + b"".join(u("k%d" % k) + b"Ns" for k in range(N)) + b"."))
case("dup_key_100k", torch_zip(PROTO + b"}(" + (u("same") + b"N") * N + b"u."))
case("int_keys_100k", torch_zip(PROTO + b"}(" + b"".join(b"J" + struct.pack("<i", k << 12) + b"N" for k in range(-N // 2, N // 2)) + b"u."))
case("float_keys_100k", torch_zip(PROTO + b"}(" + b"".join(b"G" + struct.pack(">d", k + 0.5) + b"N" for k in range(N)) + b"u."))
case("tuple_keys_100k", torch_zip(PROTO + b"}(" + b"".join(b"K\x01J" + struct.pack("<i", k) + b"\x86N" for k in range(N)) + b"u."))
# 100k tensors, each its own storage and zip entry (storage and entry look-ups)
def many_tensors(n, six=False):  # n tensors of 1 element, each its own storage; the classes memoized
    body = bytearray(PROTO + OD + b"(")
    for k in range(n):
        fn = g("torch._utils", "_rebuild_tensor_v2") + b"q\x01" if k == 0 else b"h\x01"
        cls = g("torch", "FloatStorage") + b"q\x02" if k == 0 else b"h\x02"
        p = tup(u("storage"), cls, u("s%d" % k), u("cpu"), b"K\x01", *([b"N"] if six else [])) + b"Q"
        body += u("t%d" % k) + fn + tup(p, b"K\x00", b"K\x01\x85", b"K\x01\x85", b"\x89", b")") + b"R"
    return bytes(body + b"u.")
NT = 50_000  # tensors: each costs a zip entry, a storage and a look-up of both
case("tensors_50k", torch_zip(many_tensors(NT), {("s%d" % k): b"\0\0\0\0" for k in range(NT)}))
case("legacy_50k", legacy(many_tensors(NT, six=True), ["s%d" % k for k in range(NT)], {("s%d" % k): 1 for k in range(NT)},
                          {("s%d" % k): b"\0\0\0\0" for k in range(NT)}))
case("memo_100k_sparse", torch_zip(PROTO + b"}" + b"".join(b"r" + struct.pack("<I", k << 12) for k in range(N)) + b"."))

# ---- the memo: sparse, any 32-bit index ----
def memo_at(idx):  # {"k": the dict itself}, through memo index idx
    return torch_zip(PROTO + b"}r" + struct.pack("<I", idx) + u("k") + b"j" + struct.pack("<I", idx) + b"s.")
case("memo_put_1e28", memo_at(0x10000000))  # the issue's example: a 4.3 GB table before
case("memo_put_2e31m1", memo_at(0x7FFFFFFF))
case("memo_put_2e32m1", memo_at(0xFFFFFFFF))
case("memo_get_unset", torch_zip(PROTO + b"}q\x00j" + struct.pack("<I", 0x7FFFFFFF) + b"."))
case("memo_binget_unset", torch_zip(PROTO + b"}q\x00h\x07."))
case("memo_put_empty", torch_zip(PROTO + b"r" + struct.pack("<I", 5) + b"}."))
case("memo_put_after_mark", torch_zip(PROTO + b"}(q\x00u."))

# ---- sizes and offsets: overflow-safe bounds ----
def one(edit_k, value):
    return torch_zip(state_dict(good_entries(lambda k, n, s, d: value if k == edit_k else None)))
SH = W[SHARED][1]  # [96, 16]
case("offset_2e62", one(SHARED, tensor(str(SHARED), 2**62 + 1536, SH, offset=2**62)))
case("offset_2e61", one(SHARED, tensor(str(SHARED), 2**61 + 1536, SH, offset=2**61)))
case("offset_2e60", one(SHARED, tensor(str(SHARED), 2**60 + 1536, SH, offset=2**60)))
case("numel_max", one(SHARED, tensor(str(SHARED), 2**63 - 1, SH, offset=2**63 - 1537)))
case("size_overflow", one(SHARED, tensor(str(SHARED), 1536, [2**32, 2**32], stride=[2**32, 1])))
case("size3_overflow", one(SHARED, tensor(str(SHARED), 1536, [3, 2**62], stride=[2**62, 1])))
case("stride_reach", one(SHARED, tensor(str(SHARED), 1536, [2, 768], stride=[2**62, 1])))
case("stride_negative", one(SHARED, tensor(str(SHARED), 1536, SH, stride=[-16, 1])))
case("offset_negative", one(SHARED, tensor(str(SHARED), 1536, SH, offset=-1)))
case("offset_one_past", one(SHARED, tensor(str(SHARED), 1536, SH, offset=1)))
case("numel_small", one(SHARED, tensor(str(SHARED), 100, SH)))
case("numel_big", one(SHARED, tensor(str(SHARED), 1537, SH)))
case("numel_negative", one(SHARED, tensor(str(SHARED), -1, SH)))
K16 = next(k for k, (_, s, _) in enumerate(W) if s == [16, 16])
assert W[K16 + 1][1] == [16, 16]
case("key_two_dtypes", one(K16 + 1, tensor(str(K16), 512, [16, 16], dtype="HalfStorage")))
case("zip_six_item_pid", one(SHARED, tensor(str(SHARED), 1536, SH, six=True)))
# a storage key longer than any fixed buffer: the entry named by its first 4090 bytes must not stand in
LONG_KEY = "A" * 5000
st = dict(GOOD_STORAGES)
st["A" * 4090] = st.pop(str(SHARED))
case("key_5000", torch_zip(state_dict(good_entries(lambda k, n, s, d: tensor(LONG_KEY, 1536, SH) if k == SHARED else None)), st))
# legacy container
LCOUNTS = {k: len(v) // 4 for k, v in GOOD_STORAGES.items()}
def leg(counts=LCOUNTS, keys=list(GOOD_STORAGES), entries=LEG_ENTRIES, storages=GOOD_STORAGES):
    return legacy(state_dict(entries), keys, counts, storages)
case("legacy_count_lies", leg(dict(LCOUNTS, **{str(SHARED): 1537})))
case("legacy_count_wraps", leg(dict(LCOUNTS, **{str(SHARED): 2**62 - 2})))
case("legacy_listed_twice", leg(keys=list(GOOD_STORAGES) + [str(SHARED)]))
case("legacy_not_listed", leg(keys=[k for k in GOOD_STORAGES if k != str(SHARED)]))
LV = list(LEG_ENTRIES)
LV[SHARED] = ("shared.weight", tensor(str(SHARED), 1536, SH, view=("v", 1000, 1536)))
case("legacy_view_outside", leg(entries=LV))

# ---- zip container lies ----
good_zip = torch_zip(state_dict(good_entries()))
def patch_central(blob, name, edit):
    """blob with the central directory entry of `name` passed through edit(bytearray, at)."""
    b = bytearray(blob)
    p = 0
    while True:
        at = b.find(b"PK\x01\x02", p)
        nlen = struct.unpack_from("<H", b, at + 28)[0]
        if b[at + 46:at + 46 + nlen] == name.encode():
            edit(b, at)
            return bytes(b)
        p = at + 4
case("zip_size_lies", patch_central(good_zip, f"archive/data/{SHARED}",
                                     lambda b, at: (struct.pack_into("<I", b, at + 20, 6148), struct.pack_into("<I", b, at + 24, 6148))))
case("zip_size_past_end", patch_central(good_zip, f"archive/data/{SHARED}",
                                         lambda b, at: (struct.pack_into("<I", b, at + 20, 0x7fffffff), struct.pack_into("<I", b, at + 24, 0x7fffffff))))
def zip64_lie(b, at):  # sizes saturated, ZIP64 extra field of 2^63
    struct.pack_into("<II", b, at + 20, 0xFFFFFFFF, 0xFFFFFFFF)
case("zip64_no_extra", patch_central(good_zip, f"archive/data/{SHARED}", zip64_lie))
def eocd_edit(blob, off, fmt, value):
    b = bytearray(blob)
    at = b.rfind(b"PK\x05\x06")
    struct.pack_into(fmt, b, at + off, value)
    return bytes(b)
case("eocd_count_lies", eocd_edit(good_zip, 10, "<H", 0xFFFE))
case("eocd_cd_offset_lies", eocd_edit(good_zip, 16, "<I", 0x7FFFFFF0))
case("eocd_zip64_saturated", eocd_edit(good_zip, 16, "<I", 0xFFFFFFFF))
def patch_local(blob, name, off, fmt, value):
    """blob with field `off` of the local header of entry `name` set to value."""
    b = bytearray(blob)
    at = b.find(b"PK\x03\x04")
    while b[at + 30:at + 30 + struct.unpack_from("<H", b, at + 26)[0]] != name.encode():
        at = b.find(b"PK\x03\x04", at + 4)
    struct.pack_into(fmt, b, at + off, value)
    return bytes(b)
LAST = f"archive/data/{len(W) - 1}"
case("local_extra_lies", patch_local(good_zip, LAST, 28, "<H", 0xFFFF))
case("local_extra_pkl", patch_local(good_zip, "archive/data.pkl", 28, "<H", 0x0100))
def zip64_zip(pkl):
    old = zipfile.ZIP64_LIMIT
    zipfile.ZIP64_LIMIT = 1  # every size and offset in ZIP64 fields
    try:
        return torch_zip(pkl)
    finally:
        zipfile.ZIP64_LIMIT = old
def zip64_extra_lie(b, at):  # the ZIP64 extra field's sizes: 2^63
    nlen, xlen = struct.unpack_from("<HH", b, at + 28)
    x = at + 46 + nlen
    while struct.unpack_from("<H", b, x)[0] != 1:
        x += 4 + struct.unpack_from("<H", b, x + 2)[0]
    struct.pack_into("<QQ", b, x + 4, 2**63, 2**63)
z64 = zip64_zip(state_dict(good_entries()))
case("good_zip64", z64)
case("zip64_extra_lies", patch_central(z64, f"archive/data/{SHARED}", zip64_extra_lie))
sd_bytes = state_dict(good_entries())
zero_sh = bytes(len(W[SHARED][2]))
case("zip_dup_entry", torch_zip(sd_bytes, last=[(f"archive/data/{SHARED}", zero_sh)]))
case("zip_dup_entry_case", torch_zip(sd_bytes, last=[(f"archive/DATA/{SHARED}", zero_sh)]))
st = dict(GOOD_STORAGES)
del st[str(SHARED)]
zn = torch_zip(sd_bytes, st, last=[(f"archive/data/{SHARED}\x01x", W[SHARED][2])])  # zipfile cuts names at a NUL
case("zip_nul_name", zn.replace(f"/data/{SHARED}\x01x".encode(), f"/data/{SHARED}\0x".encode()))
case("zip_first_other_folder", torch_zip(sd_bytes, first=[("evil/version", b"3\n")]))
case("zip_first_no_folder", torch_zip(sd_bytes, first=[("README", b"hi\n")]))
case("zip_empty", b"PK\x03\x04" + bytes(26) + b"PK\x05\x06" + bytes(18))  # no entries

# ---- opcodes with lengths, refused by name or checked ----
for op, name, arg in [(0x8e, "BINBYTES8", struct.pack("<Q", 2**63)), (0x8b, "LONG4", struct.pack("<I", 2**31)),
                      (0x8d, "BINUNICODE8", struct.pack("<Q", 2**63)), (0x95, "FRAME", struct.pack("<Q", 2**63)),
                      (ord("B"), "BINBYTES", struct.pack("<I", 0xFFFFFFFF)), (0x96, "BYTEARRAY8", struct.pack("<Q", 2**62)),
                      (ord("L"), "LONG", b"1" * 1000), (ord("S"), "STRING", b"'" + b"a" * 1000)]:
    case("op_" + name, torch_zip(PROTO + b"}" + bytes([op]) + arg + b"."))
case("unicode_past_end", torch_zip(PROTO + b"X" + struct.pack("<I", 0xFFFFFFFF) + b"abc."))
case("long1_255", torch_zip(PROTO + b"\x8a\xff" + b"\x01" * 255 + b"."))
case("global_no_newline", torch_zip(PROTO + b"c" + b"a" * 1_000_000 + b"."))
case("global_nul", torch_zip(PROTO + b"ctorch._utils\n_rebuild_tensor_v2\0x\n."))
case("global_dotted", torch_zip(state_dict(good_entries(lambda k, n, s, d: tensor(str(k), numel(s), s, fn=("torch", "_utils._rebuild_tensor_v2")) if k == SHARED else None))))
case("str_nul", torch_zip(state_dict(good_entries())[:-2] + u("shared.weight\0x") + b"Nu."))
case("str_bad_utf8", torch_zip(PROTO + b"}" + u(b"\xc3\x28") + b"Ns."))

# ---- nesting and the stack ----
def chain_case(depth):
    """shared.weight as _rebuild_from_type_v2(_rebuild_from_type_v2(... _rebuild_tensor_v2(...))),
    depth + 1 calls deep (memo 1: _rebuild_from_type_v2, 2: torch.Tensor, 3: the {} state, each
    stored where it first appears)."""
    args = tup(pid(str(SHARED), 1536), i(0), tup(i(96), i(16)), tup(i(16), i(1)), b"\x89", OD)
    t_first = g("torch", "Tensor") + b"q\x02"
    level0 = tup(g("torch._utils", "_rebuild_tensor_v2"), t_first if depth == 0 else b"h\x02", args, b"}q\x03")
    body = level0 if depth == 0 else b"(h\x01" + t_first + b"(h\x01h\x02" * (depth - 1) + level0 + b"h\x03t" * depth
    v = g("torch._tensor", "_rebuild_from_type_v2") + b"q\x01" + body + b"R"
    return torch_zip(state_dict(good_entries(lambda k, n, s, d: v if k == SHARED else None)))
case("rebuild_chain_3", chain_case(3))
case("rebuild_chain_200k", chain_case(200_000))
deep = b")" + b"\x85" * 200_000
case("tuple_key_deep", torch_zip(PROTO + b"}" + deep + b"Ns."))
case("tuple_key_101", torch_zip(PROTO + b"}" + b")" + b"\x85" * 101 + b"Ns."))
def dag_bytes(depth):
    """P_k = (P_{k-1}, Q_{k-1}), Q_k = (Q_{k-1}, P_{k-1}) from P_0 = 1, Q_0 = 1.0: all equal in Python, never
    the same object (compared item by item: 2^depth steps). P_k at memo 2k % 250, Q_k at 2k+1."""
    b = bytearray(b"K\x01q\x00G" + struct.pack(">d", 1.0) + b"q\x01")
    for k in range(depth):
        p, q, np_, nq = (2 * k) % 250, (2 * k + 1) % 250, (2 * k + 2) % 250, (2 * k + 3) % 250
        b += b"h" + bytes([p]) + b"h" + bytes([q]) + b"\x86q" + bytes([np_])
        b += b"h" + bytes([q]) + b"h" + bytes([p]) + b"\x86q" + bytes([nq])
    return bytes(b)
# {P_60: None, Q_60: None}: one key; the tuples stay on the stack, so STOP refuses the pickle
case("tuple_key_dag", torch_zip(PROTO + b"}q\xfa" + dag_bytes(60) + b"h\xfah\x78Nsh\xfah\x79Ns."))
case("lists_nested_1m", torch_zip(PROTO + b"]" * 1_000_000 + b"a" * 999_999 + b"."))
case("marks_1m", torch_zip(PROTO + b"}" + b"(" * 1_000_000 + b"."))
case("list_cycle", torch_zip(state_dict(good_entries(lambda k, n, s, d: b"]q\x09h\x09a" if k == SHARED else None))))
case("key_list", torch_zip(PROTO + b"}]Ns."))
case("key_tuple_with_list", torch_zip(PROTO + b"}]\x85Ns."))
case("tuple_1m", torch_zip(PROTO + b"(" + b"N" * 1_000_000 + b"t."))
case("appends_1m", torch_zip(PROTO + b"](" + b"N" * 1_000_000 + b"e."))

# ---- read as Python reads it ----
case("dup_tensor_name", torch_zip(PROTO + OD + b"(" + u("shared.weight") + tensor("zero", 1536, SH) +
                                  b"".join(u(n) + v for n, v in good_entries()) + b"u.",
                                  dict(GOOD_STORAGES, zero=bytes(6144))))
case("build_on_tensor", torch_zip(state_dict(good_entries(lambda k, n, s, d: tensor(str(k), numel(s), s) + tup(pid(str(k), numel(s)), i(0), tup(*map(i, s)), tup(*map(i, contiguous(s)))) + b"b" if k == SHARED else None))))
case("build_twice_list", torch_zip(PROTO + b"]NbNb."))
PY

# ---- run -------------------------------------------------------------------------------------
# Every case runs under a 20 s kill and /usr/bin/time (when there) for its peak memory: a case
# must end within 10 s and 2 GiB (RSS, sanitizer shadow included).
HAVE_TIME=0
/usr/bin/time -f %M true >/dev/null 2>&1 && HAVE_TIME=1
[ "$HAVE_TIME" -eq 1 ] || echo "NOTICE: /usr/bin/time is missing: peak memory is not checked"
run() { # run ASAN_OPTIONS ARGS...
  local opts=$1; shift
  local start end
  start=$(date +%s.%N)
  if [ "$HAVE_TIME" -eq 1 ]; then
    ASAN_OPTIONS=$opts UBSAN_OPTIONS=print_stacktrace=1 timeout -s KILL 20 /usr/bin/time -f %M -o "$T/rss" \
      "$BIN" "$@" >"$T/out" 2>"$T/err"
  else
    ASAN_OPTIONS=$opts UBSAN_OPTIONS=print_stacktrace=1 timeout -s KILL 20 "$BIN" "$@" >"$T/out" 2>"$T/err"
  fi
  rc=$?
  end=$(date +%s.%N)
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  rss_mb=0
  [ "$HAVE_TIME" -eq 1 ] && [ -s "$T/rss" ] && rss_mb=$(( $(tail -n 1 "$T/rss" | tr -dc 0-9) / 1024 ))
}
sanitizer_report() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|UndefinedBehaviorSanitizer' "$T/err"; }
limits() { # the time and memory verdict, or nothing
  if awk -v s="$secs" 'BEGIN { exit !(s > 10) }'; then echo "took ${secs} s (over 10 s)"
  elif [ "$rss_mb" -gt 2048 ]; then echo "peak memory ${rss_mb} MiB (over 2 GiB)"; fi
}

expect_error() { # expect_error CASE NEEDLE: train_t5 info --model $T/CASE
  local name=$1 needle=$2 why=""
  run "detect_leaks=0" info --model "$T/$name"
  local lines first second
  lines=$(wc -l <"$T/err")
  first=$(sed -n 1p "$T/err")
  second=$(sed -n 2p "$T/err")
  if [ "$rc" -ne 1 ]; then why="exit code $rc, want 1"
  elif sanitizer_report; then why="sanitizer report"
  elif [ -n "$(limits)" ]; then why=$(limits)
  elif [ "${first#error:}" = "$first" ]; then why="stderr does not start with \"error:\""
  elif [ "$lines" -gt 2 ] || { [ "$lines" -eq 2 ] && [ "${second#HINT:}" = "$second" ]; }; then
    why="stderr has $lines lines (want one error line, optionally a HINT line)"
  elif ! grep -qF -- "$T/$name/pytorch_model.bin" "$T/err"; then why="message does not name the file"
  elif ! grep -qF -- "$needle" "$T/err"; then why="message does not name \"$needle\""
  fi
  if [ -z "$why" ]; then
    ok "$(printf '%-22s %4s s %5s MiB  %s' "$name" "$secs" "$rss_mb" "$(cut -c1-160 <"$T/err" | sed -n 1p | sed "s|$T/||")")"
  else
    notok "$name: $why"
    sed -n '1,8s/^/       | /p' "$T/err"
  fi
}

expect_ok() { # expect_ok CASE: loads, and its weights are the fixture's (info's mean |w| line)
  local name=$1 why=""
  run "detect_leaks=1" info --model "$T/$name"
  local want got
  want=$(grep "mean |w|" "$T/want_info" 2>/dev/null)
  got=$(grep "mean |w|" "$T/out")
  if [ "$rc" -ne 0 ]; then why="exit code $rc, want 0"
  elif sanitizer_report; then why="sanitizer report"
  elif [ -n "$(limits)" ]; then why=$(limits)
  elif ! grep -q "12000 in 47 tensors" "$T/out"; then why="stdout does not show 12000 parameters in 47 tensors"
  elif [ -z "$got" ] || [ "$got" != "$want" ]; then why="weights differ from the fixture's: \"$got\", want \"$want\""
  fi
  if [ -z "$why" ]; then
    ok "$(printf '%-22s %4s s %5s MiB  loads: %s' "$name" "$secs" "$rss_mb" "$got")"
  else
    notok "$name: $why"
    sed -n '1,8s/^/       | /p' "$T/err" "$T/out"
  fi
}

ASAN_OPTIONS=detect_leaks=0 "$BIN" info --model tests/fixtures/ds_ckpt/hf_safetensors >"$T/want_info" 2>/dev/null
grep -q "mean |w|" "$T/want_info" || notok "the safetensors twin does not load: $(head -c 200 "$T/want_info")"

# valid files, and what Python reads differently from a first-match reader
expect_ok good_zip
expect_ok good_legacy
expect_ok good_metadata
expect_ok good_zip64
expect_ok dup_tensor_name            # a repeated key: the last value, as torch.load's dict

# time: hashed look-ups
expect_error dict_100k '"k0" is a None, not a tensor'
expect_error dict_1m '"k0" is a None, not a tensor'
expect_error setitem_100k '"k0" is a None, not a tensor'
expect_error dup_key_100k '"same" is a None, not a tensor'
expect_error int_keys_100k "a state-dict key is a int"
expect_error float_keys_100k "a state-dict key is a float"
expect_error tuple_keys_100k "a state-dict key is a tuple"
expect_error tensors_50k 'missing tensor "shared.weight"'
expect_error legacy_50k 'missing tensor "shared.weight"'
expect_error memo_100k_sparse 'missing tensor "shared.weight"'

# the memo
expect_error memo_put_1e28 '"k" is a dict, not a tensor'
expect_error memo_put_2e31m1 '"k" is a dict, not a tensor'
expect_error memo_put_2e32m1 '"k" is a dict, not a tensor'
expect_error memo_get_unset "memo index 2147483647 was never stored"
expect_error memo_binget_unset "memo index 7 was never stored"
expect_error memo_put_empty "LONG_BINPUT (0x72) at byte 2: the stack is empty"
expect_error memo_put_after_mark "BINPUT (0x71) at byte 4: the stack is empty"

# sizes and offsets
expect_error offset_2e62 'storage "'
expect_error offset_2e61 'size in bytes overflows'
expect_error offset_2e60 'holds 6144 bytes'
expect_error numel_max 'size in bytes overflows'
expect_error size_overflow "overflow"
expect_error size3_overflow "overflow"
expect_error stride_reach "reaches element"
expect_error stride_negative "is negative"
expect_error offset_negative "storage_offset -1 is negative"
expect_error offset_one_past "reaches element 1536"
expect_error numel_small "reaches element 1535"
expect_error numel_big "holds 6144 bytes"
expect_error numel_negative "numel -1"
expect_error key_two_dtypes "torch reads one storage per key"
expect_error zip_six_item_pid "6-item persistent id"
expect_error key_5000 "is missing (no entry"
expect_error legacy_count_lies "holds 1537 elements, the pickle says 1536"
expect_error legacy_count_wraps "the pickle says 1536"
expect_error legacy_listed_twice "is listed twice"
expect_error legacy_not_listed "missing from the storage list"
expect_error legacy_view_outside "outside its root storage"

# the zip container
expect_error zip_size_lies "holds 6148 bytes"
expect_error zip_size_past_end "holds 2147483647 bytes"
expect_error zip64_no_extra "no ZIP64 extra field"
expect_error eocd_count_lies "cannot fit"
expect_error eocd_cd_offset_lies "outside the file"
expect_error eocd_zip64_saturated "ZIP64"
expect_error local_extra_lies "runs past the end of the file"
expect_error local_extra_pkl "fails its CRC-32 check"
expect_error zip64_extra_lies "holds 9223372036854775808 bytes"
expect_error zip_dup_entry "two zip entries are named"
expect_error zip_dup_entry_case "two zip entries are named"
expect_error zip_nul_name "NUL byte in its name"
expect_error zip_first_other_folder "a zip without evil/data.pkl"
expect_error zip_first_no_folder "is not in a folder"
expect_error zip_empty "zip"

# opcodes with lengths
expect_error op_BINBYTES8 "opcode BINBYTES8 (0x8e) at byte 3"
expect_error op_LONG4 "opcode LONG4 (0x8b) at byte 3"
expect_error op_BINUNICODE8 "opcode BINUNICODE8 (0x8d) at byte 3"
expect_error op_FRAME "opcode FRAME (0x95) at byte 3"
expect_error op_BINBYTES "opcode BINBYTES (0x42) at byte 3"
expect_error op_BYTEARRAY8 "opcode BYTEARRAY8 (0x96) at byte 3"
expect_error op_LONG "opcode LONG (0x4c) at byte 3"
expect_error op_STRING "opcode STRING (0x53) at byte 3"
expect_error unicode_past_end "runs past the end of the pickle"
expect_error long1_255 "a 255-byte integer"
expect_error global_no_newline "a class name longer than"
expect_error global_nul "a NUL byte in a class name"
expect_error global_dotted 'class name "_utils._rebuild_tensor_v2" is dotted'
expect_error str_nul "a NUL at its byte 13"
expect_error str_bad_utf8 "malformed UTF-8 at its byte 0"

# nesting and the stack
expect_ok rebuild_chain_3
expect_error rebuild_chain_200k "_rebuild_from_type_v2 nested more than"
expect_error tuple_key_deep "a tuple key nested more than 100 deep"
expect_error tuple_key_101 "a tuple key nested more than 100 deep"
expect_error tuple_key_dag "STOP with"
expect_error lists_nested_1m "not a state dict"
expect_error marks_1m "STOP inside an unfinished MARK"
expect_error list_cycle '"shared.weight" is a list, not a tensor'
expect_error key_list "a list is unhashable"
expect_error key_tuple_with_list "a list is unhashable"
expect_error tuple_1m "not a state dict"
expect_error appends_1m "not a state dict"

# what torch would do otherwise
expect_error build_on_tensor "BUILD on a tensor"
expect_error build_twice_list "BUILD on a list"
finish
