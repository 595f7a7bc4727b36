#!/usr/bin/env bash
# Node and the official SDKs for the GPU suite's server stage (scripts/
# test-cuda.sh 5) on the accelerator machine, which has neither and reaches no
# registry. Run here, from the project root: writes .device-node/ (git-ignored
# through .git/info/exclude; name it in the device call's carry):
#   node.xz   this machine's node binary, stripped and xz-compressed (about
#             22 MB): it must be a self-contained build (no libnode.so), as
#             NodeSource's is
#   sdk.txz   tests/server/node_modules without playwright-core (the chat
#             page's browser test does not run there), about 2 MB
# With them the tree is too large for the carry limit (64 MiB): before the
# call, tools/device/trim_tree.sh server (every fixture out of the tree but
# tests/fixtures/qwen3/chat, which the server tests read); after it,
# tools/device/trim_tree.sh restore.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
node_bin=$(readlink -f "$(command -v node)") || { echo "pack_node.sh: node is not installed" >&2; exit 1; }
if ldd "$node_bin" | grep -q libnode; then
  echo "pack_node.sh: $node_bin links libnode.so: it would not run alone there" >&2
  exit 1
fi
[ -d tests/server/node_modules/openai ] || { echo "pack_node.sh: no tests/server/node_modules: run tests/server/run.sh once" >&2; exit 1; }
mkdir -p .device-node
grep -qx '.device-node/' .git/info/exclude 2>/dev/null || echo '.device-node/' >>.git/info/exclude
stripped=$(mktemp)
trap 'rm -f "$stripped"' EXIT
strip --strip-all -o "$stripped" "$node_bin"  # (its symbols are 12 MB of the 99)
chmod +x "$stripped"
"$stripped" -e 'process.exit(0)' || { echo "pack_node.sh: the stripped node does not run" >&2; exit 1; }
xz -T0 -9 -c "$stripped" >.device-node/node.xz
tar -C tests/server --exclude=node_modules/playwright-core -cJf .device-node/sdk.txz node_modules
du -b .device-node/* >&2
