#pragma once
// tokenizer.json post-processors: TemplateProcessing (special tokens around
// the sequence), ByteLevel (offsets only: ids unchanged) and Sequence.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_fields.h"

namespace rowlm::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds what the processor adds around one sequence's ids.
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
};

// nullptr for a JSON null. Throws rowlm::Error naming an unknown type.
std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& where = "post_processor");

}  // namespace rowlm::tok
