#pragma once
// A row of logits sampled where it lies (Backend::sample_rows): the steps of
// sampling/logits_processor.h for one request, prepared on the host by its
// sampling::Sampler (device_plan), so that on a GPU only the chosen token
// crosses back. The backend performs the sampler's arithmetic in the
// sampler's order (the same floats, the same double sums), so a row gives
// the token sampling::Sampler::sample gives for it, bit for bit.
//
// The steps, in order:
//   0. a grammar's mask (mask_begin >= 0): entries whose bit is clear become
//      −inf; then the row must hold no NaN or +inf and some finite entry,
//      else the token is the row's argmax code (backend/argmax_code.h: < 0);
//   1. edits: per distinct id, x += bias (when has_bias); then, when
//      repeated and repetition_penalty != 1, x = x > 0 ? x / r : x · r; then,
//      when count > 0 and (presence or frequency), x −= presence +
//      frequency · count;
//   2. greedy (temperature 0): the first index of the largest value; done;
//   3. x = (x − max) / temperature;
//   4. top_k (0 < k < V): entries below the k-th largest value become −inf;
//   5. top_p (< 1): masses exp(x) in fixed point (top_p_mass), their exact
//      total, the boundary's value: the largest v whose entries at or above
//      it (among those above top_p_floor, from top_p_log_tail) hold p ·
//      total; entries below it become −inf, unless none reaches it;
//      then min_p_floor (> −inf): entries below it become −inf (the
//      sampler's bound for max 0, which steps 3-5 leave as the row's max);
//   6. masses exp(x) (exp_neg; 0 below −87) summed per 1024-entry block in
//      the CPU kernels' canonical order, the blocks' sums added in double
//      in order, and the inverse-CDF walk for u (sampler.cc walk_masses).
// A row with logprobs >= 0 also reports, of its raw row (before step 1),
// what sampling/logprobs.cc needs besides one logarithm, which the host
// takes: the row's max, the double total of exp(x − max) summed as in step
// 6, the chosen token's logit, and the `logprobs` most likely entries
// (value desc, index asc) with their logits.
//
// A row with draft >= 0 verifies that draft token instead of drawing
// (sampling/speculative.h verify_draft_token, for a deterministic drafter:
// q one-hot at the draft). After steps 0-5 it takes p as the host's
// next_token_probs does (greedy: one-hot at step 2's index; else the
// masses of step 6 times float(1 / total)), keeps the draft when p(draft)
// >= 1 or u < p(draft) (u: the sampler's kSpecAccept draw), and otherwise
// draws from the residual (p with the draft's entry zeroed; p itself, that
// is the draft, when nothing else is left) with u_residual (its
// kSpecResidual draw) as sampling::draw_token does: per 1024-entry block,
// eight double lanes of entries ≡ lane (mod 8) added in order, the lanes
// added in order, the blocks in order, and the walk. Its token is the draft
// when kept, else kDraftRejected | the replacement; a row sample() would
// refuse still gets its argmax code.

#include <cstdint>
#include <limits>

namespace rowlm {

struct RowSamplingEdit {
  int32_t id = 0;
  float bias = 0.0f;
  int32_t count = 0;      // times generated (presence/frequency)
  uint8_t has_bias = 0;   // in logit_bias
  uint8_t repeated = 0;   // seen in the prompt or generated (repetition penalty)
};

struct RowSampling {
  int32_t row = 0;  // the logits row (index into the rows sample_rows is given)
  // The row's edits: [edits_begin, edits_end) of the edit list, ids distinct.
  int32_t edits_begin = 0, edits_end = 0;
  float repetition_penalty = 1.0f, presence = 0.0f, frequency = 0.0f;
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;                // 1: off
  double top_p_log_tail = 0.0;       // log((1 − top_p) / V), the host's (top_p_floor)
  float min_p_floor = -std::numeric_limits<float>::infinity();
  double u = 0.0;            // the draw, in [0, 1)
  int32_t logprobs = -1;     // -1: none; else alternatives to report (<= kMaxRowLogprobs)
  // The row's allowed tokens, a bit each, from this index of the mask words
  // ((V + 63) / 64 of them); -1: all allowed.
  int32_t mask_begin = -1;
  // >= 0: verify this draft token (above); u is then the acceptance draw.
  int32_t draft = -1;
  double u_residual = 0.0;  // the residual's draw, in [0, 1)
};

// A verifying row's token when its draft was rejected: this bit over the
// replacement (rows are at most argmax_code::kMaxRow = 2^30 entries, so no
// token has it, and codes < 0 keep their meaning).
inline constexpr int32_t kDraftRejected = int32_t(1) << 30;

inline constexpr int kMaxRowLogprobs = 20;  // sampling::kMaxTopLogprobs

// What sample_rows reports of a row's raw logits (see above).
struct RowLogprobStats {
  double total = 0.0;
  float max = 0.0f;
  float chosen_logit = 0.0f;
  int32_t count = 0;  // alternatives below
  int32_t top[kMaxRowLogprobs] = {};
  float top_logit[kMaxRowLogprobs] = {};
};

}  // namespace rowlm
