#include "engine/verify.h"

#include <exception>
#include <span>

#include "core/error.h"
#include "sampling/speculative.h"

namespace rowlm::engine {

namespace {

// The loop, over row j's verdict for draft j (check(j, q, draft)) and the
// token sampled from the last row when every draft is kept (last(g)).
template <class Check, class Last>
Verdict verify_rows(Output& output, RequestState& r, const DraftJob& job, Check&& check, Last&& last) {
  const int g = int(job.tokens.size());
  Verdict v;
  try {
    while (v.emitted < g && !v.end) {
      const std::span<const float> q =
          job.probs.empty() ? std::span<const float>() : job.probs[std::size_t(v.emitted)];
      const sampling::DraftVerdict d = check(std::size_t(v.emitted), q, job.tokens[std::size_t(v.emitted)]);
      v.end = output.emit(r, d.token);
      ++v.emitted;
      if (!d.accepted) break;
      ++v.accepted;
    }
    if (!v.end && v.accepted == g) {
      v.end = output.emit(r, last(std::size_t(g)));
      ++v.emitted;
    }
  } catch (const std::exception& e) {
    v.end = FinishReason::Error;
    v.error = e.what();
  }
  output.drafts_verified(r, g, v.accepted);
  return v;
}

}  // namespace

Verdict verify(Output& output, RequestState& r, const DraftJob& job, const float* logits) {
  const std::size_t vocab = std::size_t(output.vocab_size());
  auto row = [&](std::size_t j) { return std::span<const float>(logits + j * vocab, vocab); };
  return verify_rows(
      output, r, job,
      [&](std::size_t j, std::span<const float> q, int32_t draft) {
        return sampling::verify_draft_token(r.sampler, row(j), q, draft);
      },
      [&](std::size_t j) { return r.sampler.sample(row(j)); });
}

Verdict verify(Output& output, RequestState& r, const DraftJob& job, const int32_t* argmax_codes) {
  return verify_rows(
      output, r, job,
      [&](std::size_t j, std::span<const float> q, int32_t draft) {
        return sampling::verify_draft_argmax(r.sampler, argmax_codes[j], q, draft);
      },
      [&](std::size_t j) { return r.sampler.sample_argmax(argmax_codes[j]); });
}

Verdict verify_on_device(Output& output, RequestState& r, const DraftJob& job, const int32_t* tokens,
                         const RowLogprobStats* stats) {
  auto stats_of = [&](std::size_t j) { return stats ? stats + j : nullptr; };
  return verify_rows(
      output, r, job,
      [&](std::size_t j, std::span<const float> q, int32_t draft) {
        ROWLM_CHECK(q.empty(), "a draft verified on the device has a deterministic drafter");
        return sampling::verify_draft_on_device(r.sampler, tokens[j], stats_of(j), draft);
      },
      [&](std::size_t j) { return r.sampler.sampled_on_device(tokens[j], stats_of(j)); });
}

}  // namespace rowlm::engine
