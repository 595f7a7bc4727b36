// The draft model drafter: a small model with its own KV cache, one row per
// running request holding that request's accepted tokens.
//
// Each step it first catches every row up with its request in one draft
// forward: the tokens the target has computed (prefill chunks, one step
// behind) and, for a row that drafts, also its last sampled token, whose
// logits give the first draft. Then one draft forward per further draft
// position, for all rows still drafting. A drafting row's step is one
// speculative round of the draft cache, rolled back to what the target
// accepted.
//
// The draft row keeps up with no budget of its own, so a decoding row
// always drafts: a sampled request's output must not depend on the batch,
// and which positions were drafted is part of what decides it. (Catching up
// costs at most one prefill chunk, or a prefix the target reused from its
// cache that the draft's own prefix cache lacks.)

#include <algorithm>
#include <array>
#include <unordered_map>

#include "core/error.h"
#include "engine/draft_sampler.h"
#include "engine/drafter.h"
#include "engine/kv_room.h"

namespace rowlm::engine {
namespace {

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::unique_ptr<Model> model, Backend& backend, kv::CacheOptions cache_options, bool prefix_cache,
               int64_t step_tokens, bool overcommit)
      : model_(std::move(model)), cache_(std::move(cache_options), backend), prefix_cache_(prefix_cache),
        step_tokens_(step_tokens), overcommit_(overcommit) {}

  bool has_room(const RequestState& r, int64_t tokens) const override {
    // attach() reuses no further than the target's computed tokens, which
    // at admission is at most the sequence short of its last token.
    const int64_t max_reuse = prefix_cache_ ? std::max<int64_t>(0, r.sequence_length() - 1) : 0;
    const int64_t context = model_->info().max_position;
    std::vector<HeldRow> held;
    for (const auto& [id, row] : rows_)
      held.push_back({row.kv_row, overcommit_ ? row.request->sequence_length() : row.request->max_length(context)});
    return admission_fits(CacheAccounting(cache_), r.tokens, max_reuse, tokens, held, step_tokens_);
  }

  void attach(RequestState& r) override {
    ROWLM_CHECK(!rows_.contains(r.id), "draft row attached twice");
    const kv::RowId row = cache_.create_row();
    try {
      if (prefix_cache_) {
        cache_.retain_for_publish(row);
        // No further than the target: the draft catches up from its own
        // length, and the target's computed tokens are what it follows.
        cache_.attach_prefix(row, r.tokens, r.computed);
      }
      rows_.emplace(r.id, Row{&r, row, DraftSampler(r, model_->info().vocab_size)});
    } catch (...) {
      cache_.retire(row);
      throw;
    }
  }

  void detach(RequestState& r) override {
    auto it = rows_.find(r.id);
    if (it == rows_.end()) return;
    Row& row = it->second;
    drop_drafts(row);
    publish(row);
    cache_.retire(row.kv_row);
    rows_.erase(it);
  }

  void propose(std::span<DraftJob> jobs, const TargetView& target) override;
  void resolve(const DraftJob& job, int accepted) override;
  void discard(std::span<DraftJob> jobs) override;
  void after_step(RequestState& r) override {
    if (auto it = rows_.find(r.id); it != rows_.end()) publish(it->second);
  }

  std::size_t used_bytes() const override { return cache_.used_bytes(); }
  std::size_t prefix_cache_bytes() const override { return cache_.prefix_cache_bytes(); }
  void release_free_memory() override { cache_.release_free_memory(); }

 private:
  struct Row {
    RequestState* request;
    kv::RowId kv_row;
    DraftSampler sampler;       // the request's accepted tokens (its drafts only inside propose)
    int64_t round_fed = 0;      // accepted tokens fed at the start of the open round
  };

  Row& row_of(const RequestState& r) {
    auto it = rows_.find(r.id);
    ROWLM_CHECK(it != rows_.end(), "no draft row for a running request");
    return it->second;
  }
  void publish(Row& row) {
    if (!prefix_cache_) return;
    const int64_t length = std::min(cache_.length(row.kv_row), row.request->sequence_length());
    cache_.publish(row.kv_row, std::span(row.request->tokens).first(std::size_t(length)));
  }
  void drop_drafts(Row& row) {
    if (cache_.in_round(row.kv_row)) cache_.rollback_round(std::span(&row.kv_row, 1), std::array<int64_t, 1>{0});
  }

  std::unique_ptr<Model> model_;
  kv::KvCache cache_;
  const bool prefix_cache_;
  const int64_t step_tokens_;
  const bool overcommit_;  // admission holds room for rows as they stand (SchedulerOptions::overcommit)
  std::unordered_map<uint64_t, Row> rows_;
};

void ModelDrafter::propose(std::span<DraftJob> jobs, const TargetView& /*target*/) {
  const int64_t context = model_->info().max_position;
  std::vector<Row*> rows(jobs.size());
  std::vector<int> want(jobs.size());  // drafts this step, per job
  std::vector<kv::RowId> round;
  ForwardBatch batch;
  std::vector<std::size_t> logit_job;  // which job each logits row belongs to
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    DraftJob& job = jobs[i];
    job.tokens.clear();
    job.probs.clear();
    RequestState& r = *job.request;
    Row& row = *(rows[i] = &row_of(r));
    row.sampler.follow(r);
    const int64_t length = cache_.length(row.kv_row);
    // A drafting row feeds up to its last sampled token, whose logits give
    // the first draft; drafts stay below the draft's context.
    int n = job.max_tokens;
    if (context > 0) n = int(std::min<int64_t>(n, context - r.sequence_length()));
    if (length >= r.sequence_length()) n = 0;
    want[i] = std::max(0, n);
    const int64_t end = want[i] > 0 ? r.sequence_length() : std::min(r.computed, r.sequence_length());
    for (int64_t p = length; p < end; ++p) {
      const bool last = want[i] > 0 && p + 1 == end;
      batch.add(row.kv_row, p, r.tokens[std::size_t(p)], last);
      if (last) logit_job.push_back(i);
    }
    // A drafting row's whole step is one speculative round, so that dropping
    // it (discard, or a failure below) also un-feeds the last token whose
    // logits the next attempt needs again.
    if (want[i] > 0) {
      round.push_back(row.kv_row);
      row.round_fed = end - length;
    }
  }
  if (batch.tokens.empty()) return;

  const int64_t vocab = model_->info().vocab_size;
  cache_.begin_round(round);
  try {
    Tensor logits;
    model_->forward(batch, cache_, logits);
    for (std::size_t k = 0; k < logit_job.size(); ++k)
      rows[logit_job[k]]->sampler.draw(jobs[logit_job[k]], logits.data<float>() + int64_t(k) * vocab);
    for (int d = 1;; ++d) {
      ForwardBatch next;
      logit_job.clear();
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        if (want[i] <= d) continue;
        const RequestState& r = *jobs[i].request;
        next.add(rows[i]->kv_row, r.sequence_length() + d - 1, jobs[i].tokens.back(), true);
        logit_job.push_back(i);
      }
      if (next.tokens.empty()) break;
      model_->forward(next, cache_, logits);
      for (std::size_t k = 0; k < logit_job.size(); ++k)
        rows[logit_job[k]]->sampler.draw(jobs[logit_job[k]], logits.data<float>() + int64_t(k) * vocab);
    }
  } catch (...) {
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      drop_drafts(*rows[i]);
      rows[i]->sampler.forget(jobs[i].tokens.size());
      jobs[i].tokens.clear();
      jobs[i].probs.clear();
    }
    throw;
  }
  // Between steps the sampler holds accepted tokens only.
  for (std::size_t i = 0; i < jobs.size(); ++i) rows[i]->sampler.forget(jobs[i].tokens.size());
}

void ModelDrafter::resolve(const DraftJob& job, int accepted) {
  Row& row = row_of(*job.request);
  if (!cache_.in_round(row.kv_row)) return;
  // The round holds the accepted tokens fed first, then drafts 0..g-2 (the
  // last draft was never fed back).
  const int64_t keep = row.round_fed + std::min<int64_t>(accepted, int64_t(job.tokens.size()) - 1);
  cache_.rollback_round(std::span(&row.kv_row, 1), std::array<int64_t, 1>{keep});
}

void ModelDrafter::discard(std::span<DraftJob> jobs) {
  for (DraftJob& job : jobs) drop_drafts(row_of(*job.request));
}

}  // namespace

std::unique_ptr<Drafter> make_model_drafter(std::unique_ptr<Model> draft, Backend& backend, kv::CacheOptions cache_options,
                                            bool prefix_cache, int64_t step_tokens, bool overcommit) {
  return std::make_unique<ModelDrafter>(std::move(draft), backend, std::move(cache_options), prefix_cache, step_tokens,
                                        overcommit);
}

}  // namespace rowlm::engine
