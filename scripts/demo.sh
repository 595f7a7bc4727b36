#!/usr/bin/env bash
# The main job: set-up (packages if missing, Release build), then rowlm
# generates text with the bundled model. Extra arguments go to generate.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
prompt="And the king said unto"
if [ $# -gt 0 ]; then prompt=$1; shift; fi
echo "== build/rowlm generate models/rowlm-tiny \"$prompt\" --max-tokens 64 --temperature 0.8 --seed 1 $*" >&2
build/rowlm generate models/rowlm-tiny "$prompt" --max-tokens 64 --temperature 0.8 --seed 1 "$@"
