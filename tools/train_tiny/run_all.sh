#!/usr/bin/env bash
# The whole pipeline after the corpus: tokenizer, draft model, target model, evaluation, with
# the step counts of the bundled models (1191 draft steps, 855 target steps: about 36 s and
# 64 s on one H200). Usage: tools/train_tiny/run_all.sh CORPUS_DIR OUT_DIR
# Writes OUT_DIR/tokenizer, OUT_DIR/models/{rowlm-tiny,rowlm-tiny-draft}, OUT_DIR/fixtures/tiny.
set -euo pipefail
corpus=$1 out=$2
here=$(dirname "$0")
export PYTHONUNBUFFERED=1
python3 "$here/train_tokenizer.py" --corpus "$corpus" --out "$out/tokenizer"
python3 "$here/train_model.py" --config draft --corpus "$corpus" --tokenizer "$out/tokenizer" \
  --out "$out/models/rowlm-tiny-draft" --steps 1191 --batch 64 --lr 3e-3
python3 "$here/train_model.py" --config target --corpus "$corpus" --tokenizer "$out/tokenizer" \
  --out "$out/models/rowlm-tiny" --steps 855 --batch 64 --lr 2e-3
python3 "$here/evaluate.py" --corpus "$corpus" --target "$out/models/rowlm-tiny" \
  --draft "$out/models/rowlm-tiny-draft" --fixtures "$out/fixtures/tiny"
