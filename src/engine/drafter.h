#pragma once
// Drafters propose tokens for speculative decoding inside the continuous
// batch; the engine verifies them all in its one target forward per step.
//
// A step with speculation: the engine gives each running row a DraftJob
// (decoding rows with max_tokens = γ_row, the others with 0), calls
// propose() once for all of them, verifies each row's proposal against the
// target's logits, and reports back with resolve() (or discard() if the
// step is replanned). A drafter that keeps per-row state (the draft model's
// KV rows) follows the rows through attach() / detach(). A drafter that
// continues from the target's state (the Gemma 4 assistant) reads the
// target's KV rows through propose()'s TargetView, and the target's hidden
// state of each row's last computed position from the request
// (RequestState::target_state, kept when reads_target_state()).
//
// What a drafter proposes may depend only on the row's own tokens and
// sampling parameters, never on other rows: with sampling, the emitted
// tokens depend on which positions were drafted and what was proposed, and
// a request's output must not depend on the batch.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/request_state.h"
#include "kv/kv_cache.h"
#include "model/gemma4_assistant.h"
#include "model/model.h"

namespace rowlm::engine {

// The target model and its KV cache, for drafters that read them during
// propose(): the cache's rows hold each request's computed tokens.
struct TargetView {
  Model& model;
  kv::KvCache& cache;
};

struct DraftJob {
  RequestState* request = nullptr;
  // Most tokens to propose after the row's sequence; 0 = none (a row in
  // prefill, or with no room to speculate): the drafter only keeps up.
  int max_tokens = 0;
  // Filled by propose(): at most max_tokens tokens, and for a sampling
  // drafter the distribution q each was drawn from (one per token; empty
  // when the drafter is deterministic, i.e. q is one-hot at the token).
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> probs;
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // Admission, while other rows run: whether the drafter's own storage can
  // take `request` reaching `tokens` positions beside the rows it holds.
  virtual bool has_room(const RequestState& /*request*/, int64_t /*tokens*/) const { return true; }
  // The request was admitted (or resumed after preemption) / has left the
  // batch (finished, cancelled or preempted).
  virtual void attach(RequestState& /*request*/) {}
  virtual void detach(RequestState& /*request*/) {}

  // Proposes tokens for every job with max_tokens > 0. Throws
  // kv::OutOfBlocks (leaving every row as it was before the call) when the
  // drafter's storage is full; the engine then preempts a row and replans.
  virtual void propose(std::span<DraftJob> jobs, const TargetView& target) = 0;
  // The row's proposal was verified: its first `accepted` tokens were kept.
  virtual void resolve(const DraftJob& /*job*/, int /*accepted*/) {}
  // This step's proposals will not be verified (the target forward must be
  // replanned): forget them.
  virtual void discard(std::span<DraftJob> /*jobs*/) {}
  // End of a step: the row's accepted tokens may be published for reuse.
  virtual void after_step(RequestState& /*request*/) {}

  // Whether the step runner should keep RequestState::target_state.
  virtual bool reads_target_state() const { return false; }

  // Memory for the engine's gauges (0 for a stateless drafter).
  virtual std::size_t used_bytes() const { return 0; }
  virtual std::size_t prefix_cache_bytes() const { return 0; }
  // An idle engine hands its free KV memory back (kv::KvCache::release_free_memory).
  virtual void release_free_memory() {}
};

// Prompt lookup: the longest recent n-gram of the row's tokens (n = 3..1)
// that occurred earlier in them, followed by what came after it there.
std::unique_ptr<Drafter> make_ngram_drafter();
// The lookup itself: the last n tokens (n = max_n down to min_n, the first
// that matches wins) at their most recent earlier occurrence; the proposal is
// what followed there, read on through the proposal itself, so a repeating
// pattern continues past the end of `tokens`. At most max_tokens tokens.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int max_tokens, int max_n = 3, int min_n = 1);

// A draft model on `backend` (the target's) with its own KV cache (its own layout, one row per running
// request holding the request's accepted tokens): drafts are sampled with the
// draft's own sampler (the request's parameters, RandomStream::kDraft) one
// batched draft forward per draft position. The caller has checked that the
// draft's vocabulary is the target's.
// `step_tokens`: the most tokens a row appends between settle points (for
// admission's projected bytes); `overcommit`: admission holds room for the
// rows as they stand, not their max_length (SchedulerOptions::overcommit).
std::unique_ptr<Drafter> make_model_drafter(std::unique_ptr<Model> draft, Backend& backend, kv::CacheOptions cache_options,
                                            bool prefix_cache, int64_t step_tokens, bool overcommit);

// The Gemma 4 assistant (model/gemma4_assistant.h): no KV of its own; each
// round's drafts are one batched assistant step per draft position over the
// drafting rows, reading the target's rows (up to their computed length)
// and each row's target state. Sampled drafts use the request's parameters
// with RandomStream::kDraft, like the draft model's.
std::unique_ptr<Drafter> make_assistant_drafter(std::unique_ptr<gemma4::Assistant> assistant);

}  // namespace rowlm::engine
