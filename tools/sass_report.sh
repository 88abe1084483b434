#!/usr/bin/env bash
# tools/sass_report.sh: what nvcc made of a CUDA file's kernels, read without a GPU: for each
# kernel (optionally only those whose mangled name contains FILTER) its registers and spill
# bytes (ptxas -v), its SASS instruction count, branch regions (BSSY: a branch the warp may
# diverge at, and a point the compiler does not schedule across) and its tensor-core, special-
# function and global-memory instructions. docs/CUDA.md "Issue 38, fifth part" read the flash
# kernels this way: a branch region around each expf had serialized the exp chains.
# Needs nvcc and cuobjdump (the CUDA toolkit's, or `pip install nvidia-cuda-cuobjdump`).
#   usage: tools/sass_report.sh kernels/cuda/attention_flash.cu [ARCH=90] [FILTER]
set -eu
src=${1:?usage: tools/sass_report.sh FILE.cu [ARCH] [FILTER]}
arch=${2:-90}
filter=${3:-}
[ -f "$src" ] || { echo "error: $src: no such file"; exit 2; }
command -v nvcc >/dev/null || { echo "error: nvcc not found; HINT: install the CUDA toolkit (make deps does not)"; exit 2; }
objdump=$(command -v cuobjdump || true)
[ -n "$objdump" ] || objdump=$(ls "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump" 2>/dev/null || true)
[ -n "$objdump" ] || objdump=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "bin", "cuobjdump"))' 2>/dev/null || true)
[ -x "$objdump" ] || { echo "error: cuobjdump not found; HINT: pip install nvidia-cuda-cuobjdump"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=$(mpicc --showme:compile 2>/dev/null || true)
nvcc -O3 -std=c++17 -arch=sm_"$arch" --expt-relaxed-constexpr -cubin -Xptxas -v -I"${CUDA_HOME:-/usr/local/cuda}/include" \
    $mpi "$src" -o "$tmp/k.cubin" 2>"$tmp/ptxas.txt" || { cat "$tmp/ptxas.txt"; exit 1; }
"$objdump" -sass "$tmp/k.cubin" >"$tmp/k.sass"
# ptxas: "Compiling entry function 'NAME'", then "N bytes spill stores", "Used R registers"
awk '/Compiling entry function/ {gsub(/[\047]/, "", $7); name = $7}
     /bytes spill stores/ {spill[name] = $5}
     /Used [0-9]+ registers/ {for (i = 1; i <= NF; i++) if ($i == "Used") regs[name] = $(i + 1)}
     END {for (n in regs) print n, regs[n], spill[n] + 0}' "$tmp/ptxas.txt" >"$tmp/res.txt"
printf '%-8s %-6s %-6s %-6s %-6s %-6s %-6s %s\n' instr regs spill BSSY HMMA MUFU LDG/STG kernel
awk -v filter="$filter" '
  FNR == NR {regs[$1] = $2; spill[$1] = $3; next}
  /Function : / {flush(); name = $3; n = bssy = hmma = mufu = mem = 0; next}
  /^[ \t]+\/\*[0-9a-f]+\*\// {n++; if (/BSSY/) bssy++; if (/HMMA/) hmma++; if (/MUFU/) mufu++; if (/ (LDG|STG)/) mem++}
  function flush() {
    if (name != "" && (filter == "" || index(name, filter)))
      printf "%-8d %-6s %-6s %-6d %-6d %-6d %-6d %s\n", n, regs[name], spill[name], bssy, hmma, mufu, mem, name
  }
  END {flush()}' "$tmp/res.txt" "$tmp/k.sass"
