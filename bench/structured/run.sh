#!/usr/bin/env bash
# Structured outputs' cost: decode tokens/s of the bundled model with and
# without a JSON schema at 1 and 16 concurrent requests (temperature 1,
# 256 tokens each, runs in ABBA order so that drifting machine load falls
# on both alike), then the token masks' own cost on each tokenizer given.
#
#   bench/structured/run.sh BUILD_DIR [ROUNDS] [TOKENIZER...]
#
# BUILD_DIR holds rowlm and bench/constrain_bench (-DROWLM_BENCH=ON).
# Prints one line per run, then the mean of each side and their ratio.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
build="$1"
rounds="${2:-3}"
shift $(( $# >= 2 ? 2 : 1 ))
for c in 1 16; do
  plain=() schema=()
  for ((i = 0; i < rounds; i++)); do
    for side in plain schema schema plain; do
      flags=()
      [ "$side" = schema ] && flags=(--json-schema "$here/list.json")
      tps="$("$build/rowlm" bench --concurrency "$c" --model "$root/models/rowlm-tiny" --gen-tokens 256 \
               --temperature 1 --device cpu "${flags[@]}" 2>/dev/null |
             python3 -c 'import json, sys; print(json.load(sys.stdin)["runs"][0]["aggregate_tokens_per_s"])')"
      echo "concurrency $c $side: $tps tokens/s"
      if [ "$side" = plain ]; then plain+=("$tps"); else schema+=("$tps"); fi
    done
  done
  python3 -c '
import sys
c, n = sys.argv[1], int(sys.argv[2])
p = [float(x) for x in sys.argv[3:3 + n]]
s = [float(x) for x in sys.argv[3 + n:]]
mp, ms = sum(p) / len(p), sum(s) / len(s)
print(f"concurrency {c}: plain {mp:.1f} tokens/s ({min(p):.1f}-{max(p):.1f}), schema {ms:.1f} ({min(s):.1f}-{max(s):.1f}), ratio {ms / mp:.3f}")
' "$c" "${#plain[@]}" "${plain[@]}" "${schema[@]}"
done
for tok in "$root/models/rowlm-tiny" "$@"; do
  echo "masks, $tok:"
  "$build/bench/constrain_bench" "$tok" "$here/person.json" "$here/person.txt"
done
