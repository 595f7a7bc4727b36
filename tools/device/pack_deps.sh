#!/usr/bin/env bash
# Shrinks what travels to the accelerator machine. ../shared/device/prepare.sh
# writes .device/ with the Debian 12 .debs of rowlm's build dependencies
# (6.3 MB); with the tracked tree at about 66 MB that passes the device
# tool's 64 MiB carry limit. Run this after prepare.sh, from the project root:
# it unpacks the .debs, drops their docs, man pages and static libraries
# (gtest's and gmock's stay: the tests link them), packs the rest as
# .device/deps.txz (about 1.6 MB) and rewrites .device/bootstrap.sh to unpack
# that into /root/deps (never into /), exporting the same variables.
#
# Even so the tree and .device together are just under the limit only with the
# CPU-only fixtures left behind: move tests/tokenizers and
# tests/fixtures/gguf/llamacpp out of the tree for the call (the GPU suite
# does not read them) and back afterwards; `git status` must be clean then.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
ls .device/debs/*.deb >/dev/null 2>&1 || { echo "pack_deps.sh: no .device/debs/*.deb: run ../shared/device/prepare.sh first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in .device/debs/*.deb; do dpkg -x "$f" "$tmp"; done
rm -rf "$tmp/usr/share/doc" "$tmp/usr/share/man" "$tmp/usr/share/lintian"
find "$tmp" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
tar -cJf .device/deps.txz -C "$tmp" .
rm -rf .device/debs
cat > .device/bootstrap.sh <<'BOOT'
# Sourced on the accelerator machine from the project root: unpacks the carried
# build dependencies (tools/device/pack_deps.sh) into /root/deps, never into /.
DEPS=/root/deps
if [ ! -f $DEPS/.done ]; then
  mkdir -p $DEPS && tar -xJf .device/deps.txz -C $DEPS && touch $DEPS/.done
fi
export PKG_CONFIG_SYSROOT_DIR=$DEPS
export PKG_CONFIG_PATH=$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/usr/share/pkgconfig
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ROWLM_DEVICE_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$DEPS/usr -DGTest_DIR=$DEPS/usr/lib/x86_64-linux-gnu/cmake/GTest"
BOOT
du -sh .device
