#!/usr/bin/env bash
# A change against its base on one GPU, side by side: both trees built on the
# accelerator machine, the change's CUDA tests run, then `rowlm bench` on
# both, alternating, so that every figure has its base beside it from the
# same minutes of the same card.
#
#   tools/device/ab_cuda.sh prepare [BASE_REF]   on the development machine (default HEAD): writes
#                                                .device/ab.patch, the working tree's tracked changes
#                                                against BASE_REF (travels with .device; new files:
#                                                `git add -N` them first)
#   tools/device/ab_cuda.sh build                on the accelerator: the base in /tmp/ab-base (this
#                                                tree with the patch taken back), both built
#                                                (tools/device/build_cuda.sh), backend_cuda_tests run
#   tools/device/ab_cuda.sh bench ROUNDS ARGS... on the accelerator: `rowlm bench --device cuda ARGS`
#                                                ROUNDS times on each tree, alternating; one line a run
#
# The CUDA tests read models/ and tests/fixtures: the tree that travels must
# have them. Each stage fits one device call; a warm machine keeps /tmp and
# build-cuda/ between calls. Sources .device/bootstrap.sh itself.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
base=/tmp/ab-base
cd "$root"

prepare() {
  local ref="${1:-HEAD}"
  git diff "$ref" -- . >.device/ab.patch
  [ -s .device/ab.patch ] || { echo "ab_cuda.sh: no tracked change against $ref" >&2; exit 1; }
  echo "ab_cuda.sh: .device/ab.patch ($(grep -c '^+++ ' .device/ab.patch) files against $ref)" >&2
}

build() {
  [ -s .device/ab.patch ] || { echo "ab_cuda.sh: no .device/ab.patch: run the prepare stage first" >&2; exit 1; }
  rm -rf "$base" && mkdir -p "$base"
  tar --exclude=./build-cuda --exclude=./build -cf - . | tar -xf - -C "$base"
  (cd "$base" && patch -s -p1 -R <.device/ab.patch)
  local t0 base_pid
  t0=$(date +%s)
  (cd "$base" && tools/device/build_cuda.sh rowlm >"$base.build.log" 2>&1) &
  base_pid=$!
  tools/device/build_cuda.sh rowlm backend_cuda_tests
  echo "ab_cuda.sh: change built in $(($(date +%s) - t0)) s" >&2
  "$(find build-cuda -name backend_cuda_tests -type f | head -1)" 2>&1 | grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|Failure|error' || true
  # The base's build, by its pid: a bare `wait` would also wait for a
  # caller's process substitutions (e.g. `exec > >(tee log)`), forever.
  if wait "$base_pid"; then echo "ab_cuda.sh: base built in $(($(date +%s) - t0)) s" >&2
  else tail -20 "$base.build.log" >&2; exit 1; fi
}

# One line from a `rowlm bench` JSON on stdin.
summary() {
  python3 -c "$(cat <<'PY'
import json, sys
text = sys.stdin.read()
if "{" not in text:
    print("no JSON:", text[-300:])
    sys.exit()
j = json.loads(text[text.index("{"):])
parts = []
prefill = j.get("prefill")
if prefill:
    parts.append("prefill %.0f" % prefill["tokens_per_s"])
for d in j.get("decode", []):
    parts.append("b%d %.1f (median %.1f)" % (d["batch"], d["tokens_per_s"], d.get("tokens_per_s_median", 0)))
bw = j.get("ceilings", {}).get("read_bandwidth_gb_s")
if bw:
    parts.append("read %.0f GB/s" % bw)
print(" | ".join(parts))
PY
)"
}

bench() {
  local rounds="$1"
  shift
  [ -x "$base/build-cuda/rowlm" ] || { echo "ab_cuda.sh: no base build: run the build stage first" >&2; exit 1; }
  for ((r = 1; r <= rounds; ++r)); do
    for side in change base; do
      local dir="$root"
      [ "$side" = base ] && dir="$base"
      printf '%s %d: ' "$side" "$r"
      "$dir/build-cuda/rowlm" bench --device cuda "$@" 2>/dev/null | summary
    done
  done
}

# The build recipe's dependencies (../shared/device/README.md).
bootstrap() {
  # shellcheck disable=SC1091
  source .device/bootstrap.sh
}

case "${1:-}" in
  prepare) prepare "${2:-HEAD}" ;;
  build) bootstrap && build ;;
  bench) [ $# -ge 2 ] || { echo "usage: ab_cuda.sh bench ROUNDS BENCH_ARGS..." >&2; exit 2; }
         shift
         bootstrap && bench "$@" ;;
  *) echo "usage: ab_cuda.sh prepare [BASE_REF] | build | bench ROUNDS BENCH_ARGS..." >&2; exit 2 ;;
esac
