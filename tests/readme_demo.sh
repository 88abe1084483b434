#!/usr/bin/env bash
# tests/readme_demo.sh: README's demo block is what `make demo` prints. Runs the demo's flags
# (`make -s demo-flags`) with ./train_t5 into a scratch directory and checks that every line of
# README's block (the fenced block after "make demo" that starts with the NOTICE line) appears in
# the output, in order: exactly, except the figures that depend on the machine's speed
# (train_runtime, *_per_second, eval_runtime, the "eval time" line), whose numbers are masked.
# The CPU build is bit-reproducible (-std=c11: no contraction, no reassociation), so every
# loss, grad_norm, learning rate and metric must match to the printed digit.
# Prints OK / NOT OK and "N passed, M failed"; exits non-zero on a failure.
set -u
cd "$(dirname "$0")/.." || exit 2
BIN=${TRAIN_T5:-./train_t5}
T=$(mktemp -d /tmp/t5_readme_demo_XXXXXX); trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "OK     $*"; pass=$((pass + 1)); }
bad() { echo "NOT OK $*"; fail=$((fail + 1)); }

awk '/^```$/ && inblock {exit} inblock {print} /^NOTICE: data\/sample\/t5-demo/ && !inblock {inblock=1; print}' README.md \
    > "$T/readme.txt"
[ -s "$T/readme.txt" ] || { bad "README.md: the demo block (starting with the NOTICE line) was not found"; echo "$pass passed, $fail failed"; exit 1; }
flags=$(make -s --no-print-directory demo-flags) || { bad "make demo-flags failed"; echo "$pass passed, $fail failed"; exit 1; }
flags=${flags/--output_dir out\/demo/--output_dir $T/demo}
start=$(date +%s)
# shellcheck disable=SC2086
"$BIN" $flags --cache_dir "$T/cache" > "$T/run.txt" 2>&1; rc=$?
[ $rc -eq 0 ] && ok "the demo's flags run: exit 0 ($(( $(date +%s) - start )) s)" || bad "the demo's flags: exit $rc: $(tail -n 2 "$T/run.txt")"

python3 - "$T/readme.txt" "$T/run.txt" <<'PY'
import re, sys
readme = [l.rstrip("\n") for l in open(sys.argv[1])]
run = [l.rstrip("\n") for l in open(sys.argv[2])]
TIMED = ("train_runtime", "samples_per_second", "steps_per_second", "eval_runtime", "eval time (rank 0")
num = re.compile(r"[0-9][0-9:.eE+-]*")
def key(line):
    # the speed-dependent figures masked, everything else as printed
    if not any(t in line for t in TIMED):
        return line
    if line.startswith("{'train_runtime'"):  # the dict line: keep train_loss and epoch only
        return "{train dict} " + " ".join(re.findall(r"'(?:train_loss|epoch)': '[^']*'", line))
    return re.sub(r"\s+", " ", num.sub("#", line))  # the column padding follows the figure's width
want, got = [key(l) for l in readme], [key(l) for l in run]
at, missing = 0, []
for i, w in enumerate(want):
    j = at
    while j < len(got) and got[j] != w:
        j += 1
    if j == len(got):
        missing.append(readme[i])
    else:
        at = j + 1
print(f"{len(want) - len(missing)} of {len(want)} README lines found in order")
for m in missing[:8]:
    print("  missing:", m)
sys.exit(1 if missing else 0)
PY
if [ $? -eq 0 ]; then ok "README's demo block: every line is what the demo prints (timings masked)"
else bad "README's demo block differs from what the demo prints (lines above); HINT: run make demo and copy its output into README.md"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
