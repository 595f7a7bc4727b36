#!/usr/bin/env bash
# Decode at a long context with each KV codec (issue 13: q8 and q4 KV at 32k
# tokens at least as fast as bf16), one `rowlm bench` per codec, one JSON
# line each on stdout.
#   tools/device/kv_codecs_long.sh [CONTEXT] [BATCHES] [CODECS...]
# defaults: 32768, "1,8", bf16 q8 q4. Needs build-cuda/rowlm.
set -euo pipefail
cd "$(dirname "$0")/../.."
context=${1:-32768}
batches=${2:-1,8}
shift $(( $# > 2 ? 2 : $# ))
codecs=("$@")
[ ${#codecs[@]} -eq 0 ] && codecs=(bf16 q8 q4)
for codec in "${codecs[@]}"; do
  build-cuda/rowlm bench --device cuda --shape e2b --layers 35 --batch "$batches" --context "$context" \
    --decode-steps 8 --prefill 16 --kv-codec "$codec" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"kv_codec": d["kv_codec"], "context": '"$context"', "decode": [{k: x[k] for k in ("batch","tokens_per_s","step_seconds")} for x in d["decode"]]}))'
done
