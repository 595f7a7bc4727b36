#pragma once
// Fixtures that scripts write on the accelerator machine and that are not
// committed yet (tests only). The tests that read one report themselves
// skipped while its directory is absent; every other missing fixture fails.
// A new script's fixtures are listed here until their first run is committed.

#include <algorithm>
#include <array>
#include <string_view>

namespace rowlm::test {

// tools/gguf/make_family_gguf_fixtures.py's files, converted by llama.cpp.
inline constexpr std::array<std::string_view, 5> kAwaitingFixtures = {
    "gguf/families/llama", "gguf/families/qwen2", "gguf/families/mistral", "gguf/families/gemma3",
    "gguf/families/qwen3_moe"};

// `name` is its path under tests/fixtures (<family>/<case>, gguf/llamacpp/<type>,
// gguf/families/<family>).
inline bool awaiting_fixture(std::string_view name) {
  return std::find(kAwaitingFixtures.begin(), kAwaitingFixtures.end(), name) != kAwaitingFixtures.end();
}

}  // namespace rowlm::test
