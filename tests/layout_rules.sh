#!/usr/bin/env bash
# tests/layout_rules.sh: the house rules of docs/DESIGN.md ("Rooms and floors"), checked on the
# source tree:
#  - includes run down the floors: a file of one room includes another room's header only
#    when that room sits on a lower floor (so no circle between rooms can form); a folder
#    that is in no floor is an error (a new room is placed in the table below and in DESIGN.md);
#  - no source file over 800 lines (.c .h .cu .cuh .cc);
#  - the T5_* environment variables are read in one file, common/t5_env.c: no other
#    non-test source names one in getenv/setenv;
#  - README.md at most 200 lines.
# Each rule is also run on a planted violation in a scratch tree, which it must report (a
# check that cannot fail is no check). tests/ itself is outside the rules (a test includes
# whatever it tests). Prints OK / NOT OK and "N passed, M failed"; exits non-zero on a failure.
set -u
cd "$(dirname "$0")/.." || exit 2
python3 - <<'EOF'
import os, re, shutil, sys, tempfile

# The floors, lowest first (docs/DESIGN.md "Rooms and floors"). A room includes only rooms
# of lower floors. "main" is train_t5.c at the root.
FLOORS = [
    ["common"],
    ["kernels", "plot", "eval", "formats"],
    ["model", "comm"],
    ["optim", "data"],
    ["zero"],
    ["deepspeed"],
    ["trainer"],
    ["cmd", "bench", "tools"],
    ["main"],
]
SKIP = ("build", ".git", ".carry", "out", "tests", "configs", "docs", "data/sample", ".whl", ".ci")
SRC = (".c", ".h", ".cu", ".cuh", ".cc")
MAX_LINES = 800
passed = failed = 0

def check(ok, what):
    global passed, failed
    print(("OK     " if ok else "NOT OK ") + what)
    if ok: passed += 1
    else: failed += 1

def floor_of(room):
    for i, rooms in enumerate(FLOORS):
        if room in rooms: return i
    return None

def sources(root):
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs if not os.path.normpath(os.path.join(rel, x)).startswith(SKIP)
                   and not x.startswith("build")]
        for f in files:
            if f.endswith(SRC): yield os.path.normpath(os.path.join(rel, f))

def room_of(path):
    return path.split("/")[0] if "/" in path else "main"

def include_violations(root):
    bad = []
    for p in sources(root):
        room = room_of(p)
        if floor_of(room) is None:
            bad.append(f"{p}: room {room}/ is on no floor (add it to FLOORS and docs/DESIGN.md)")
            continue
        text = open(os.path.join(root, p), errors="replace").read()
        for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            t = os.path.normpath(os.path.join(os.path.dirname(p), m.group(1)))
            if not os.path.exists(os.path.join(root, t)):
                continue  # generated headers (build/gen) and system-style quotes
            troom = room_of(t)
            if troom == room: continue
            ft = floor_of(troom)
            if ft is None or ft >= floor_of(room):
                bad.append(f"{p} includes {t}: {room}/ (floor {floor_of(room)}) may include only lower floors, "
                           f"{troom}/ is on {ft}")
    return bad

def long_files(root):
    bad = []
    for p in sources(root):
        n = sum(1 for _ in open(os.path.join(root, p), errors="replace"))
        if n > MAX_LINES: bad.append(f"{p}: {n} lines (at most {MAX_LINES}: split it along a concern)")
    return bad

ENV_RE = re.compile(r'\b(getenv|setenv|unsetenv|putenv)\s*\(\s*"T5_')
def env_readers(root):
    return [p for p in sources(root) if p != "common/t5_env.c"
            and ENV_RE.search(open(os.path.join(root, p), errors="replace").read())]

def readme_lines(root):
    return sum(1 for _ in open(os.path.join(root, "README.md")))

# ---- the tree as it is --------------------------------------------------------------------
v = include_violations(".")
check(not v, "includes run down the floors" + "".join("\n       " + x for x in v[:20]))
v = long_files(".")
check(not v, f"no source file over {MAX_LINES} lines" + "".join("\n       " + x for x in v))
v = env_readers(".")
check(not v, "T5_* variables read only in common/t5_env.c" + "".join("\n       " + x for x in v))
n = readme_lines(".")
check(n <= 200, f"README.md at most 200 lines ({n})")

# ---- each rule reports a planted violation -------------------------------------------------
tmp = tempfile.mkdtemp()
try:
    def plant(path, text):
        full = os.path.join(tmp, path)
        os.makedirs(os.path.dirname(full) or tmp, exist_ok=True)
        open(full, "w").write(text)
    plant("common/a.h", "#pragma once\n")
    plant("zero/z.h", '#include "../common/a.h"\n')
    plant("comm/d.h", '#include "../zero/z.h"\n')     # up a floor
    plant("model/m.c", '#include "../comm/d.h"\n')   # same floor, another room
    plant("newroom/x.c", '#include "../common/a.h"\n')
    plant("trainer/big.c", "int x;\n" * (MAX_LINES + 1))
    plant("zero/env.c", 'const char *v = getenv("T5_ANY");\n')
    plant("README.md", "line\n" * 201)
    v = include_violations(tmp)
    check(any("comm/d.h includes zero/z.h" in x for x in v), "planted: an include up a floor is reported")
    check(any("model/m.c includes comm/d.h" in x for x in v), "planted: an include across one floor is reported")
    check(any("room newroom/ is on no floor" in x for x in v), "planted: a room on no floor is reported")
    check(not any(x.startswith("zero/z.h ") for x in v), "planted: an include down the floors passes")
    check(long_files(tmp) == ["trainer/big.c: 801 lines (at most 800: split it along a concern)"],
          "planted: an 801-line file is reported")
    check(env_readers(tmp) == ["zero/env.c"], "planted: getenv(\"T5_...\") outside common/t5_env.c is reported")
    check(readme_lines(tmp) == 201, "planted: a 201-line README is counted")
finally:
    shutil.rmtree(tmp)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
