// formats/hf_cache.h: a model name found in the Hugging Face hub cache, as from_pretrained finds it.
// `--model t5-large` (or google-t5/t5-large) on a machine where transformers has downloaded it
// resolves to the cached snapshot directory: $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; in it
// models--{org}--{name}/snapshots/{refs/main}. Nothing is downloaded (train_t5 never goes to
// the network): a name not in the cache stays a name (a preset, with --init random).
#pragma once

// The snapshot directory of `name` (malloc'd; it holds config.json), or NULL when `name` is a
// path that exists, has no '/'-free hub form, or is not cached.
char *hf_cache_find(const char *name);
