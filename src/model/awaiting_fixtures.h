#pragma once
// Fixtures that scripts write on the accelerator machine and that are not
// committed yet (tests only): the GGUF files llama.cpp's own converter and
// llama-quantize write (tools/gguf/make_llamacpp_fixtures.py). (The
// transformers models of tools/oracle/make_family_fixtures.py are committed.) The
// tests that read them report themselves skipped while such a directory is
// absent; every other missing fixture fails. Once the fixtures are
// committed, empty this list: from then on a missing one fails too.

#include <algorithm>
#include <array>
#include <string_view>

namespace rowlm::test {

inline constexpr std::array<std::string_view, 7> kAwaitingFixtures = {
    "gguf/llamacpp/Q8_0", "gguf/llamacpp/Q4_0", "gguf/llamacpp/Q4_K_M", "gguf/llamacpp/Q5_K_M",
    "gguf/llamacpp/Q6_K", "gguf/llamacpp/Q3_K_S", "gguf/llamacpp/Q2_K"};

// `name` is its path under tests/fixtures (<family>/<case>, gguf/llamacpp/<type>).
inline bool awaiting_fixture(std::string_view name) {
  return std::find(kAwaitingFixtures.begin(), kAwaitingFixtures.end(), name) != kAwaitingFixtures.end();
}

}  // namespace rowlm::test
