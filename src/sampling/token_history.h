#pragma once
// The tokens a request has seen, kept in the form the penalties need: the
// distinct prompt ids, and the generated ids with their counts. Generated
// tokens can be taken back (speculative rejection, recompute after
// preemption) in O(1) each.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace rowlm::sampling {

class TokenHistory {
 public:
  TokenHistory() = default;
  explicit TokenHistory(std::span<const int32_t> prompt_ids);

  void push(int32_t token);  // one more generated token
  void pop();                // forget the most recent generated token

  const std::vector<int32_t>& generated() const { return generated_; }
  // Distinct prompt ids, ascending.
  const std::vector<int32_t>& prompt_ids() const { return prompt_unique_; }
  bool in_prompt(int32_t token) const;
  // How often each generated id occurs (only ids with count > 0).
  const std::unordered_map<int32_t, int32_t>& generated_counts() const { return counts_; }

 private:
  std::vector<int32_t> prompt_unique_;
  std::vector<int32_t> generated_;
  std::unordered_map<int32_t, int32_t> counts_;
};

}  // namespace rowlm::sampling
