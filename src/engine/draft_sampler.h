#pragma once
// A drafter's own sampler for one row: the request's sampling parameters
// with the target sampler's seed (a request without a seed drew one once)
// and no logprobs, drawing from RandomStream::kDraft. Between steps it holds
// the request's accepted tokens (penalties and the step count see them);
// inside propose() it also holds that step's drafts, which forget() drops.
//
// Threads: the scheduler thread's, like the drafter that owns it.

#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/drafter.h"
#include "engine/request_state.h"
#include "sampling/sampler.h"

namespace rowlm::engine {

class DraftSampler {
 public:
  DraftSampler(const RequestState& r, int64_t vocab)
      : vocab_(vocab), sampler_(params_of(r), vocab, std::span(r.tokens).first(std::size_t(r.prompt_length))) {}

  // Accepts the request's generated tokens it has not seen yet.
  void follow(const RequestState& r) {
    for (int32_t t : r.generated().subspan(std::size_t(sampler_.step()))) sampler_.accept(t);
  }
  // Samples the job's next draft from a row of draft logits and appends it
  // (with q, unless greedy: a greedy draw's q is one-hot, as an empty q says).
  void draw(DraftJob& job, const float* logits) {
    const std::span<const float> l(logits, std::size_t(vocab_));
    const sampling::SampledToken s = sampler_.sample(l, sampling::RandomStream::kDraft);
    if (!sampler_.params().greedy()) job.probs.push_back(sampler_.next_token_probs(l));
    job.tokens.push_back(s.token);
    sampler_.accept(s.token);  // later drafts see it (penalties, step)
  }
  // Drops the last `drafts` drawn tokens.
  void forget(std::size_t drafts) { sampler_.rollback(drafts); }

 private:
  static sampling::SamplingParams params_of(const RequestState& r) {
    sampling::SamplingParams p = r.request.sampling;
    p.seed = r.sampler.seed();
    p.logprobs.reset();
    return p;
  }

  int64_t vocab_;
  sampling::Sampler sampler_;
};

}  // namespace rowlm::engine
