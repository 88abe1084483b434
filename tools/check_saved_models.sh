#!/usr/bin/env bash
# tools/check_saved_models.sh: models SAVED BY train_t5 load in transformers and give the
# same loss. For each fixture variant: train_t5 overfit (5 AdamW steps, so the weights
# differ from the fixture's) saves an HF directory; train_t5 loss and
# tools/check_hf_load.py (transformers' from_pretrained) compute the loss of the fixture
# batch on it; the two must agree to 1e-5 relative. Also a bf16 save via convert.
# Needs python3 with torch + transformers (the GPU machine, or pip-installed ones).
#   usage: tools/check_saved_models.sh [TRAIN_T5_BINARY] [WORK_DIR]
set -u
BIN=${1:-./train_t5}
W=${2:-$(mktemp -d)}
mkdir -p "$W"
fail=0
printf '%-14s %-6s %-16s %-16s %-16s %-16s %s\n' variant dtype train_t5_loss hf_loss train_t5_smooth hf_smooth verdict
for v in relu_tied gated_noscale untied; do
  F=tests/fixtures/$v
  "$BIN" overfit --model "$F" --batch "$F/reference.safetensors" --steps 5 --learning_rate 1e-2 \
    --lr_scheduler_type constant --weight_decay 0.01 --output_dir "$W/$v" >"$W/$v.train.log" 2>&1 || { echo "overfit failed: $(tail -1 "$W/$v.train.log")"; fail=1; continue; }
  "$BIN" convert --model "$W/$v" --dtype bf16 --output_dir "$W/$v-bf16" >/dev/null 2>&1 || { echo "convert failed"; fail=1; continue; }
  for d in f32 bf16; do
    M="$W/$v"; [ "$d" = bf16 ] && M="$W/$v-bf16"
    ours=$("$BIN" loss --model "$M" --batch "$F/reference.safetensors" --label_smoothing 0.1) || { fail=1; continue; }
    hf=$(python3 tools/check_hf_load.py "$M" "$F" --label-smoothing 0.1 2>"$W/$v.$d.hf.err") || { echo "check_hf_load failed: $(tail -2 "$W/$v.$d.hf.err")"; fail=1; continue; }
    read -r _ l1 _ s1 _ <<<"$ours"
    read -r _ l2 _ s2 <<<"$hf"
    verdict=$(python3 -c "import sys; a,b,c,d=map(float,sys.argv[1:]); r=max(abs(a-b)/abs(b),abs(c-d)/abs(d)); print(('OK' if r<=1e-5 else 'NOT OK')+' rel %.1e'%r)" "$l1" "$l2" "$s1" "$s2")
    case $verdict in OK*) ;; *) fail=1;; esac
    printf '%-14s %-6s %-16s %-16s %-16s %-16s %s\n' "$v" "$d" "$l1" "$l2" "$s1" "$s2" "$verdict"
  done
done
exit $fail
