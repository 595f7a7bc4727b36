// Prompt-lookup drafting: text that repeats itself (code, quotations,
// lists, a model stuck in a loop) is predicted by where it repeated before.

#include <algorithm>

#include "engine/drafter.h"

namespace rowlm::engine {

std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int max_tokens, int max_n, int min_n) {
  std::vector<int32_t> out;
  const int64_t length = int64_t(tokens.size());
  if (max_tokens <= 0 || min_n < 1) return out;
  for (int64_t n = std::min<int64_t>(max_n, length - 1); n >= min_n; --n) {
    const auto suffix = tokens.subspan(std::size_t(length - n));
    // The most recent earlier start: recent text predicts best.
    for (int64_t start = length - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      // What followed, continuing into the proposal once `tokens` ends: the
      // source index stays behind the token being written, so it is known.
      for (int64_t src = start + n; int64_t(out.size()) < max_tokens; ++src)
        out.push_back(src < length ? tokens[std::size_t(src)] : out[std::size_t(src - length)]);
      return out;
    }
  }
  return out;
}

namespace {

class NgramDrafter final : public Drafter {
 public:
  void propose(std::span<DraftJob> jobs, const TargetView& /*target*/) override {
    for (DraftJob& job : jobs) {
      job.tokens = ngram_lookup(job.request->tokens, job.max_tokens);
      job.probs.clear();  // deterministic: q is one-hot at each token
    }
  }
};

}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter() { return std::make_unique<NgramDrafter>(); }

}  // namespace rowlm::engine
