#!/usr/bin/env python3
"""bench/make_random_init.py: one random T5 init saved as an HF directory (with spiece.model), the
shared starting point of issue 21's HF and train_t5 runs (no pretrained weights can be downloaded).

    python3 bench/make_random_init.py OUT_DIR [t5-small|t5-base|t5-large|t5-3b|tiny]

torch.manual_seed(0), T5Config with the preset's sizes, dropout 0.1, ReLU (T5 1.0), the special ids
set explicitly (pad 0, eos 1, decoder start 0).
"""
import shutil
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration

PRESETS = {"t5-small": dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
           "t5-base": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12),
           "t5-large": dict(d_model=1024, d_kv=64, d_ff=4096, num_layers=24, num_heads=16),
           "t5-3b": dict(d_model=1024, d_kv=128, d_ff=16384, num_layers=24, num_heads=32),
           "tiny": dict(d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=2)}  # CPU plumbing checks


def config(preset):
    """The T5Config of a preset (T5 1.0: ReLU, tied and scaled head; the special ids explicit)."""
    return T5Config(vocab_size=32128, **PRESETS[preset], dropout_rate=0.1, feed_forward_proj="relu",
                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)

if __name__ == "__main__":
    out, preset = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "t5-small"
    if preset not in PRESETS:
        sys.exit(f"make_random_init.py: unknown preset {preset!r}; one of {', '.join(PRESETS)}")
    torch.manual_seed(0)
    T5ForConditionalGeneration(config(preset)).save_pretrained(out)
    shutil.copy("data/sample/spiece.model", out + "/spiece.model")
