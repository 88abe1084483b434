// trainer/trainer.h: `train_t5 --model ... --do_train ...`: the Hugging Face Trainer
// loop in C. Reads text or prepared datasets, tokenizes with the model's SentencePiece
// model, trains with HF's step / epoch / logging semantics, evaluates the loss, and
// writes what HF writes into --output_dir: trainer_state.json (log_history),
// train_results.json, eval_results.json, all_results.json, the final model
// (config.json, model.safetensors, spiece.model) and checkpoint-N directories.
// Every file is written to a temporary name and renamed: nothing is half-written.
#pragma once

int trainer_main(int argc, char **argv, int start);
