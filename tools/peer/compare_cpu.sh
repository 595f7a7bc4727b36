#!/usr/bin/env bash
# rowlm against llama.cpp's CPU backend on the same host and the same GGUF
# files (issue 14's CPU targets: Q4_0, Q8_0 and Q4_K_M of an E2B-shaped random
# checkpoint, decode at batch 1 and a 512-token prefill, 16 threads): one
# JSON with both sides and the ratios.
#
# On the development machine first: tools/peer/pack_llamacpp.sh, then send
# .device-llama/llama.cpp-cuda.txz and .device with the project (carry). On
# the accelerator machine, from the project root, in stages that each fit a
# device call (the work directory keeps what each stage made; a stage whose
# output exists is skipped):
#
#   source .device/bootstrap.sh && tools/peer/compare_cpu.sh build   # llama.cpp (CPU) and rowlm (CPU)
#   tools/peer/compare_cpu.sh models e2b       # the bf16 GGUF (compare_gpu.sh's), quantized by llama-quantize
#   tools/peer/compare_cpu.sh run e2b [TYPES]  # default TYPES: "Q4_0 Q8_0 Q4_K_M"
#
# What runs, with THREADS (default 16) threads on each side:
#   llama.cpp  llama-bench -m FILE -t THREADS -p 512 -n 128 -o json (pp512, tg128)
#   rowlm      rowlm bench --device cpu --threads THREADS --model FILE
#                --matmul-precision P --concurrency 1,1 --prompt-tokens 1
#                --gen-tokens 128
#              (one request through the engine: its decode tokens/s from an
#              empty context, as llama-bench's tg128 decodes), and the same
#              with --prompt-tokens 512 --gen-tokens 1 (its prefill: 512
#              tokens over the time to its first token, as pp512); each the
#              second of two requests on one engine, the first a warm-up as
#              llama-bench's; all for each P in PRECISIONS (default "f32 int8")
# Environment: PEER_WORK (default /root/peer), PEER_PYTHON (default
# /opt/torch/.venv/bin/python, for compare_gpu.sh's models stage), THREADS,
# PRECISIONS.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${PEER_WORK:-/root/peer}"
llama="$work/llama.cpp"
threads="${THREADS:-16}"
# rowlm's --matmul-precision values to run (int8: 8-bit activations, as
# llama.cpp multiplies its quantized weights).
precisions="${PRECISIONS:-f32 int8}"
stage="${1:-}"
shape="${2:-}"
mkdir -p "$work"

check_shape() {
  case "$1" in e2b | e4b) ;; *) echo "compare_cpu.sh: shape must be e2b or e4b, got '$1'" >&2; exit 2 ;; esac
}

build() {
  # llama.cpp and rowlm build side by side; rowlm's build/ is the one
  # tools/device/cpu_amx_compare.sh configures (same flags, so neither rebuilds
  # the other's targets).
  [ -d "$llama" ] || tar -C "$work" -xJf "$root/.device-llama/llama.cpp-cuda.txz"
  local peer_pid=""
  if [ ! -x "$llama/build-cpu/bin/llama-bench" ] || [ ! -x "$llama/build-cpu/bin/llama-quantize" ]; then
    (cmake -S "$llama" -B "$llama/build-cpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_NATIVE=ON \
           -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
           -DLLAMA_OPENSSL=OFF >/dev/null &&
       cmake --build "$llama/build-cpu" -j "$(nproc)" --target llama-bench llama-quantize >/dev/null) &
    peer_pid=$!
  fi
  # shellcheck disable=SC2086  # the recipe's arguments are meant to split
  cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DROWLM_CUDA=OFF -DCMAKE_UNITY_BUILD=ON \
        -DROWLM_BENCH=ON ${ROWLM_DEVICE_CMAKE_ARGS:-} >/dev/null
  cmake --build "$root/build" -j "$(nproc)" --target rowlm backend_cpu_tests kernels_bench >/dev/null
  if [ -n "$peer_pid" ]; then
    wait "$peer_pid" || { echo "compare_cpu.sh: building llama.cpp failed" >&2; exit 1; }
  fi
  echo "compare_cpu.sh: built $llama/build-cpu/bin/{llama-bench,llama-quantize} and $root/build/rowlm" >&2
}

models() {
  local s="$1" type out
  "$root/tools/peer/compare_gpu.sh" models "$s"  # the bf16 GGUF, made once for both comparisons
  for type in Q4_0 Q8_0 Q4_K_M; do
    out="$work/$s-$type.gguf"
    [ -f "$out" ] && continue
    "$llama/build-cpu/bin/llama-quantize" "$work/$s-bf16.gguf" "$out.part" "$type" "$threads" \
      >"$work/$s-$type-quantize.log" 2>&1 || { tail -20 "$work/$s-$type-quantize.log" >&2; exit 1; }
    mv "$out.part" "$out"
    echo "compare_cpu.sh: $out ($(du -h "$out" | cut -f1))" >&2
  done
}

run() {
  local s="$1" type file out
  shift
  local types=("$@")
  [ ${#types[@]} -gt 0 ] || types=(Q4_0 Q8_0 Q4_K_M)
  out="$work/$s-cpu-results"
  mkdir -p "$out"
  lscpu >"$out/cpu.txt"
  for type in "${types[@]}"; do
    file="$work/$s-$type.gguf"
    [ -f "$file" ] || { echo "compare_cpu.sh: no $file: run the models stage first" >&2; exit 1; }
    "$llama/build-cpu/bin/llama-bench" -m "$file" -t "$threads" -p 512 -n 128 -o json >"$out/llama-bench-$type.json"
    for p in $precisions; do
      "$root/build/rowlm" bench --device cpu --threads "$threads" --matmul-precision "$p" --model "$file" \
        --concurrency 1,1 --prompt-tokens 1 --gen-tokens 128 >"$out/rowlm-$type-$p-tg128.json"
      "$root/build/rowlm" bench --device cpu --threads "$threads" --matmul-precision "$p" --model "$file" \
        --concurrency 1,1 --prompt-tokens 512 --gen-tokens 1 >"$out/rowlm-$type-$p-pp512.json"
    done
  done
  python3 - "$out" "$threads" "$precisions" "${types[@]}" <<'PY'
import json, sys
from pathlib import Path
out, threads, precisions, types = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
def ratio(a, b):
    return round(a / b, 3) if a and b else None
result = {"threads": threads, "types": {}}
for t in types:
    llama = {}
    for r in json.loads((out / f"llama-bench-{t}.json").read_text()):
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            llama["prefill_tokens_per_s"] = r["avg_ts"]
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            llama["decode_tokens_per_s"] = r["avg_ts"]
    def bench(p, kind):
        text = (out / f"rowlm-{t}-{p}-{kind}.json").read_text()
        return json.loads(text[text.index("{"):])
    entry = {"llama.cpp": llama, "rowlm": {}, "rowlm_over_llama": {}, "rowlm_host_pool": {}}
    for p in precisions:
        # The second of two runs on one engine: the first is the warm-up (its
        # workspace grows and its pages fault in), as llama-bench warms up.
        tg, pp = bench(p, "tg128"), bench(p, "pp512")
        ttft = pp["runs"][-1]["time_to_first_token_p50_s"]
        rowlm = {"decode_tokens_per_s": tg["runs"][-1]["per_request_decode_tokens_per_s_p50"],
                 "prefill_tokens_per_s": pp["prompt_tokens"] / ttft if ttft else None}
        entry["rowlm"][p] = rowlm
        entry["rowlm_over_llama"][p] = {k: ratio(rowlm.get(k), llama.get(k)) for k in rowlm}
        # Regions of rowlm's thread pool that stalled on a worker without a
        # core (and ran narrowed after): many mean the host's cores were taken.
        entry["rowlm_host_pool"][p] = {"decode": tg["runs"][-1].get("host_pool"),
                                       "prefill": pp["runs"][-1].get("host_pool")}
    result["types"][t] = entry
print(json.dumps(result, indent=1))
PY
}

case "$stage" in
  build) build ;;
  models) check_shape "$shape"; models "$shape" ;;
  run) check_shape "$shape"; shift 2; run "$shape" "$@" ;;
  *) echo "usage: compare_cpu.sh build | models e2b|e4b | run e2b|e4b [TYPE...]" >&2; exit 2 ;;
esac
