// The Gemma 4 assistant drafter: drafts read the target's own KV rows and
// the target's hidden state of each row's last computed position, so the
// drafter keeps no KV and catches nothing up. A round of drafts for the
// rows that draft is one batched assistant step per draft position; every
// step of a row's round queries the same position (the row's last token)
// over the target's keys up to the row's computed length
// (model/gemma4_assistant.h). The target's speculative round is the only
// state to roll back, and the step runner does that.
//
// A row drafts when the target's state of its last computed position is
// known, which holds after every step that computed it (prefill's end, a
// decode, a verification) and across preemption (RequestState keeps it).

#include <unordered_map>

#include "core/error.h"
#include "engine/draft_sampler.h"
#include "engine/drafter.h"

namespace rowlm::engine {
namespace {

class AssistantDrafter final : public Drafter {
 public:
  explicit AssistantDrafter(std::unique_ptr<gemma4::Assistant> assistant) : assistant_(std::move(assistant)) {}

  bool reads_target_state() const override { return true; }

  void attach(RequestState& r) override {
    ROWLM_CHECK(!samplers_.contains(r.id), "assistant row attached twice");
    samplers_.emplace(r.id, DraftSampler(r, assistant_->info().vocab_size));
  }
  void detach(RequestState& r) override { samplers_.erase(r.id); }

  void propose(std::span<DraftJob> jobs, const TargetView& target) override;

 private:
  DraftSampler& sampler_of(const RequestState& r) {
    auto it = samplers_.find(r.id);
    ROWLM_CHECK(it != samplers_.end(), "no assistant row for a running request");
    return it->second;
  }

  std::unique_ptr<gemma4::Assistant> assistant_;
  std::unordered_map<uint64_t, DraftSampler> samplers_;
};

void AssistantDrafter::propose(std::span<DraftJob> jobs, const TargetView& target) {
  const int64_t S = assistant_->state_size();
  std::vector<std::size_t> drafting;  // jobs that draft this step
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    DraftJob& job = jobs[i];
    job.tokens.clear();
    job.probs.clear();
    const RequestState& r = *job.request;
    sampler_of(r).follow(r);
    const bool state_known = r.row >= 0 && r.computed == r.sequence_length() - 1 &&
                             r.target_state_position == r.computed - 1 && int64_t(r.target_state.size()) == S;
    if (job.max_tokens > 0 && state_known) drafting.push_back(i);
  }
  // One batched step per draft position over the rows still drafting; each
  // row's state carries over from its previous step.
  std::vector<std::vector<float>> states(drafting.size());
  for (std::size_t k = 0; k < drafting.size(); ++k) states[k] = jobs[drafting[k]].request->target_state;
  try {
    for (int d = 0;; ++d) {
      std::vector<std::size_t> rows;  // indices into drafting
      for (std::size_t k = 0; k < drafting.size(); ++k)
        if (jobs[drafting[k]].max_tokens > d) rows.push_back(k);
      if (rows.empty()) break;
      const int64_t n = int64_t(rows.size());
      std::vector<int32_t> tokens;
      std::vector<kv::AttentionQuery> queries;
      Tensor in_states = Tensor::uninitialized(DType::F32, {n, S});
      for (int64_t j = 0; j < n; ++j) {
        const DraftJob& job = jobs[drafting[rows[std::size_t(j)]]];
        const RequestState& r = *job.request;
        tokens.push_back(d == 0 ? r.tokens.back() : job.tokens.back());
        // The row's last token, over the target's keys before it.
        queries.push_back({r.row, r.computed, r.computed});
        std::copy(states[rows[std::size_t(j)]].begin(), states[rows[std::size_t(j)]].end(),
                  in_states.data<float>() + j * S);
      }
      Tensor logits, next;
      assistant_->step(tokens, in_states, queries, target.model, target.cache, logits, next);
      for (int64_t j = 0; j < n; ++j) {
        const std::size_t k = rows[std::size_t(j)];
        DraftJob& job = jobs[drafting[k]];
        sampler_of(*job.request).draw(job, logits.data<float>() + j * logits.dim(1));
        states[k].assign(next.data<float>() + j * S, next.data<float>() + (j + 1) * S);
      }
    }
  } catch (...) {
    for (std::size_t i : drafting) {
      sampler_of(*jobs[i].request).forget(jobs[i].tokens.size());
      jobs[i].tokens.clear();
      jobs[i].probs.clear();
    }
    throw;
  }
  // Between steps the samplers hold accepted tokens only.
  for (std::size_t i : drafting) sampler_of(*jobs[i].request).forget(jobs[i].tokens.size());
}

}  // namespace

std::unique_ptr<Drafter> make_assistant_drafter(std::unique_ptr<gemma4::Assistant> assistant) {
  return std::make_unique<AssistantDrafter>(std::move(assistant));
}

}  // namespace rowlm::engine
