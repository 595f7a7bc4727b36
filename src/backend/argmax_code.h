#pragma once
// What Backend::argmax_rows writes for one row of logits: the row's argmax,
// or why a sampler must refuse the row. One int32 per row, so that a step's
// greedy rows cross from a GPU to the host as a few bytes each instead of a
// vocabulary of floats.
//
//   code >= 0          the index of the row's largest value, the lowest
//                      index among equals (+0 and −0 are equal)
//   kNoFinite (−1)     no entry is finite (−inf only; −inf marks a token
//                      removed, so it is allowed elsewhere)
//   −2 − 2i            the first entry that is NaN or +inf is i, a NaN
//   −3 − 2i            ... a +inf
//
// Rows are at most 2^30 entries, so every code fits.

#include <cstdint>

#include "core/tensor.h"

namespace rowlm::argmax_code {

inline constexpr int32_t kNoFinite = -1;
inline constexpr int64_t kMaxRow = int64_t(1) << 30;

constexpr int32_t bad_at(int64_t i, bool nan) { return int32_t(-2 - 2 * i - (nan ? 0 : 1)); }

// For a code below kNoFinite: the entry it names, and whether it is a NaN.
struct Bad {
  int64_t index;
  bool nan;
};
constexpr Bad bad(int32_t code) { return {(int64_t(-2) - code) / 2, (int64_t(-2) - code) % 2 == 0}; }

}  // namespace rowlm::argmax_code

namespace rowlm {
// Backend::argmax_rows' shapes and types (both backends check them).
void check_argmax_rows(const Tensor& x, const Tensor& codes);
}  // namespace rowlm
