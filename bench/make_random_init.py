#!/usr/bin/env python3
"""bench/make_random_init.py: one random T5 init saved as an HF directory (with spiece.model), the
shared starting point of the HF and train_t5 runs of issues 20 and 21 (no pretrained weights can be
downloaded).

    python3 bench/make_random_init.py OUT_DIR [t5-small|t5-base|t5-large|t5-3b|t5-11b|tiny]

torch.manual_seed(0), then bench/hf_baseline.py's preset config (T5 1.0: ReLU, tied scaled head,
dropout 0.1, the special ids set explicitly).
"""
import os
import shutil
import sys

import torch
from transformers import T5ForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_baseline import PRESETS, make_config  # noqa: E402

if __name__ == "__main__":
    out, preset = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "t5-small"
    if preset not in PRESETS:
        sys.exit(f"make_random_init.py: unknown preset {preset!r}; one of {', '.join(PRESETS)}")
    torch.manual_seed(0)
    T5ForConditionalGeneration(make_config(preset)).save_pretrained(out)
    shutil.copy("data/sample/spiece.model", out + "/spiece.model")
