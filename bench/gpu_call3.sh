#!/usr/bin/env bash
# bench/gpu_call3.sh: after the fp16 overflow guard landed: the model GPU test (with the
# clamp checks) and the fp16 throughput at B=64, to show the guard's cost.
set -u; export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}; S=$OUT/session.log
timeout 100 build/tests-gpu/test_cuda_model > $OUT/test_cuda_model.log 2>&1; echo "test_cuda_model rc=$?" >> $S
grep -E "NOT OK|passed|clamp" $OUT/test_cuda_model.log >> $S
for p in fp16 bf16; do timeout 100 ./train_t5 bench --model t5-large --batch 64 --$p --steps 20 --warmup 5 >> $OUT/bench.log 2>&1; grep -E "RESULT|error" $OUT/bench.log | tail -1 >> $S; done
cat $S
