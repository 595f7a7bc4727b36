#!/usr/bin/env bash
# Tokenizer speed, rowlm beside Hugging Face tokenizers (Rust, via Node), on
# the same ~1 MiB text, single thread, for each fetched real tokenizer.
# Also checks that both produce the same ids for the whole text.
#
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DROWLM_BENCH=ON
#   cmake --build build --target tokenizer_bench
#   tools/tokenizer_ref/bench.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
cache="$root/tests/.cache"
"$root/tests/tokenizers/fetch.sh"
(cd "$root/tools/tokenizer_ref" && [ -d node_modules/@anush008/tokenizers ] || npm ci --silent --no-audit --no-fund)

# The text: license prose and C++ headers from Debian's base system, plus the
# multilingual test corpus, cut to 1 MiB (the same on every Debian 12 machine).
text="$cache/bench_text.txt"
{
  node -e 'for (const s of require(process.argv[1]).corpus()) console.log(s)' "$root/tools/tokenizer_ref/corpus.js"
  for f in /usr/share/common-licenses/*; do [ -L "$f" ] || cat "$f"; done
  find /usr/include/c++/12/bits -name '*.h' | LC_ALL=C sort | xargs cat
} >"$text.all" 2>/dev/null
head -c 1048576 "$text.all" >"$text"
rm -f "$text.all"

for name in gemma3 llama3 qwen3; do
  dir="$cache/tokenizers/$name"
  echo "== $name"
  echo -n "reference: "
  (cd "$root/tools/tokenizer_ref" && node bench.js "$dir/tokenizer.json" "$text" "$cache/bench_ids_$name.json")
  echo -n "rowlm:     "
  "$build/bench/tokenizer_bench" "$dir" "$text" "$cache/bench_ids_$name.json"
done
