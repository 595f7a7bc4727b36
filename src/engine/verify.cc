#include "engine/verify.h"

#include <exception>
#include <span>

#include "sampling/speculative.h"

namespace rowlm::engine {

Verdict verify(Output& output, RequestState& r, const DraftJob& job, const float* logits) {
  const int g = int(job.tokens.size());
  const std::size_t vocab = std::size_t(output.vocab_size());
  Verdict v;
  try {
    while (v.emitted < g && !v.end) {
      const std::span<const float> row(logits + std::size_t(v.emitted) * vocab, vocab);
      const std::span<const float> q =
          job.probs.empty() ? std::span<const float>() : job.probs[std::size_t(v.emitted)];
      const sampling::DraftVerdict d =
          sampling::verify_draft_token(r.sampler, row, q, job.tokens[std::size_t(v.emitted)]);
      v.end = output.emit(r, d.token);
      ++v.emitted;
      if (!d.accepted) break;
      ++v.accepted;
    }
    if (!v.end && v.accepted == g) {
      const std::span<const float> row(logits + std::size_t(g) * vocab, vocab);
      v.end = output.emit(r, r.sampler.sample(row));
      ++v.emitted;
    }
  } catch (const std::exception& e) {
    v.end = FinishReason::Error;
    v.error = e.what();
  }
  output.drafts_verified(r, g, v.accepted);
  return v;
}

}  // namespace rowlm::engine
