#pragma once
// Whether bytes are well-formed UTF-8 (no overlongs, surrogates or code
// points past U+10FFFF). Stop strings must be, so that a match can never
// split a character of the text it is found in.

#include <string_view>

namespace rowlm::sampling {

bool is_valid_utf8(std::string_view s);

}  // namespace rowlm::sampling
