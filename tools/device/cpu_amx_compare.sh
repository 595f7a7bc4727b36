#!/usr/bin/env bash
# On the accelerator machine's CPU (AMX-BF16), from the project root: builds
# rowlm for the CPU (build/, Release, unity), runs the AMX tests, then puts
# the bf16 matmul paths side by side: kernels_bench's batched decode (the
# kernel table, AMX's order on the vector units, the tiles) and `rowlm bench`
# under --matmul-precision bf16 with ROWLM_CPU_AMX=1 (tiles), rows (tiles and
# vector rows for decode) and 0 (VDPBF16PS), and f32 beside them. One device
# call, CPU only. Sources .device/bootstrap.sh itself.
#   tools/device/cpu_amx_compare.sh [THREADS] [LAYERS]   (default 16, 8)
set -euo pipefail
cd "$(dirname "$0")/../.."
threads="${1:-16}" layers="${2:-8}"
# shellcheck disable=SC1091  # the recipe's bootstrap (../shared/device/README.md)
source .device/bootstrap.sh
lscpu | grep -E "Model name|^CPU\(s\)|amx" | cut -c1-120 || true
t0=$(date +%s)
# shellcheck disable=SC2086  # the recipe's arguments are meant to split
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DROWLM_CUDA=OFF -DCMAKE_UNITY_BUILD=ON -DROWLM_BENCH=ON \
      ${ROWLM_DEVICE_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" --target rowlm backend_cpu_tests kernels_bench >/dev/null
echo "built in $(($(date +%s) - t0)) s"
"$(find build -name backend_cpu_tests -type f | head -1)" --gtest_filter='*Amx*:*Canonical*' 2>&1 |
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|Failure' || true
"$(find build -name kernels_bench -type f | head -1)" --threads "$threads" --only batch
bench() {
  build/rowlm bench --device cpu --threads "$threads" --shape e2b --layers "$layers" --batch 1,16 --decode-steps 3 \
    --prefill 256 "$@" 2>/dev/null | python3 tools/device/bench_summary.py
}
for amx in 1 rows 0; do
  printf 'bf16, ROWLM_CPU_AMX=%s: ' "$amx"
  ROWLM_CPU_AMX=$amx bench --matmul-precision bf16
done
printf 'f32: '
bench --matmul-precision f32
echo "done in $(($(date +%s) - t0)) s"
