#!/usr/bin/env bash
# On the accelerator machine, from the project root: configures build-cuda/
# (Hopper's 90a: the wgmma tiles; the micro-benchmarks on) and builds the
# targets named (default: rowlm, the CUDA backend's tests and gemm_bench).
#   tools/device/build_cuda.sh [TARGET...]
# Sources .device/bootstrap.sh (../shared/device/README.md) itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck disable=SC1091
source .device/bootstrap.sh
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(rowlm backend_cuda_tests gemm_bench)
# shellcheck disable=SC2086  # the recipe's arguments are meant to split
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DROWLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DROWLM_BENCH=ON ${ROWLM_DEVICE_CMAKE_ARGS:-} >/dev/null
cmake --build build-cuda -j "$(nproc)" --target "${targets[@]}" 2>&1 | grep -E "error|warning: .*(spill|stack)" || true
for t in "${targets[@]}"; do
  found=$(find build-cuda -name "$t" -type f -perm -u+x | head -1)
  [ -n "$found" ] || { echo "build_cuda.sh: $t was not built" >&2; exit 1; }
done
echo "build_cuda.sh: built ${targets[*]}" >&2
