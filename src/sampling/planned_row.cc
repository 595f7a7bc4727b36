#include "sampling/planned_row.h"

#include <limits>
#include <vector>

#include "backend/cpu/row_argmax.h"
#include "core/error.h"
#include "sampling/logits_processor.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"
#include "sampling/speculative.h"

namespace rowlm::sampling {

int32_t sample_planned_row(std::span<float> row, const RowSampling& r, std::span<const RowSamplingEdit> edits,
                           std::span<const uint64_t> masks, RowLogprobStats* stats) {
  const int64_t V = int64_t(row.size());
  ROWLM_CHECK(V > 0, "sample_planned_row: empty row");
  ROWLM_CHECK(r.edits_begin >= 0 && r.edits_begin <= r.edits_end && std::size_t(r.edits_end) <= edits.size(),
              "sample_planned_row: the row's edits lie outside the edit list");
  ROWLM_CHECK(r.mask_begin < 0 || std::size_t(r.mask_begin) + std::size_t((V + 63) / 64) <= masks.size(),
              "sample_planned_row: the row's mask lies outside the mask words");
  ROWLM_CHECK(r.logprobs < 0 || stats != nullptr, "sample_planned_row: logprobs asked for and no stats");
  // A copy of the raw row for its logprobs.
  std::vector<float> raw;
  if (r.logprobs >= 0) raw.assign(row.begin(), row.end());
  // 0. The grammar's mask (the constraint's, as the host sampler applies it
  // first), then process_logits' checks; the raw row's logprob inputs only
  // for a row that passes them (the host takes logprobs after sampling).
  if (r.mask_begin >= 0)
    for (int64_t i = 0; i < V; ++i)
      if (!(masks[std::size_t(r.mask_begin + (i >> 6))] >> (i & 63) & 1)) row[std::size_t(i)] = -std::numeric_limits<float>::infinity();
  if (const int32_t code = cpu::argmax_code(row_kernels(), row); code < 0) return code;
  if (r.logprobs >= 0) *stats = raw_logprob_stats(raw, r.logprobs);
  // 1. Bias, repetition, presence and frequency, per distinct id: the order
  // process_logits applies them in, one id at a time (they touch one entry each).
  for (int32_t e = r.edits_begin; e < r.edits_end; ++e) {
    const RowSamplingEdit& ed = edits[std::size_t(e)];
    ROWLM_CHECK(ed.id >= 0 && ed.id < V, "sample_planned_row: an edit outside the row");
    float& x = row[std::size_t(ed.id)];
    if (ed.has_bias) x += ed.bias;
    if (ed.repeated && r.repetition_penalty != 1.0f) x = x > 0 ? x / r.repetition_penalty : x * r.repetition_penalty;
    if (ed.count > 0 && (r.presence != 0.0f || r.frequency != 0.0f)) x -= r.presence + r.frequency * float(ed.count);
  }
  auto out = [&](int32_t token, bool rejected) {
    if (stats) stats->chosen_logit = raw[std::size_t(token)];
    return rejected ? token | kDraftRejected : token;
  };
  // The distribution p where a draft is verified (next_token_probs).
  std::vector<float> probs;
  auto verdict = [&] {
    const RejectionResult v = speculative_accept(probs, {}, r.draft, r.u, r.u_residual);
    return out(v.token, !v.accepted);
  };
  // 2. Greedy.
  if (r.temperature == 0.0f) {
    const int32_t a = argmax(row);
    if (r.draft < 0) return out(a, false);
    probs.assign(std::size_t(V), 0.0f);
    probs[std::size_t(a)] = 1.0f;
    return verdict();
  }
  // 3-5. Temperature, top-k, top-p, min-p (process_logits' steps).
  std::vector<cpu::RowScan> blocks;
  const float max = cpu::scan_row(row_kernels(), row, int64_t(kMassBlock), blocks).max;
  row_kernels().shift_divide(row.data(), V, max, r.temperature);
  keep_top_k(row, r.top_k);
  keep_top_p(row, r.top_p);
  if (r.min_p_floor > -std::numeric_limits<float>::infinity()) row_kernels().remove_below(row.data(), V, r.min_p_floor);
  probs.resize(std::size_t(V));
  if (r.draft >= 0) {
    softmax(row, probs);
    return verdict();
  }
  // 6. Sampler::sample's draw.
  std::vector<double> block_mass;
  const double total = exp_masses(row, probs, block_mass, 0.0f).total;
  return out(walk_masses(probs, block_mass, total, r.u), false);
}

}  // namespace rowlm::sampling
