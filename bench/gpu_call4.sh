#!/usr/bin/env bash
# bench/gpu_call4.sh: torch.compile measured in the same call as train_t5 (t5-large bf16 B=64),
# and the 500-example 4-beam evaluation after threading the host-side log-softmax.
set -u; export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}; S=$OUT/session.log
timeout 100 ./train_t5 bench --model t5-large --batch 64 --bf16 --steps 20 --warmup 5 >> $OUT/bench.log 2>&1
grep -E "RESULT|error" $OUT/bench.log | tail -1 >> $S
timeout 330 python3 bench/hf_baseline.py --model t5-large --precision bf16 --batch 64 --compile --steps 15 --warmup 5 --max-grad-norm 1 >> $OUT/bench.log 2>&1
echo "hf compile rc=$?" >> $S; grep -E "RESULT|Error" $OUT/bench.log | tail -1 >> $S
timeout 100 ./train_t5 --model data/sample/t5-demo --init random --device cuda --bf16 --tokenizer_name data/sample/spiece.model --data_dir data/sample --task translation_en_to_ro --max_source_length 128 --max_target_length 128 --per_device_train_batch_size 64 --learning_rate 2e-3 --warmup_steps 30 --max_steps 400 --logging_steps 100 --do_train --do_eval --n_val 500 --predict_with_generate --generation_num_beams 4 --per_device_eval_batch_size 64 --output_dir /tmp/gpu_run --cache_dir /tmp/cache > $OUT/gpu_eval.log 2>&1
echo "gpu eval rc=$?" >> $S; grep -E "eval_" $OUT/gpu_eval.log >> $S
cat $S
