#!/usr/bin/env bash
# The device tool sends the working tree and the carried paths (.device,
# .device-node) together, 64 MiB at most; the tree with its fixtures is more.
# This moves the files a GPU call does not read out of the tree, and back:
#
#   tools/device/trim_tree.sh gpu       for scripts/test-cuda.sh 1-4 and 6 and
#                                       the benchmarks: the llama.cpp GGUF
#                                       fixtures, the tokenizer fixtures and
#                                       the Gemma 4 GGUF file go (the CLI
#                                       tests read the Qwen 3 one)
#   tools/device/trim_tree.sh server    for stage 5 with .device-node (the SDKs
#                                       on the GPU): every fixture but
#                                       tests/fixtures/qwen3/chat, and
#                                       models/rowlm-tiny-draft, go
#   tools/device/trim_tree.sh restore   puts back whatever was moved
#
# The moved files wait in $ROWLM_TRIM_DIR (default /tmp/rowlm-trimmed), under
# their paths in the tree; `restore` refuses to overwrite a path that came
# back some other way. Prints what travels: the tree's files that git tracks
# or does not ignore, and the sizes of .device/ and .device-node/.
# Run `tools/device/ab_cuda.sh prepare` before trimming (it diffs the tree).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
held=${ROWLM_TRIM_DIR:-/tmp/rowlm-trimmed}

move_out() {
  local p
  for p in "$@"; do
    [ -e "$p" ] || continue
    mkdir -p "$held/$(dirname "$p")"
    mv "$p" "$held/$p"
  done
}

# A second trim over a first would move a folder into its own held copy
# (held/p/p), where restore cannot find it: restore between trims.
held_already() {
  if [ -d "$held" ] && [ -n "$(find "$held" -mindepth 1 -print -quit)" ]; then
    echo "trim_tree.sh: $held holds an earlier trim; run tools/device/trim_tree.sh restore first" >&2
    exit 1
  fi
}

case "${1:-}" in
  gpu | server) held_already ;;
esac
case "${1:-}" in
  gpu)
    move_out tests/fixtures/gguf/llamacpp tests/tokenizers/fixtures tests/fixtures/gguf/gemma4_bf16.gguf
    ;;
  server)
    mapfile -t fixtures < <(find tests/fixtures -mindepth 1 -maxdepth 1 ! -name qwen3)
    mapfile -t qwen3 < <(find tests/fixtures/qwen3 -mindepth 1 -maxdepth 1 ! -name chat 2>/dev/null)
    move_out "${fixtures[@]}" "${qwen3[@]}" tests/tokenizers/fixtures models/rowlm-tiny-draft
    ;;
  restore)
    [ -d "$held" ] || { echo "trim_tree.sh: nothing held in $held" >&2; exit 0; }
    while IFS= read -r -d '' p; do
      rel=${p#"$held"/}
      if [ -e "$rel" ]; then
        echo "trim_tree.sh: $rel is back in the tree already; $p left where it is" >&2
        exit 1
      fi
      mkdir -p "$(dirname "$rel")"
      mv "$p" "$rel"
    done < <(find "$held" -depth -mindepth 1 \( -type f -o -type l \) -print0)
    find "$held" -depth -type d -empty -delete
    ;;
  *)
    echo "usage: tools/device/trim_tree.sh gpu|server|restore" >&2
    exit 2
    ;;
esac
# (git still lists the tracked files moved out: stat skips them)
bytes=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | { xargs -0 stat -c %s 2>/dev/null || true; } |
  awk '{s += $1} END {print s + 0}')
carried() { du -sb "$1" 2>/dev/null | awk '{printf "%.1f", $1 / 1048576}'; }
awk -v t="$bytes" -v d="$(carried .device)" -v n="$(carried .device-node)" 'BEGIN {
  printf "trim_tree.sh: the tree is %.1f MiB; .device %s MiB, .device-node %s MiB where carried (64 MiB in all)\n", t / 1048576, d == "" ? "0" : d, n == "" ? "0" : n }' >&2
