#!/usr/bin/env bash
# bench/carry_libs.sh: the shared libraries a train_t5 built here needs on the GPU machine,
# where only some are installed (cJSON, protobuf-c and cairo's chain may be missing).
#   bash bench/carry_libs.sh pack BINARY   (dev machine) copy every library BINARY resolves,
#                                          except glibc's, CUDA's and MPI's, into .carry/libpool
#   bash bench/carry_libs.sh fill BINARY   (GPU machine) copy into .carry/lib only the pooled
#                                          libraries ldd reports "not found" there (repeats for
#                                          their own dependencies), so nothing the machine has is
#                                          shadowed for the Python baselines run beside us
set -eu
mode=$1; bin=$2
case "$mode" in
pack)
    mkdir -p .carry/libpool
    ldd "$bin" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
        case "$name" in libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++*|libgcc_s*|libgomp*|\
            libmpi*|libopen-*|libhwloc*|libevent*|libudev*|libnccl*|libcublas*|libcudart*) continue ;; esac
        cp -L "$path" ".carry/libpool/$name"
    done
    ls .carry/libpool ;;
fill)
    mkdir -p .carry/lib
    export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    for _ in 1 2 3 4 5 6; do
        missing=$(ldd "$bin" | awk '/not found/ {print $1}')
        [ -z "$missing" ] && break
        for m in $missing; do
            [ -e ".carry/libpool/$m" ] || { echo "carry_libs: $m is missing and not in .carry/libpool"; exit 1; }
            cp ".carry/libpool/$m" .carry/lib/
        done
    done
    echo "carry_libs: carried $(ls .carry/lib | tr '\n' ' ')" ;;
*) echo "usage: $0 pack|fill BINARY"; exit 2 ;;
esac
