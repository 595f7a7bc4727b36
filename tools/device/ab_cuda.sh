#!/usr/bin/env bash
# A change against its base on one GPU, side by side: the trees built on the
# accelerator machine, the change's CUDA tests run, then `rowlm bench` (and,
# if asked, Nsight Compute kernel times) on every tree, alternating, so that
# each figure has its base beside it from the same minutes of the same card.
#
#   tools/device/ab_cuda.sh prepare [BASE_REF [VARIANT_REF...]]
#       on the development machine (default HEAD): writes .device/ab/ (travels with .device):
#       the working tree's tracked changes against BASE_REF (new files: `git add -N` them
#       first), and for each VARIANT_REF (e.g. a commit that holds part of the change) its
#       difference from BASE_REF, so that parts can be measured apart in the same call
#   tools/device/ab_cuda.sh build
#       on the accelerator: the base in /tmp/ab/base (this tree with the change taken back),
#       each variant in /tmp/ab/vN (the base with its difference), all built at once
#       (tools/device/build_cuda.sh), then the change's backend_cuda_tests
#   tools/device/ab_cuda.sh bench ROUNDS BENCH_ARGS...
#       `rowlm bench --device cuda BENCH_ARGS` ROUNDS times on each tree, alternating; a line a run
#   tools/device/ab_cuda.sh times REGEX COUNT BENCH_ARGS...
#       tools/device/kernel_times.sh REGEX COUNT BENCH_ARGS in each tree
#
# The CUDA tests read models/ and tests/fixtures: the tree that travels must
# have them. Each stage fits one device call (three trees build in about
# two minutes on the H100 host); a warm machine keeps /tmp and build-cuda/
# between calls. Sources .device/bootstrap.sh itself.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
ab=/tmp/ab
cd "$root"

prepare() {
  local base_ref="${1:-HEAD}" n=0 ref
  shift || true
  rm -rf .device/ab && mkdir -p .device/ab
  git diff "$base_ref" -- . >.device/ab/change.patch
  [ -s .device/ab/change.patch ] || { echo "ab_cuda.sh: no tracked change against $base_ref" >&2; exit 1; }
  echo "change $(git rev-parse --short HEAD)+worktree against $base_ref" >.device/ab/names
  for ref in "$@"; do
    n=$((n + 1))
    git diff "$base_ref" "$ref" -- . >".device/ab/v$n.patch"
    echo "v$n $ref ($(git rev-parse --short "$ref"))" >>.device/ab/names
  done
  cat .device/ab/names >&2
}

# The trees to measure: the change (this tree), the variants, the base.
trees() {
  echo "$root"
  local p
  for p in .device/ab/v*.patch; do [ -e "$p" ] && echo "$ab/$(basename "$p" .patch)"; done
  echo "$ab/base"
}

build() {
  [ -s .device/ab/change.patch ] || { echo "ab_cuda.sh: no .device/ab: run the prepare stage first" >&2; exit 1; }
  cat .device/ab/names
  rm -rf "$ab" && mkdir -p "$ab/base"
  tar --exclude=./build-cuda --exclude=./build -cf - . | tar -xf - -C "$ab/base"
  (cd "$ab/base" && patch -s -p1 -R <.device/ab/change.patch)
  local t0 tree pids=()
  t0=$(date +%s)
  for tree in $(trees); do
    [ "$tree" = "$root" ] && continue
    if [ "$tree" != "$ab/base" ]; then
      mkdir -p "$tree" && (cd "$ab/base" && tar --exclude=./build-cuda -cf - .) | tar -xf - -C "$tree"
      (cd "$tree" && patch -s -p1 <".device/ab/$(basename "$tree").patch")
    fi
    (cd "$tree" && tools/device/build_cuda.sh rowlm >"$tree.build.log" 2>&1) &
    pids+=($!)
  done
  tools/device/build_cuda.sh rowlm backend_cuda_tests
  echo "ab_cuda.sh: change built in $(($(date +%s) - t0)) s" >&2
  "$(find build-cuda -name backend_cuda_tests -type f | head -1)" 2>&1 | grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|Failure|error' || true
  # The other builds, by pid: a bare `wait` would also wait for a caller's
  # process substitutions (e.g. `exec > >(tee log)`), forever.
  local pid failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" = 0 ] || { tail -n 20 "$ab"/*.build.log >&2; exit 1; }
  echo "ab_cuda.sh: all built in $(($(date +%s) - t0)) s" >&2
}

# One line from a `rowlm bench` JSON on stdin.
summary() {
  python3 "$root/tools/device/bench_summary.py"
}

bench() {
  local rounds="$1" r tree
  shift
  [ -x "$ab/base/build-cuda/rowlm" ] || { echo "ab_cuda.sh: no base build: run the build stage first" >&2; exit 1; }
  for ((r = 1; r <= rounds; ++r)); do
    for tree in $(trees); do
      printf '%s %d: ' "$(label "$tree")" "$r"
      "$tree/build-cuda/rowlm" bench --device cuda "$@" 2>/dev/null | summary
    done
  done
}

times() {
  local tree
  for tree in $(trees); do
    echo "== $(label "$tree")"
    (cd "$tree" && tools/device/kernel_times.sh "$@")
  done
}

label() {
  case "$1" in "$root") echo change ;; *) basename "$1" ;; esac
}

# The build recipe's dependencies (../shared/device/README.md).
bootstrap() {
  # shellcheck disable=SC1091
  source .device/bootstrap.sh
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  build) bootstrap && build ;;
  bench) [ $# -ge 2 ] || { echo "usage: ab_cuda.sh bench ROUNDS BENCH_ARGS..." >&2; exit 2; }
         shift
         bootstrap && bench "$@" ;;
  times) [ $# -ge 3 ] || { echo "usage: ab_cuda.sh times REGEX COUNT BENCH_ARGS..." >&2; exit 2; }
         shift
         bootstrap && times "$@" ;;
  *) echo "usage: ab_cuda.sh prepare [BASE_REF [VARIANT_REF...]] | build | bench ROUNDS BENCH_ARGS... | times REGEX COUNT BENCH_ARGS..." >&2
     exit 2 ;;
esac
