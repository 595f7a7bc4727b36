#pragma once
// Fixtures that scripts write on the accelerator machine and that are not
// committed yet (tests only): the transformers models of
// tools/oracle/make_family_fixtures.py, the Gemma 4 assistant pairs of
// tools/oracle/make_assistant_fixtures.py, and the GGUF files llama.cpp's own
// converter and llama-quantize write (tools/gguf/make_llamacpp_fixtures.py). The
// tests that read them report themselves skipped while such a directory is
// absent; every other missing fixture fails. Once the fixtures are
// committed, empty this list: from then on a missing one fails too.

#include <algorithm>
#include <array>
#include <string_view>

namespace rowlm::test {

inline constexpr std::array<std::string_view, 22> kAwaitingFixtures = {
    "llama/llama3_tied", "llama/linear_untied_bias", "llama/bf16",         "qwen2/sliding_gqa",
    "qwen2/mqa_tied",    "mistral/window",           "mistral/no_window",  "gemma3/text",
    "gemma3/conditional", "gemma3/bf16",             "qwen3_moe/norm_topk", "qwen3_moe/step2_window",
    "gguf/llamacpp/Q8_0", "gguf/llamacpp/Q4_0", "gguf/llamacpp/Q4_K_M", "gguf/llamacpp/Q5_K_M",
    "gguf/llamacpp/Q6_K", "gguf/llamacpp/Q3_K_S", "gguf/llamacpp/Q2_K",
    "gemma4_assistant/plain", "gemma4_assistant/e_series_ordered", "gemma4_assistant/keqv"};

// `name` is its path under tests/fixtures (<family>/<case>, gguf/llamacpp/<type>).
inline bool awaiting_fixture(std::string_view name) {
  return std::find(kAwaitingFixtures.begin(), kAwaitingFixtures.end(), name) != kAwaitingFixtures.end();
}

}  // namespace rowlm::test
