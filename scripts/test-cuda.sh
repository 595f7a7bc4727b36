#!/usr/bin/env bash
# The GPU suite, on a machine with an NVIDIA GPU and the CUDA toolkit: builds
# rowlm with CUDA in build-cuda/ and runs
#   1. the CUDA backend's tests (every kernel and the KV codecs against the
#      CPU backend, forward passes on the transformers fixtures: bitwise),
#   2. the same under compute-sanitizer's memcheck,
#   3. the engine's tests (randomized-schedule determinism, speculative
#      decoding) with the engine on the GPU,
#   4. the CLI contract tests (the rowlm command picks the GPU by itself),
#   5. rowlm serve on the GPU (curl: /v1/models and /metrics name the
#      device, a chat completion), then the server tests with the official
#      SDKs when Node and the SDKs (tests/server/node_modules) are present,
#   6. rows sampled on the GPU against the host's sampler, end to end: with
#      f32 matmuls (the CPU's logits, bit for bit) rowlm generate gives the
#      same tokens, logprobs and JSON on the GPU and the CPU (sampled with
#      top-k, top-p and a repetition penalty; greedy with logprobs; a JSON
#      Schema).
# On the accelerator machine, first: source .device/bootstrap.sh (see
# ../shared/device/README.md). CMAKE_CUDA_ARCHITECTURES defaults to the
# GPU's own.
#
#   scripts/test-cuda.sh [STAGE...]    the stages named (1 to 6), default all
#
# Node and the SDKs for stage 5 where the machine has neither (the
# accelerator machine reaches no registry): tools/device/pack_node.sh here
# writes .device-node/ (to travel with the tree); this script unpacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(1 2 3 4 5 6)
for s in "${stages[@]}"; do
  case "$s" in [1-6]) ;; *) echo "test-cuda.sh: stages are 1 to 6, got '$s'" >&2; exit 2 ;; esac
done
want() { [[ " ${stages[*]} " == *" $1 "* ]]; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# The GPU's own architecture (Hopper as 90a: its wgmma GEMM tiles).
native=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
[ "$native" = 90 ] && native=90a
arch=${CMAKE_CUDA_ARCHITECTURES:-${native:-native}}
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DROWLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
      ${ROWLM_DEVICE_CMAKE_ARGS:-} >/dev/null
targets=()
want 1 || want 2 && targets+=(backend_cuda_tests)
want 3 && targets+=(engine_tests)
want 4 && targets+=(rowlm cli_tests)
want 5 || want 6 && targets+=(rowlm scripted_server)
cmake --build build-cuda -j "$(nproc)" --target "${targets[@]}"

status=0
if want 1; then
echo "== 1. CUDA backend against the CPU backend" >&2
build-cuda/src/backend/cuda/backend_cuda_tests
fi
if want 2; then
echo "== 2. compute-sanitizer memcheck" >&2
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 1 build-cuda/src/backend/cuda/backend_cuda_tests >/dev/null
  echo "memcheck: no errors" >&2
else
  echo "compute-sanitizer not found: memcheck skipped" >&2
fi
fi
if want 3; then
echo "== 3. engine on the GPU" >&2
# A crash is diagnosed here, in the same call: the test it stopped in runs
# again under a debugger (a backtrace) and under memcheck; the later stages
# still run, and the suite fails at the end.
engine_log=$(mktemp)
# The tensor-parallel engine tests split over 2 shards: on a one-GPU machine
# both on GPU 0 (make_sharded_backends asks for the GPUs to be named).
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" = 1 ] && [ -z "${ROWLM_TENSOR_PARALLEL_DEVICES:-}" ]; then
  export ROWLM_TENSOR_PARALLEL_DEVICES=0,0
fi
if ! ROWLM_TEST_DEVICE=cuda build-cuda/src/engine/engine_tests 2>&1 | tee "$engine_log"; then
  status=1
  crashed=$(awk '/^\[ RUN      \]/ { t = $4 } /^\[ +(OK|FAILED) +\]/ { t = "" } END { print t }' "$engine_log")
  if [ -n "$crashed" ]; then
    echo "== the engine tests stopped inside $crashed: its backtrace, then memcheck" >&2
    debugger=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null || true)
    if [ -n "$debugger" ]; then
      ROWLM_TEST_DEVICE=cuda "$debugger" -batch -ex run -ex bt --args build-cuda/src/engine/engine_tests \
        --gtest_filter="$crashed" 2>&1 | tail -80 || true
    fi
    if command -v compute-sanitizer >/dev/null; then
      ROWLM_TEST_DEVICE=cuda compute-sanitizer --tool memcheck build-cuda/src/engine/engine_tests \
        --gtest_filter="$crashed" 2>&1 | tail -80 || true
    fi
  fi
fi
rm -f "$engine_log"
fi
if want 4; then
echo "== 4. the rowlm command (auto picks the GPU)" >&2
build-cuda/rowlm generate models/rowlm-tiny "In the beginning" --max-tokens 8 2>&1 >/dev/null | grep "running on cuda"
build-cuda/src/cli/cli_tests
fi
if want 5; then
echo "== 5. the server on the GPU" >&2
if ! command -v node >/dev/null && [ -f .device-node/node.xz ]; then
  mkdir -p /tmp/rowlm-node/bin
  xz -dc .device-node/node.xz >/tmp/rowlm-node/bin/node && chmod +x /tmp/rowlm-node/bin/node
  export PATH="/tmp/rowlm-node/bin:$PATH"
fi
if [ ! -d tests/server/node_modules/openai ] && [ -f .device-node/sdk.txz ]; then
  tar -C tests/server -xJf .device-node/sdk.txz
fi
log=$(mktemp)
build-cuda/rowlm serve models/rowlm-tiny --port 0 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 100); do grep -q "http://127.0.0.1:" "$log" && break; sleep 0.2; done
url=$(grep -o "http://127.0.0.1:[0-9]*" "$log" | head -1)
curl -sf "$url/v1/models" | grep -q '"device":"cuda:'
curl -sf "$url/metrics" | grep -q 'rowlm_device_info{device="cuda:'
curl -sf "$url/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"rowlm-tiny","messages":[{"role":"user","content":"Define mountain."}],"max_tokens":12,"temperature":0}' |
  grep -q '"finish_reason"'
echo "curl smoke: /v1/models, /metrics and a chat completion answered on the GPU" >&2
kill -INT $server && wait $server
if command -v node >/dev/null && [ -d tests/server/node_modules/openai ]; then
  (cd tests/server && ROWLM_BIN="$PWD/../../build-cuda/rowlm" ROWLM_SCRIPTED_BIN="$PWD/../../build-cuda/tests/server/scripted_server" \
     ROWLM_MODEL="$PWD/../../models/rowlm-tiny" node --test --test-concurrency=1 ./*.test.mjs)
else
  echo "Node or the SDKs (tests/server/node_modules, installed by tests/server/run.sh) are missing: the SDK tests were not run" >&2
fi
fi
if want 6; then
echo "== 6. sampling on the GPU equals the host's" >&2
scripts/compare-sampling.sh build-cuda/rowlm cuda cpu || status=1
fi
if [ "$status" -ne 0 ]; then
  echo "== GPU suite FAILED: the engine tests (stage 3) or the sampling comparison (stage 6) did not pass" >&2
  exit 1
fi
echo "== GPU suite passed" >&2
