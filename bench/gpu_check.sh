#!/usr/bin/env bash
# bench/gpu_check.sh: a short re-check on the GPU machine after changes: the CUDA model test, the
# memory plan refusing t5-3b without offload under a 24 GiB cap (with the offload hint), and
# t5-large 10 steps at stage 3 and at stage 2 with the optimizer offloaded.
#   usage (repo root, GPU machine): bash bench/gpu_check.sh
export LD_LIBRARY_PATH=$PWD/.carry/lib; C="--init random --seed 42 --device cuda --bf16 --tokenizer_name data/sample/spiece.model --data_dir data/sample --task translation_en_to_ro --max_source_length 128 --max_target_length 128 --logging_steps 5 --do_train --cache_dir /tmp/c --save_strategy no"
T5_TEST_NO_PERF=1 timeout 100 build/tests-gpu/test_cuda_model 2>&1 | tail -1
python3 -c "import json;c=json.load(open('configs/ds_config_zero2_offload.json'));del c['zero_optimization']['offload_optimizer'];json.dump(c,open('/tmp/z2.json','w'))"
timeout 60 ./train_t5 $C --model t5-3b --per_device_train_batch_size 64 --max_steps 2 --max_gpu_memory 24 --gradient_checkpointing --deepspeed /tmp/z2.json --output_dir /tmp/o1 2>&1 | grep -E "error|HINT" | cut -c1-400
for cfg in configs/ds_config_zero3.json configs/ds_config_zero2_offload.json; do timeout 200 ./train_t5 $C --model t5-large --per_device_train_batch_size 16 --max_steps 10 --deepspeed $cfg --output_dir /tmp/o_$(basename $cfg) 2>&1 | grep -E "^ZeRO|error|train_loss|train_samples_per|peak" | cut -c1-200; done
