#!/usr/bin/env bash
# The whole test suite: set-up, then the Release build's tests (unit and
# integration), then the unit tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

echo "== Release: all tests" >&2
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== ASan+UBSan: unit tests" >&2
# The CUDA backend is left out here: its host code is compiled and linked in
# the Release build above, and the CUDA runtime does not run under ASan's
# default shadow layout.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROWLM_SANITIZE=ON -DROWLM_CUDA=OFF \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j "$jobs"
echo "== all tests passed" >&2
