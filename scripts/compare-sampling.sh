#!/usr/bin/env bash
# Usage: scripts/compare-sampling.sh ROWLM DEVICE_A DEVICE_B
# Runs rowlm generate on the bundled model on two devices with f32 matmuls
# (under which every backend computes the CPU's logits bit for bit) and
# checks that tokens, text, logprobs and alternatives are the same: the
# samplers of the two devices (a GPU's sample_rows, the host's Sampler)
# make the same choices. Cases: sampling with top-k, top-p and a repetition
# penalty, with logprobs; greedy with logprobs; a JSON Schema at T 0.9.
set -euo pipefail
cd "$(dirname "$0")/.."
rowlm=$1; a=$2; b=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '%s' '{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}' \
  > "$dir/schema.json"
cases=(
  "sampled|In the beginning|--max-tokens 24 --temperature 0.8 --seed 3 --top-k 50 --top-p 0.9 --repetition-penalty 1.2 --logprobs 3"
  "greedy|In the beginning|--max-tokens 16 --temperature 0 --logprobs 2"
  "schema|A person:|--max-tokens 40 --temperature 0.9 --seed 2 --json-schema $dir/schema.json"
)
status=0
for c in "${cases[@]}"; do
  IFS='|' read -r name prompt flags <<<"$c"
  for d in "$a" "$b"; do
    # shellcheck disable=SC2086
    "$rowlm" generate models/rowlm-tiny "$prompt" $flags --json --matmul-precision f32 --device "$d" \
      > "$dir/$name.$d.json" 2>/dev/null
  done
  if python3 - "$dir/$name.$a.json" "$dir/$name.$b.json" <<'PY'
import json, sys
x, y = (json.load(open(p)) for p in sys.argv[1:3])
for r in (x, y):
    r.pop("timings", None)
sys.exit(0 if x == y and x.get("token_ids") else 1)
PY
  then
    echo "sampling, $name: $a and $b chose the same tokens (and logprobs)" >&2
  else
    echo "sampling, $name: $a and $b differ" >&2
    status=1
  fi
done
exit $status
