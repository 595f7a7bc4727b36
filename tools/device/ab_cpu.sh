#!/usr/bin/env bash
# ab_cuda.sh's CPU counterpart: a change against its base on the accelerator
# host's CPU (16 cores: the host of issue 14's and 16's CPU figures), both
# built there, then `rowlm bench --device cpu` on each, alternating, so that
# each figure has its base beside it from the same minutes of the same host.
#
#   tools/device/ab_cuda.sh prepare [BASE_REF]     on the development machine
#       (the change as .device/ab/change.patch; variants are not used here)
#   tools/device/ab_cpu.sh build [GTEST_FILTER]
#       on the accelerator: this tree and the base (/tmp/ab-cpu/base: the tree
#       with the change taken back) built for the CPU (build-cpu/, Release,
#       unity) at once, then the change's backend_cpu_tests (GTEST_FILTER,
#       default all)
#   tools/device/ab_cpu.sh bench ROUNDS BENCH_ARGS...
#       `rowlm bench --device cpu BENCH_ARGS` ROUNDS times on each tree,
#       alternating; a line a run
#
# A warm machine keeps /tmp and build-cpu/ between calls. Sources
# .device/bootstrap.sh itself.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
base=/tmp/ab-cpu/base
cd "$root"

build_tree() {
  # shellcheck disable=SC2086  # the recipe's arguments are meant to split
  cmake -S "$1" -B "$1/build-cpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DROWLM_CUDA=OFF -DCMAKE_UNITY_BUILD=ON \
        ${ROWLM_DEVICE_CMAKE_ARGS:-} >/dev/null
  cmake --build "$1/build-cpu" -j "$(nproc)" --target "${@:2}" >/dev/null
}

build() {
  [ -s .device/ab/change.patch ] || { echo "ab_cpu.sh: no .device/ab: run ab_cuda.sh prepare first" >&2; exit 1; }
  cat .device/ab/names
  rm -rf "$base" && mkdir -p "$base"
  tar --exclude=./build-cpu --exclude=./build-cuda --exclude=./build -cf - . | tar -xf - -C "$base"
  (cd "$base" && patch -s -p1 -R <"$root/.device/ab/change.patch")
  local t0 pid
  t0=$(date +%s)
  build_tree "$base" rowlm >/tmp/ab-cpu/base.build.log 2>&1 &
  pid=$!
  build_tree "$root" rowlm backend_cpu_tests
  wait "$pid" || { tail -n 20 /tmp/ab-cpu/base.build.log >&2; exit 1; }
  echo "ab_cpu.sh: both built in $(($(date +%s) - t0)) s" >&2
  "$(find build-cpu -name backend_cpu_tests -type f | head -1)" --gtest_filter="${1:-*}" 2>&1 |
    grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|Failure' || true
}

bench() {
  local rounds="$1" r tree
  shift
  [ -x "$base/build-cpu/rowlm" ] || { echo "ab_cpu.sh: no base build: run the build stage first" >&2; exit 1; }
  lscpu | grep -E "Model name" | cut -c1-100 || true
  for ((r = 1; r <= rounds; ++r)); do
    for tree in "$root" "$base"; do
      printf '%s %d: ' "$([ "$tree" = "$root" ] && echo change || echo base)" "$r"
      "$tree/build-cpu/rowlm" bench --device cpu "$@" 2>/dev/null | python3 "$root/tools/device/bench_summary.py"
    done
  done
}

case "${1:-}" in
  build) shift
         # shellcheck disable=SC1091
         source .device/bootstrap.sh && mkdir -p /tmp/ab-cpu && build "$@" ;;
  bench) [ $# -ge 2 ] || { echo "usage: ab_cpu.sh bench ROUNDS BENCH_ARGS..." >&2; exit 2; }
         shift
         # shellcheck disable=SC1091
         source .device/bootstrap.sh && bench "$@" ;;
  *) echo "usage: ab_cpu.sh build [GTEST_FILTER] | bench ROUNDS BENCH_ARGS..." >&2
     exit 2 ;;
esac
