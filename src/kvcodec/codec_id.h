#pragma once
// The KV codec identifiers, in a header of their own so that the per-ISA
// kernel files can use them without pulling in any standard-library code.

#include <cstdint>

namespace rowlm::kv {

enum class Codec : uint8_t { F32, BF16, F16, Q8, Q4 };

}  // namespace rowlm::kv
