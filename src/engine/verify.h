#pragma once
// Speculative verification of one row's drafts against the target's logits:
// the loop documented in sampling/speculative.h, emitting through Output and
// ending early where the request ends (stop token, stop string, max_tokens,
// the context). It decides what the row keeps; settling the row's KV round
// and the drafter to that is the StepRunner's (settle_round).

#include <optional>
#include <string>

#include "engine/drafter.h"
#include "engine/output.h"
#include "engine/request_state.h"

namespace rowlm::engine {

struct Verdict {
  // Tokens emitted: the accepted drafts, then a replacement for the first
  // rejected one or, all accepted, one more from the last logits row; fewer
  // where the request ended. The row's KV keeps that many of the tokens it
  // fed (its last sampled token and the drafts).
  int emitted = 0;
  int accepted = 0;  // drafts kept
  // How the request ends, if an emitted token ended it; Error (with `error`)
  // if emitting threw. The caller finishes the request after settling.
  std::optional<FinishReason> end;
  std::string error;
};

// The row fed its last sampled token and job.tokens (g drafts) with logits
// for all: `logits` holds 1 + g rows of output.vocab_size() floats. Emits
// the kept tokens and counts the drafts (Output::drafts_verified).
Verdict verify(Output& output, RequestState& r, const DraftJob& job, const float* logits);
// The same from the rows' argmax codes (1 + g of them), for a sampler whose
// argmax is enough (sampling::verify_draft_argmax): the same verdict.
Verdict verify(Output& output, RequestState& r, const DraftJob& job, const int32_t* argmax_codes);
// The same from the tokens Backend::sample_rows gave for the rows'
// descriptions (StepLogits::draft_sampled: sampling::verify_draft_on_device
// for each draft, Sampler::sampled_on_device for the last row), with their
// 1 + g RowLogprobStats when the params ask for logprobs (else null).
Verdict verify_on_device(Output& output, RequestState& r, const DraftJob& job, const int32_t* tokens,
                         const RowLogprobStats* stats);

}  // namespace rowlm::engine
