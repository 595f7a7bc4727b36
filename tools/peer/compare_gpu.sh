#!/usr/bin/env bash
# rowlm against llama.cpp's CUDA backend on the same GPU and the same random
# checkpoints (issue 13): one JSON with both sides and the ratios.
#
# On the development machine first: tools/peer/pack_llamacpp.sh, then send
# .device-llama/llama.cpp-cuda.txz and .device with the project (carry). On
# the accelerator machine, from the project root, in stages that each fit a
# device call (the work directory keeps what each stage made; a stage whose
# output exists is skipped):
#
#   source .device/bootstrap.sh && tools/peer/compare_gpu.sh build     # llama.cpp (CUDA, sm_90) and rowlm: ~5 min
#   tools/peer/compare_gpu.sh models e2b    # random checkpoint (Gemma 3 tokenizer), llama.cpp's GGUF of it
#   tools/peer/compare_gpu.sh models e4b
#   tools/peer/compare_gpu.sh run e2b       # llama-bench, llama-batched-bench, rowlm bench: JSON on stdout
#   tools/peer/compare_gpu.sh run e4b
#
# The checkpoints: tools/measure/make_random_checkpoint.py at the released
# sizes' geometry (all 35 / 42 layers), bf16, with Gemma 3's tokenizer and
# its 262,145-id vocabulary; llama.cpp's convert_hf_to_gguf.py writes the
# bf16 GGUF both engines then read (the safetensors are deleted: the disk
# holds about two of these models). What runs, all with the whole model on
# the GPU:
#   llama.cpp  llama-bench -fa on -p 512 -n 128 (prefill pp512, decode tg128)
#              llama-batched-bench -fa on -npp 128 -ntg 128 -npl 1,8,32,64,128,256
#   rowlm      rowlm bench --device cuda --shape S --layers N --prefill 512
#                --batch 1,8,32,64,128,256 --context 128 (the forward alone,
#                with the bandwidth and tensor-core ceilings of the same run)
#              rowlm bench --device cuda --model GGUF --concurrency 1,8,32,64
#                --prompt-tokens 128 --gen-tokens 128 (the engine: batching,
#                sampling, the same file llama.cpp reads)
# Environment: PEER_WORK (default /root/peer), PEER_PYTHON (default
# /opt/torch/.venv/bin/python: torch and transformers for the converter).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${PEER_WORK:-/root/peer}"
python="${PEER_PYTHON:-/opt/torch/.venv/bin/python}"
llama="$work/llama.cpp"
stage="${1:-}"
shape="${2:-}"
mkdir -p "$work"

layers_of() {
  case "$1" in e2b) echo 35 ;; e4b) echo 42 ;; *) echo "compare_gpu.sh: shape must be e2b or e4b, got '$1'" >&2; exit 2 ;; esac
}

build() {
  if [ ! -d "$llama" ]; then
    tar -C "$work" -xJf "$root/.device-llama/llama.cpp-cuda.txz"
  fi
  if [ ! -x "$llama/build/bin/llama-batched-bench" ]; then
    cmake -S "$llama" -B "$llama/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
          -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
          -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
          -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" >/dev/null
    cmake --build "$llama/build" -j "$(nproc)" --target llama-bench llama-batched-bench >/dev/null
  fi
  if [ ! -x "$root/build-cuda/rowlm" ]; then
    # shellcheck disable=SC2086  # the recipe's arguments are meant to split
    cmake -S "$root" -B "$root/build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DROWLM_CUDA=ON \
          -DCMAKE_CUDA_ARCHITECTURES=90 ${ROWLM_DEVICE_CMAKE_ARGS:-} >/dev/null
    cmake --build "$root/build-cuda" -j "$(nproc)" --target rowlm >/dev/null
  fi
  echo "compare_gpu.sh: built $llama/build/bin/{llama-bench,llama-batched-bench} and $root/build-cuda/rowlm" >&2
}


models() {
  local s="$1" n dir gguf
  n="$(layers_of "$s")"
  dir="$work/$s-hf"
  gguf="$work/$s-bf16.gguf"
  [ -f "$gguf" ] && { echo "compare_gpu.sh: $gguf exists" >&2; return; }
  "$python" "$root/tools/measure/make_random_checkpoint.py" --shape "$s" --layers "$n" --out "$dir" \
    --tokenizer "$llama/tokenizer/gemma3" >/dev/null
  "$python" "$root/tools/gguf/bundle_convert.py" "$llama" -- "$dir" --outtype bf16 --outfile "$gguf.part" \
    >/dev/null 2>"$work/$s-convert.log" ||
    { tail -20 "$work/$s-convert.log" >&2; exit 1; }
  mv "$gguf.part" "$gguf"
  rm -rf "$dir"
  echo "compare_gpu.sh: $gguf ($(du -h "$gguf" | cut -f1))" >&2
}

run() {
  local s="$1" n gguf out
  n="$(layers_of "$s")"
  gguf="$work/$s-bf16.gguf"
  [ -f "$gguf" ] || { echo "compare_gpu.sh: no $gguf: run the models stage first" >&2; exit 1; }
  out="$work/$s-results"
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader >"$out/gpu.txt" || true
  "$llama/build/bin/llama-bench" -m "$gguf" -ngl 99 -fa on -p 512 -n 128 -o json >"$out/llama-bench.json"
  "$llama/build/bin/llama-batched-bench" -m "$gguf" -ngl 99 -fa on -c 65536 -b 2048 -ub 512 \
    -npp 128 -ntg 128 -npl 1,8,32,64,128,256 --output-format jsonl >"$out/llama-batched-bench.log" 2>&1
  "$root/build-cuda/rowlm" bench --device cuda --shape "$s" --layers "$n" --prefill 512 \
    --batch 1,8,32,64,128,256 --context 128 --decode-steps 16 >"$out/rowlm-bench.json"
  "$root/build-cuda/rowlm" bench --device cuda --model "$gguf" --concurrency 1,8,32,64 \
    --prompt-tokens 128 --gen-tokens 128 >"$out/rowlm-concurrency.json"
  python3 "$root/tools/peer/merge_results.py" --shape "$s" "$out"
}

case "$stage" in
  build) build ;;
  models) layers_of "$shape" >/dev/null; models "$shape" ;;
  run) layers_of "$shape" >/dev/null; run "$shape" ;;
  *) echo "usage: compare_gpu.sh build | models e2b|e4b | run e2b|e4b" >&2; exit 2 ;;
esac
