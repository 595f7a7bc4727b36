#include "sampling/token_history.h"

#include <algorithm>

#include "core/error.h"

namespace rowlm::sampling {

TokenHistory::TokenHistory(std::span<const int32_t> prompt_ids)
    : prompt_unique_(prompt_ids.begin(), prompt_ids.end()) {
  std::sort(prompt_unique_.begin(), prompt_unique_.end());
  prompt_unique_.erase(std::unique(prompt_unique_.begin(), prompt_unique_.end()), prompt_unique_.end());
}

void TokenHistory::push(int32_t token) {
  generated_.push_back(token);
  ++counts_[token];
}

void TokenHistory::pop() {
  ROWLM_CHECK(!generated_.empty(), "TokenHistory::pop on a history with no generated tokens");
  const int32_t token = generated_.back();
  generated_.pop_back();
  auto it = counts_.find(token);
  if (--it->second == 0) counts_.erase(it);
}

bool TokenHistory::in_prompt(int32_t token) const {
  return std::binary_search(prompt_unique_.begin(), prompt_unique_.end(), token);
}

}  // namespace rowlm::sampling
