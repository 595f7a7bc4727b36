#pragma once
// The step runner: carries out the scheduler's decisions on the model and
// its paged KV cache (and the drafter's own storage). Every call the engine
// makes to Model::forward, to kv::KvCache's row operations and to the
// drafter is made here.
//
// A step: propose() (when speculating) fills the step's DraftJobs; the
// scheduler plans the feeds; forward() feeds them all in one forward pass,
// the drafting rows' appends inside a speculative round of the cache, and
// returns each feed's logits rows; the caller samples or verifies them, then
// settle_round() keeps what verification emitted of each drafting row, and
// end_step() publishes every row still running to the prefix cache.
//
// Failure atomicity: attach(), propose() and forward() either succeed or
// throw leaving every row as it was (KV lengths and blocks, the drafter's
// rows, each request's `computed`); for propose() and forward() that rests
// on the drafter's and the model's own promises (drafter.h; a failed
// forward aborts its cache step). kv::OutOfBlocks from propose() or
// forward() means the step does not fit: the scheduler preempts a row and
// the step is planned again.
//
// Threads: the scheduler thread's (or the caller's, in manual mode) only.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "engine/drafter.h"
#include "engine/kv_room.h"
#include "engine/request_state.h"
#include "engine/step_plan.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace rowlm::engine {

// A forward pass's logits, by feed. A feed whose sampler needs only the
// argmax of its row (sampling::Sampler::argmax_is_enough: greedy, nothing
// to change the row, no logprobs) gets the row's argmax code instead of the
// row; on a backend that samples rows (Backend::sample_rows: the GPU, and
// the CPU made by make_backend, which runs the host sampler's code), a feed
// whose sampler can say how to sample its row there (Sampler::device_plan)
// gets the code and the token sampled there, and a drafting feed of a
// deterministic drafter its drafts' verdicts (sampling::draft_device_plan).
// Their logits never cross.
struct StepLogits {
  Tensor logits;  // [rows that crossed, vocab], in feed order
  // Per feed: its first row in `logits` (a drafting feed has 1 + drafts rows
  // from there), or -1 when none crossed (a prefill chunk short of the
  // sequence's end, or a feed with an argmax code).
  std::vector<int64_t> first_row;
  // Per feed: its first row among all the step's logits rows (the index of
  // its final hidden state), or -1 for a prefill chunk short of the end.
  std::vector<int64_t> state_row;
  // Per feed: its row's argmax code (backend/argmax_code.h), for the feeds
  // that get one; and for those sampled on the device, the token.
  std::vector<std::optional<int32_t>> argmax;
  std::vector<std::optional<int32_t>> sampled;
  // Per feed sampled on the device that asked for logprobs: what the device
  // reported of its raw row (null otherwise).
  std::vector<const RowLogprobStats*> logprob_stats;
  // Per drafting feed whose sampler needs only argmaxes: the argmax codes of
  // its 1 + drafts rows (verify_draft_argmax verifies from them, and those
  // rows never cross); null otherwise. Valid until the next forward().
  std::vector<const int32_t*> draft_argmax;
  // Per drafting feed verified where the logits are (Backend::sample_rows:
  // a sampling row of a deterministic drafter, on a backend that samples
  // rows): the tokens sample_rows gave its 1 + drafts rows (verdicts, then
  // the last row's draw), and their RowLogprobStats when the params ask for
  // logprobs; null otherwise. Those rows never cross either. Valid until the
  // next forward().
  std::vector<const int32_t*> draft_sampled;
  std::vector<const RowLogprobStats*> draft_stats;

  const float* row(std::size_t feed) const {
    return first_row[feed] < 0 ? nullptr : logits.data<float>() + first_row[feed] * logits.dim(1);
  }
};

class StepRunner {
 public:
  // `model` outlives the runner. `drafter` is null when not speculating.
  // With `prefix_cache`, rows reuse cached prefixes and publish theirs.
  // Preempted rows' KV is swapped to host memory up to `swap_limit` bytes
  // in all (0: never).
  StepRunner(Model& model, std::unique_ptr<kv::KvCache> cache, std::unique_ptr<Drafter> drafter, bool prefix_cache,
             std::size_t swap_limit);

  // What admission asks of the target cache, and of the drafter's storage.
  const KvAccounting& accounting() const { return accounting_; }
  const Drafter* drafter() const { return drafter_.get(); }

  // --- Admission and retirement ------------------------------------------
  // Gives the admitted request a KV row holding the longest cached prefix of
  // its tokens (short of its last token, which must be computed), or its
  // swapped-out KV (falling back to the prefix when that does not fit),
  // sets r.row and r.computed to it, and gives it a draft row.
  void attach(RequestState& r);
  // The request leaves for good (finished, cancelled, failed): its computed
  // tokens are published to the prefix cache, its KV and draft rows
  // released (or its swapped-out KV dropped). Nothing for a request without a row.
  void release(RequestState& r);
  // The request is preempted: its KV and draft rows are released without
  // publishing (what it computed was published at the end of the last
  // step), and r.computed = 0. Its KV is first copied to host memory
  // (r.swapped, through the backend's kv_read), unless swapping is off,
  // the swap limit is reached, or it holds less than a block; attach() then
  // restores it (or attaches the cached prefix if that covers it all), and
  // nothing is recomputed. Returns whether it was swapped.
  bool evict(RequestState& r);

  // --- One step ------------------------------------------------------------
  // Speculating: fills each job's proposal (Drafter::propose).
  void propose(std::span<DraftJob> jobs);
  // Feeds the plan: first every fed row at its precision switch switches
  // (kv::KvCache::switch_precision), then for each feed its tokens from request->computed (logits
  // for the sequence's last token), then its job's drafts with logits for
  // each. On success each feed without drafts has request->computed
  // advanced by its tokens; a drafting feed's is left for settle_round().
  // On any failure the drafting rows' round is rolled back and `jobs`'
  // proposals discarded before the exception propagates.
  StepLogits forward(const StepPlan& plan, std::span<DraftJob> jobs);
  // After verification of a drafting feed: the row's KV keeps `emitted` of
  // the tokens it fed, r.computed advances by as many, and the drafter keeps
  // `accepted` of its proposal. (When the drafter reads the target's state,
  // every feed with logits leaves its row's RequestState::target_state at
  // its last computed position: forward() for feeds without drafts, this
  // for drafting ones.)
  void settle_round(RequestState& r, const DraftJob& job, int emitted, int accepted);
  // End of a step, for a row still running: publishes what it computed.
  void end_step(RequestState& r);

  // --- Gauges ----------------------------------------------------------------
  // Both caches' bytes in use, and held only by their prefix caches.
  std::size_t used_bytes() const;
  std::size_t prefix_cache_bytes() const;
  // Idle: both caches' free blocks' memory back to the system (not between steps).
  void release_free_memory();

 private:
  void publish(RequestState& r);
  void plan_verification(RequestState& r, const DraftJob& job, int32_t first_row, ForwardBatch& batch);
  void keep_target_state(RequestState& r, int64_t hidden_row);

  Model& model_;
  std::unique_ptr<kv::KvCache> cache_;
  CacheAccounting accounting_;
  std::unique_ptr<Drafter> drafter_;
  const bool prefix_cache_;
  const std::size_t swap_limit_;
  std::size_t swapped_bytes_ = 0;  // held by preempted requests' r.swapped
  // The last forward's final hidden states (when the drafter reads them),
  // and each drafting row's first row there, for settle_round.
  Tensor hidden_;
  RowPicks picks_;  // the last forward's
  std::unordered_map<uint64_t, int64_t> round_hidden_row_;
};

}  // namespace rowlm::engine
