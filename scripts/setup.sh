#!/usr/bin/env bash
# Installs the Debian 12 packages rowlm needs, if any are missing, and
# configures + builds the Release tree in build/. Run as root to install;
# as another user it lists what is missing and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev nlohmann-json3-dev
          libpcre2-dev libutf8proc-dev libcpp-httplib-dev
          libcurl4-openssl-dev libssl-dev ca-certificates  # rowlm pull: HTTPS, checksums, the Hub's CA
          curl       # the server integration tests check raw SSE framing with curl
          chromium   # the chat page's browser test (headless, driven by playwright-core)
          clang libclang-rt-14-dev)  # the libFuzzer targets (fuzz/, scripts/fuzz.sh)
# Node.js runs the reference-tokenizer and API-client tests (npm packages as
# test assets only).
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

jobs=$(nproc)
# ROWLM_CUDA_ARCHS narrows the CUDA architectures (scripts/test.sh sets 80 so
# that CI, which has no GPU, compiles and links the CUDA backend once rather
# than four times); unset, the build's default (80, 86, 89, 90) applies.
cuda_archs=()
[ -n "${ROWLM_CUDA_ARCHS:-}" ] && cuda_archs=(-DCMAKE_CUDA_ARCHITECTURES="$ROWLM_CUDA_ARCHS")
# ROWLM_UNITY_BUILD=ON (scripts/test.sh sets it) compiles each module's
# sources in batches (CMake's unity build): a clean build in about half the
# time, which CI's two cores need; incremental builds are faster without.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD="${ROWLM_UNITY_BUILD:-OFF}" \
      "${cuda_archs[@]}" >/dev/null
cmake --build build -j "$jobs"
