#include "sampling/speculative.h"

#include <vector>

#include "core/error.h"

namespace rowlm::sampling {

RejectionResult speculative_accept(std::span<const float> p, std::span<const float> q,
                                   int32_t draft_token, double u_accept, double u_residual) {
  ROWLM_CHECK(draft_token >= 0 && std::size_t(draft_token) < p.size(), "draft token outside the vocabulary");
  ROWLM_CHECK(q.empty() || q.size() == p.size(), "draft and target distributions differ in size");
  auto q_at = [&](std::size_t i) -> double {
    return q.empty() ? (i == std::size_t(draft_token) ? 1.0 : 0.0) : double(q[i]);
  };
  const double px = p[draft_token], qx = q_at(draft_token);
  // Keep with probability min(1, p/q), written without the division.
  if (px >= qx || u_accept * qx < px) return {true, draft_token};

  std::vector<float> residual(p.size());
  double mass = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double r = double(p[i]) - q_at(i);
    residual[i] = r > 0 ? float(r) : 0.0f;
    mass += residual[i];
  }
  // p(x) < q(x) implies p has mass where q has less, unless rounding ate it.
  if (mass <= 0) return {false, draw_token(p, u_residual)};
  return {false, draw_token(residual, u_residual)};
}

namespace {
void check_draft(const Sampler& target, std::span<const float> draft_probs, int32_t draft_token) {
  if (!draft_probs.empty() && int64_t(draft_probs.size()) != target.vocab_size())
    throw Error("draft distribution has " + std::to_string(draft_probs.size()) +
                " entries, the target vocabulary " + std::to_string(target.vocab_size()));
  if (draft_token < 0 || draft_token >= target.vocab_size())
    throw Error("draft token " + std::to_string(draft_token) + " is outside the target vocabulary");
}
}  // namespace

DraftVerdict verify_draft_argmax(const Sampler& target, int32_t argmax_code, std::span<const float> draft_probs,
                                 int32_t draft_token) {
  check_draft(target, draft_probs, draft_token);
  const int32_t a = target.sample_argmax(argmax_code).token;
  const double px = a == draft_token ? 1.0 : 0.0;
  const double qx = draft_probs.empty() ? 1.0 : double(draft_probs[std::size_t(draft_token)]);
  // speculative_accept's test, with the same uniform.
  const bool kept =
      px >= qx || uniform01(target.seed(), uint64_t(target.step()), RandomStream::kSpecAccept) * qx < px;
  return {kept, SampledToken{kept ? draft_token : a, std::nullopt}};
}

DraftVerdict verify_draft_token(const Sampler& target, std::span<const float> target_logits,
                                std::span<const float> draft_probs, int32_t draft_token) {
  check_draft(target, draft_probs, draft_token);
  const std::vector<float> p = target.next_token_probs(target_logits);
  const uint64_t step = uint64_t(target.step());
  const RejectionResult r =
      speculative_accept(p, draft_probs, draft_token, uniform01(target.seed(), step, RandomStream::kSpecAccept),
                         uniform01(target.seed(), step, RandomStream::kSpecResidual));
  return {r.accepted, target.chosen(target_logits, r.token)};
}

std::optional<RowSampling> draft_device_plan(Sampler& target, int32_t draft_token, std::vector<RowSamplingEdit>& edits,
                                             std::vector<uint64_t>& masks) {
  std::optional<RowSampling> r = target.device_plan(edits, masks);
  if (!r) return r;
  const uint64_t step = uint64_t(target.step());
  r->draft = draft_token;
  r->u = uniform01(target.seed(), step, RandomStream::kSpecAccept);
  r->u_residual = uniform01(target.seed(), step, RandomStream::kSpecResidual);
  return r;
}

DraftVerdict verify_draft_on_device(const Sampler& target, int32_t device_token, const RowLogprobStats* stats,
                                    int32_t draft_token) {
  check_draft(target, {}, draft_token);  // verify_draft_token's first errors
  const bool rejected = device_token >= 0 && (device_token & kDraftRejected) != 0;
  const int32_t token = rejected ? device_token & ~kDraftRejected : device_token;
  SampledToken t = target.sampled_on_device(token, stats);  // a refused row's error
  ROWLM_CHECK(rejected || token == draft_token, "a device kept a draft and named another token");
  return {!rejected, std::move(t)};
}

}  // namespace rowlm::sampling
