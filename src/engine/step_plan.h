#pragma once
// One engine step as data: what each running row feeds into the step's one
// forward pass. The Scheduler makes it (planning needs no model), the
// StepRunner carries it out.

#include <cstdint>
#include <vector>

#include "engine/request_state.h"

namespace rowlm::engine {

struct Feed {
  RequestState* request = nullptr;
  // Tokens of the request's sequence fed from position request->computed:
  // 1 for a decode step (the last sampled token, or a prompt's last token),
  // else a prefill chunk. Logits are wanted for the last of them iff it is
  // the sequence's last token.
  int64_t tokens = 0;
  // Index of the step's DraftJob whose drafts follow the token (logits for
  // every one of them), or -1. Set only for a decode step with drafts.
  int job = -1;
};

struct StepPlan {
  // Decode steps in admission order, then prefill chunks in admission order.
  std::vector<Feed> feeds;
};

}  // namespace rowlm::engine
