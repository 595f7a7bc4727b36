#include "engine/step_runner.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "sampling/speculative.h"

namespace rowlm::engine {

StepRunner::StepRunner(Model& model, std::unique_ptr<kv::KvCache> cache, std::unique_ptr<Drafter> drafter,
                       bool prefix_cache, std::size_t swap_limit)
    : model_(model), cache_(std::move(cache)), accounting_(*cache_), drafter_(std::move(drafter)),
      prefix_cache_(prefix_cache), swap_limit_(swap_limit) {}

void StepRunner::attach(RequestState& r) {
  ROWLM_CHECK(r.row < 0, "a request attached twice");
  const std::vector<int32_t>& seq = r.tokens;
  kv::RowId row = -1;
  int64_t computed = 0;
  // Blocks the prefix cache still holds are shared rather than restored.
  const bool cached = r.swapped && prefix_cache_ &&
                      cache_->match_prefix(seq, int64_t(seq.size()) - 1) >= r.swapped->length;
  if (r.swapped && !cached) {
    try {
      row = cache_->restore(*r.swapped);
      computed = r.swapped->length;
    } catch (const kv::OutOfBlocks&) {
      // Alone in the batch and still too big for its whole history at
      // once: recompute it in chunks like a new request.
    }
  }
  if (row < 0) row = cache_->create_row();
  try {
    if (prefix_cache_) cache_->retain_for_publish(row);
    r.row = row;
    r.computed = computed > 0 ? computed
                              : prefix_cache_ ? cache_->attach_prefix(row, seq, int64_t(seq.size()) - 1) : 0;
    if (drafter_) drafter_->attach(r);
  } catch (...) {
    cache_->retire(row);  // r.swapped stays for the next attempt
    r.row = -1;
    r.computed = 0;
    throw;
  }
  if (r.swapped) {  // restored, shared from the cache, or given up for recompute
    swapped_bytes_ -= r.swapped->bytes();
    r.swapped.reset();
  }
}

void StepRunner::release(RequestState& r) {
  if (r.swapped) {  // left while preempted
    swapped_bytes_ -= r.swapped->bytes();
    r.swapped.reset();
  }
  if (r.row < 0) return;
  publish(r);
  cache_->retire(r.row);
  r.row = -1;
  if (drafter_) drafter_->detach(r);
}

bool StepRunner::evict(RequestState& r) {
  // Its own published blocks are in the prefix cache, but the pressure that
  // preempts it evicts cache-only blocks: copy it out unless it is less
  // than a block (attach() shares what the cache still holds instead).
  if (r.computed >= cache_->options().block_size) {
    // Upper bound on the host bytes before copying them out.
    const std::size_t bytes = cache_->row_bytes(r.row);
    if (swapped_bytes_ + bytes <= swap_limit_) {
      r.swapped = cache_->extract(r.row);
      swapped_bytes_ += r.swapped->bytes();
    }
  }
  cache_->retire(r.row);
  r.row = -1;
  if (drafter_) drafter_->detach(r);
  r.computed = 0;
  return r.swapped.has_value();
}

void StepRunner::propose(std::span<DraftJob> jobs) {
  ROWLM_CHECK(drafter_, "propose() without a drafter");
  drafter_->propose(jobs, TargetView{model_, *cache_});
}

namespace {

// Whether a drafting row's rows can be verified where the logits are
// (sampling::draft_device_plan): a deterministic drafter's drafts (a draft
// model's dense q is on the host, and its rows verify there), inside the
// vocabulary (verify_draft_token's error for one outside is the host's),
// and no constraint (its state at each draft would have to advance through
// the drafts before the step; such rows are rare and verify on the host).
bool device_verifiable(const RequestState& r, const DraftJob& job) {
  if (!job.probs.empty() || r.sampler.constrained()) return false;
  return std::all_of(job.tokens.begin(), job.tokens.end(),
                     [&](int32_t t) { return t >= 0 && t < r.sampler.vocab_size(); });
}

}  // namespace

// Row j of a drafting row is verified at the sampler's state after drafts
// 0..j-1 were accepted: the only state in which the host's loop reaches it
// (it stops at the first rejection). So each row's description is made with
// those drafts accepted for the while, and the last row's (every draft
// kept: a plain draw) after all of them; the sampler is then as it was.
void StepRunner::plan_verification(RequestState& r, const DraftJob& job, int32_t first_row, ForwardBatch& batch) {
  sampling::Sampler& sampler = r.sampler;
  std::size_t accepted = 0;
  try {
    for (std::size_t j = 0; j <= job.tokens.size(); ++j) {
      const bool last = j == job.tokens.size();
      std::optional<RowSampling> plan =
          last ? sampler.device_plan(batch.sampling_edits, batch.sampling_masks)
               : sampling::draft_device_plan(sampler, job.tokens[j], batch.sampling_edits, batch.sampling_masks);
      ROWLM_CHECK(plan, "a row without a constraint has a plan for every row");
      plan->row = first_row + int32_t(j);
      batch.sample_on_device.push_back(*plan);
      if (last) break;
      sampler.accept(job.tokens[j]);
      ++accepted;
    }
  } catch (...) {
    sampler.rollback(accepted);
    throw;
  }
  sampler.rollback(accepted);
}

StepLogits StepRunner::forward(const StepPlan& plan, std::span<DraftJob> jobs) {
  // A row at its precision switch moves to the switch codecs before it
  // appends (kv_cache.h); one that does not fit throws OutOfBlocks like a
  // forward that does not (a row switched before it stays switched: the
  // state its retry needs).
  for (const Feed& f : plan.feeds)
    if (cache_->switch_due(f.request->row)) cache_->switch_precision(f.request->row);
  ForwardBatch batch;
  StepLogits out;
  out.first_row.assign(plan.feeds.size(), -1);
  out.state_row.assign(plan.feeds.size(), -1);
  out.argmax.assign(plan.feeds.size(), std::nullopt);
  out.sampled.assign(plan.feeds.size(), std::nullopt);
  out.logprob_stats.assign(plan.feeds.size(), nullptr);
  out.draft_argmax.assign(plan.feeds.size(), nullptr);
  out.draft_sampled.assign(plan.feeds.size(), nullptr);
  out.draft_stats.assign(plan.feeds.size(), nullptr);
  // Where the backend samples rows (the GPU's kernel; on the CPU the host
  // sampler's own code, run there), every row that can be is sampled or
  // verified there: one path on both, and no logits row crosses for it.
  const bool backend_samples = cache_->backend().samples_rows();
  // (plain feed, its batch.sample_on_device entry): a drafting feed's
  // verification entries may come between two plain feeds' entries.
  std::vector<std::pair<std::size_t, std::size_t>> sampled_feed;
  std::vector<int64_t> draft_sample(plan.feeds.size(), -1);  // a drafting feed's first such entry
  int64_t crossing = 0;          // logits rows that cross whole so far
  std::vector<kv::RowId> round;  // rows feeding drafts
  for (std::size_t i = 0; i < plan.feeds.size(); ++i) {
    const Feed& f = plan.feeds[i];
    const RequestState& r = *f.request;
    const bool ends = r.computed + f.tokens == r.sequence_length();  // the feed has a logits row
    std::optional<RowSampling> device;
    if (ends && f.job < 0 && backend_samples && !r.sampler.argmax_is_enough())
      device = f.request->sampler.device_plan(batch.sampling_edits, batch.sampling_masks);
    // A drafting feed's rows are all verified from their argmaxes where that
    // is enough (verify_draft_argmax), as a plain feed's row is sampled;
    // else, where the backend samples rows, they are verified there.
    const DraftJob* job = f.job < 0 ? nullptr : &jobs[std::size_t(f.job)];
    const bool verify_there = job && backend_samples && !r.sampler.argmax_is_enough() && device_verifiable(r, *job);
    const bool only_argmax =
        job ? verify_there || r.sampler.argmax_is_enough() : device || r.sampler.argmax_is_enough();
    for (int64_t p = r.computed; p < r.computed + f.tokens; ++p) {
      const bool last = p + 1 == r.sequence_length();
      if (last) {
        out.state_row[i] = int64_t(batch.logit_rows.size());
        if (!only_argmax) out.first_row[i] = crossing++;
        if (device) {
          device->row = int32_t(batch.logit_rows.size());
          sampled_feed.emplace_back(i, batch.sample_on_device.size());
          batch.sample_on_device.push_back(*device);
        }
      }
      batch.add(r.row, p, r.tokens[std::size_t(p)], last, only_argmax);
    }
    if (!job) continue;
    if (verify_there) {
      ROWLM_CHECK(out.state_row[i] >= 0, "a drafting feed ends at its sequence's end");
      draft_sample[i] = int64_t(batch.sample_on_device.size());
      plan_verification(*f.request, *job, int32_t(out.state_row[i]), batch);
    }
    for (std::size_t j = 0; j < job->tokens.size(); ++j) {
      batch.add(r.row, r.computed + 1 + int64_t(j), job->tokens[j], true, only_argmax);
      if (!only_argmax) ++crossing;
    }
    round.push_back(r.row);
  }

  // The drafted rows' KV appends happen inside a speculative round, rolled
  // back to what verification keeps.
  const bool keep_state = drafter_ && drafter_->reads_target_state();
  round_hidden_row_.clear();
  cache_->begin_round(round);
  try {
    model_.forward(batch, *cache_, out.logits, keep_state ? &hidden_ : nullptr, &picks_);
  } catch (...) {
    cache_->rollback_round(round, std::vector<int64_t>(round.size(), 0));
    if (drafter_) drafter_->discard(jobs);
    throw;
  }
  for (std::size_t i = 0; i < plan.feeds.size(); ++i) {
    const Feed& f = plan.feeds[i];
    if (f.job >= 0) {
      if (keep_state) round_hidden_row_[f.request->id] = out.state_row[i];
      if (const int64_t d = draft_sample[i]; d >= 0) {
        out.draft_sampled[i] = picks_.sampled.data() + d;
        if (!picks_.logprob_stats.empty()) out.draft_stats[i] = picks_.logprob_stats.data() + d;
      } else if (out.first_row[i] < 0) {
        out.draft_argmax[i] = picks_.argmax.data() + out.state_row[i];
      }
      continue;
    }
    if (out.state_row[i] >= 0 && out.first_row[i] < 0) out.argmax[i] = picks_.argmax[std::size_t(out.state_row[i])];
    f.request->computed += f.tokens;
    if (keep_state && out.state_row[i] >= 0) keep_target_state(*f.request, out.state_row[i]);
  }
  for (const auto& [feed, entry] : sampled_feed) {
    out.sampled[feed] = picks_.sampled[entry];
    if (!picks_.logprob_stats.empty()) out.logprob_stats[feed] = &picks_.logprob_stats[entry];
  }
  return out;
}

void StepRunner::settle_round(RequestState& r, const DraftJob& job, int emitted, int accepted) {
  cache_->rollback_round(std::span(&r.row, 1), std::array<int64_t, 1>{emitted});
  r.computed += emitted;
  // The state of the last kept token: the fed token's row, then the drafts'.
  if (const auto it = round_hidden_row_.find(r.id); it != round_hidden_row_.end() && emitted > 0 && it->second >= 0)
    keep_target_state(r, it->second + emitted - 1);
  drafter_->resolve(job, accepted);
}

void StepRunner::keep_target_state(RequestState& r, int64_t hidden_row) {
  const int64_t H = hidden_.dim(1);
  const float* row = hidden_.data<float>() + hidden_row * H;
  r.target_state.assign(row, row + H);
  r.target_state_position = r.computed - 1;
}

void StepRunner::end_step(RequestState& r) {
  publish(r);
  if (drafter_) drafter_->after_step(r);
}

void StepRunner::publish(RequestState& r) {
  if (!prefix_cache_ || r.row < 0) return;
  cache_->publish(r.row, std::span(r.tokens).first(std::size_t(r.computed)));
}

std::size_t StepRunner::used_bytes() const {
  return cache_->used_bytes() + (drafter_ ? drafter_->used_bytes() : 0);
}

void StepRunner::release_free_memory() {
  cache_->release_free_memory();
  if (drafter_) drafter_->release_free_memory();
}

std::size_t StepRunner::prefix_cache_bytes() const {
  return cache_->prefix_cache_bytes() + (drafter_ ? drafter_->prefix_cache_bytes() : 0);
}

}  // namespace rowlm::engine
