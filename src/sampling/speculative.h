#pragma once
// Lossless verification of draft tokens (speculative sampling: Leviathan et
// al., ICML 2023; Chen et al., 2023). A draft token x drawn from q is kept
// with probability min(1, p(x) / q(x)); if it is not, the token is drawn from
// the residual max(0, p - q), renormalized. The result is distributed
// exactly as p. With one-hot p (greedy) this keeps x iff x is the argmax and
// otherwise yields the argmax, so greedy speculative decoding produces the
// same tokens as plain decoding.
//
// Engine use, for draft tokens x_0..x_{g-1} and target logits rows 0..g:
//   for j in 0..g-1:
//     v = verify_draft_token(sampler, logits[j], q_j, x_j)
//     sampler.accept(v.token.token); emit v.token
//     if !v.accepted: stop (roll the KV back past x_j)
//   if all were accepted: t = sampler.sample(logits[g]); accept and emit t
// Row j is verified at the sampler's step, which advances as tokens are
// accepted, so draws are keyed exactly as in plain decoding. A draft model
// gets its own Sampler with the request's params (so q sees the same
// penalties), holding the same accepted tokens plus its drafts, and draws
// with sample(logits, RandomStream::kDraft): never the target's bits.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace rowlm::sampling {

struct RejectionResult {
  bool accepted;  // the draft token was kept
  int32_t token;  // the draft token, or its replacement
};

// The rejection step on explicit distributions. q empty means a
// deterministic drafter (n-gram lookup): q is one-hot at draft_token. The
// uniforms are in [0, 1).
RejectionResult speculative_accept(std::span<const float> p, std::span<const float> q,
                                   int32_t draft_token, double u_accept, double u_residual);

struct DraftVerdict {
  bool accepted;
  SampledToken token;  // with logprobs when the request asks for them
};

// Verifies draft_token against the target's logits at sampler.step(), with
// uniforms from the sampler's seed at that step (RandomStream::kSpecAccept
// and kSpecResidual). draft_probs: the draft's next_token_probs for this
// position, or empty for a deterministic drafter.
DraftVerdict verify_draft_token(const Sampler& target, std::span<const float> target_logits,
                                std::span<const float> draft_probs, int32_t draft_token);

// verify_draft_token's verdict from the row's argmax code alone
// (backend/argmax_code.h), for a target whose argmax is enough
// (Sampler::argmax_is_enough: greedy, nothing that changes the row, no
// logprobs). There p is one-hot at the argmax a, so the acceptance test
// needs p(x) ∈ {0, 1} and q(x) only (a draft x = a is kept; another only
// where q(x) = 0), and a rejected draft is replaced by a: the residual
// max(0, p − q) has mass at a alone, or none, and then p is drawn from. The
// same checks, in the same order, with the same errors (a row's NaN, +inf
// or lack of a finite value is named by its code as the full row's check
// names it).
DraftVerdict verify_draft_argmax(const Sampler& target, int32_t argmax_code, std::span<const float> draft_probs,
                                 int32_t draft_token);

// verify_draft_token on the device that holds the logits, for a
// deterministic drafter (draft_probs empty): the row's description for
// Backend::sample_rows (backend/row_sampling.h: Sampler::device_plan with
// draft and the kSpecAccept / kSpecResidual draws at target.step()), and
// the verdict from the token sample_rows gives for it (with `stats` when
// the params ask for logprobs): verify_draft_token's verdict, or its error,
// bit for bit. A draft model's dense q stays on the host, and its rows with
// it (verify_draft_token). nullopt where device_plan gives nullopt.
std::optional<RowSampling> draft_device_plan(Sampler& target, int32_t draft_token, std::vector<RowSamplingEdit>& edits,
                                             std::vector<uint64_t>& masks);
DraftVerdict verify_draft_on_device(const Sampler& target, int32_t device_token, const RowLogprobStats* stats,
                                    int32_t draft_token);

}  // namespace rowlm::sampling
