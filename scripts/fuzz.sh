#!/usr/bin/env bash
# The libFuzzer targets (fuzz/): builds them with clang under ASan+UBSan in
# build-fuzz, then runs each for SECONDS (default 8) from its committed seed
# corpus (fuzz/corpus/TARGET; new inputs go to build-fuzz/corpus, not into
# the repository). Fails on any crash, sanitizer report, leak or input that
# takes longer than 10 s. For a long run: scripts/fuzz.sh 3600 [TARGET...].
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-8}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request_framer sse stop_strings safetensors_header gguf_header config tokenizer api_requests)
for tool in clang++ cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fuzz.sh: $tool is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
done
CXX=clang++ cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "== fuzz $t: ${seconds}s" >&2
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/crash-$t-" "build-fuzz/corpus/$t" "fuzz/corpus/$t" 2>&1 | tail -n 12
done
echo "== fuzz: no crash, leak or hang" >&2
