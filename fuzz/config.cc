// config.json resolution (Gemma 4: text_config nesting, layer types, RoPE
// parameters, KV sharing, per-layer overrides) on any document: a
// rowlm::Error naming the problem, or a config; never a crash, UB or leak.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/gemma4_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    static_cast<void>(rowlm::gemma4::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz"));
  } catch (const rowlm::Error&) {
  }
  return 0;
}
