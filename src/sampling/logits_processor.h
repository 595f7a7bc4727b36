#pragma once
// The steps that turn a row of model logits into the distribution a token is
// drawn from. Each works in place on a vocab-sized f32 row; a token removed
// by a filter gets -inf. process_logits runs them in this fixed order (the
// order of vLLM's sampler and HF's generate, see docs in sampler.h):
//
//   0. constraint           (the Sampler's TokenConstraint, before all of these:
//                           a forbidden token gets -inf)
//   1. logit_bias           l[i] += bias[i]
//   2. repetition_penalty   for i seen in prompt or output: l > 0 ? l / r : l * r
//   3. presence/frequency   l[i] -= presence * [c_i > 0] + frequency * c_i
//                           (c_i = count of i among generated tokens)
//   -- greedy (temperature 0) stops here and takes the argmax --
//   4. temperature          l = (l - max l) / T   (the shift changes no probability)
//   5. top_k                keep tokens whose logit >= the k-th largest
//   6. top_p                keep the most likely tokens, in order, until their
//                           mass reaches top_p (over the survivors of 5; masses
//                           in fixed point, top_p_mass)
//   7. min_p                keep tokens with p >= min_p * max p
//
// Filters keep ties: a token as likely as the last one kept is kept too, so
// the kept set never depends on token ids. Every filter keeps the most
// likely token, so the set is never empty.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/cpu/kernels.h"
#include "sampling/sampling_params.h"
#include "sampling/token_history.h"

namespace rowlm::sampling {

void apply_logit_bias(std::span<float> logits, const SamplingParams& params);
void apply_repetition_penalty(std::span<float> logits, const TokenHistory& history, float penalty);
void apply_presence_frequency(std::span<float> logits, const TokenHistory& history, float presence,
                              float frequency);
void apply_temperature(std::span<float> logits, float temperature);
void keep_top_k(std::span<float> logits, int32_t k);
void keep_top_p(std::span<float> logits, float p);
void keep_min_p(std::span<float> logits, float min_p);

// Top-p's arithmetic, shared with the GPU's (backend/row_sampling.h): a
// token's mass (exp_masses') in fixed point, mass · 2^36 truncated, so that
// sums are exact whatever their order; the mass the kept tokens must reach,
// p · total; and, for a row whose largest value is `max`, the floor at or
// below which tokens cannot hold the boundary (−inf for rows shorter than
// kTopPBucketedMinSize or p > 0.999).
inline constexpr int64_t kTopPBucketedMinSize = 4096;
uint64_t top_p_mass(float mass);
uint64_t top_p_target(float p, uint64_t total);
float top_p_floor(float p, int64_t n, uint64_t total, float max);
// The floor's one logarithm, log((1 − p) / n): the host computes it for the
// GPU's floor, which is then the same float.
double top_p_log_tail(float p, int64_t n);
// keep_min_p's threshold for a row whose max is `max` (min_p > 0): entries
// below it are removed.
float min_p_floor(float max, float min_p);

// Steps 1-3 (greedy) or 1-7 (sampling). Throws if the row holds NaN or +inf
// or has no finite logit.
void process_logits(std::span<float> logits, const SamplingParams& params, const TokenHistory& history);

// Index of the largest value, the lowest index among equals.
int32_t argmax(std::span<const float> values);

// True when steps 1-3 leave every row as it is (no bias, no penalty).
bool penalties_leave_row_unchanged(const SamplingParams& params);

// True when process_logits would leave a greedy row as it is (no bias, no
// penalty), so the argmax can be taken on the model's row without a copy.
// Must name every step process_logits applies before greedy's return.
bool greedy_leaves_row_unchanged(const SamplingParams& params);

// process_logits' checks and argmax in one pass over an unprocessed row:
// the same token (lowest index among equals; +0 and -0 equal) and the same
// errors for NaN, +inf or no finite value.
int32_t checked_argmax(std::span<const float> logits);
// The token of a row's argmax code (backend/argmax_code.h: what
// Backend::argmax_rows computes on the model's device), or the error
// checked_argmax throws for the row it came from.
int32_t token_from_argmax_code(int32_t code);

// The unnormalized distribution of a processed row, which the sampler draws
// from: mass[i] = exp(logits[i] − max) (0 for −inf, and where that is below
// e^−87), from the CPU kernels' vector exp (bitwise the same on every ISA,
// within a few ulp of the exact value); block_mass[b] the sum of block b's
// kMassBlock entries (the last block may be short), each in the kernels'
// canonical order; returns the row's max and the blocks' total, summed in
// double. mass may be empty (the sums only). The row must hold a finite
// value. `max`, where the caller knows it, saves a pass: a row process_logits
// sampled has max 0 exactly (step 4 shifts it there, and every filter keeps
// the most likely token).
inline constexpr std::size_t kMassBlock = 1024;
struct RowMasses {
  float max;
  double total;
};
RowMasses exp_masses(std::span<const float> logits, std::span<float> mass, std::vector<double>& block_mass,
                     std::optional<float> max = std::nullopt);

// The CPU kernels for this CPU's ISA (ROWLM_CPU_ISA forces one), which the
// sampler's passes over a row run on: every ISA gives the same bits, so the
// choice changes only the speed.
const cpu::Kernels& row_kernels();

// softmax over a processed row into probs (same length): -inf gives 0;
// exp_masses' masses times float(1 / total).
void softmax(std::span<const float> logits, std::span<float> probs);

}  // namespace rowlm::sampling
