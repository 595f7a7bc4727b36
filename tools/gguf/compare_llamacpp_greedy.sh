#!/usr/bin/env bash
# rowlm's greedy continuations against llama.cpp's own on the same GGUF files: llama.cpp is
# node-llama-cpp@3.21.1's prebuilt CPU build (llama.cpp v0.4.0), installed into
# tests/.cache/node-llama-cpp on first use (a test asset; rowlm itself uses none of it).
# Prints one line per file and prompt; exits 1 if any continuation differs.
#   tools/gguf/compare_llamacpp_greedy.sh [build/rowlm] [N]
# ROWLM_FLAGS adds flags to rowlm's command (e.g. "--matmul-precision int8",
# llama.cpp's own way of multiplying quantized weights).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rowlm="${1:-$root/build/rowlm}"
n="${2:-24}"
read -r -a flags <<<"${ROWLM_FLAGS:-}"
cache="$root/tests/.cache/node-llama-cpp"
if [ ! -d "$cache/node_modules/node-llama-cpp" ]; then
  mkdir -p "$cache"
  (cd "$cache" && npm init -y >/dev/null && npm install --no-audit --no-fund node-llama-cpp@3.21.1 >/dev/null)
fi
cp "$root/tools/gguf/llamacpp_greedy.mjs" "$cache/"
status=0
shopt -s nullglob
files=("$root"/tests/fixtures/gguf/qwen3_*.gguf "$root"/tests/fixtures/gguf/llamacpp/*/model.gguf)
for f in "${files[@]}"; do
  for ids in 174,91,255,211,130,127 5,17,9,200,33,101,7 100,3,250,64; do
    theirs=$(node "$cache/llamacpp_greedy.mjs" "$f" "$ids" "$n" 2>/dev/null |
             python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
    ours=$("$rowlm" generate "$f" --ids "$ids" --max-tokens "$n" --ignore-eos --json --device cpu "${flags[@]}" 2>/dev/null |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["token_ids"])')
    if [ "$theirs" = "$ours" ]; then verdict=equal; else verdict=DIFFERENT; status=1; fi
    echo "$verdict  ${f#$root/}  prompt $ids  llama.cpp $theirs  rowlm $ours"
  done
done
exit $status
