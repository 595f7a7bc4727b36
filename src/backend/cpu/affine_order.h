#pragma once
// The CPU backend's order of 4-bit affine codes (backend/weight.h,
// CodeOrder::Halves32), made from the stream order by prepare_weight: the
// decode kernel then widens 32 codes from one 16-byte load and picks each
// code's dequantized value with one table lookup per 16 (the stream order
// needs a byte interleave per 16 codes first), with the same values in the
// same order, so results are unchanged.

#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace rowlm::cpu {

// `codes`: u32 [rows, cols / 8] of 4-bit codes in stream order, cols a
// multiple of 16. Returns a new tensor of the same shape in Halves32 order.
Tensor halves32_from_stream(const Tensor& codes, int64_t rows, int64_t cols);

// `codes`: u32 [rows, cols · 6 / 32] of 6-bit codes in stream order, cols a
// multiple of 16. Returns them one a byte, as an 8-bit stream (u32 [rows,
// cols / 4]): the same codes, so the same dequantized values and results.
// prepare_weight widens 6-bit codes so: the 8-bit kernels widen 16 codes
// with one instruction where 6-bit codes take a shuffle, a shift and a
// mask, and ran 6-bit weights 22-35% faster for a third more bytes
// (docs/perf.md). Rows are split over `pool`.
Tensor bytes_from_6bit_stream(const Tensor& codes, int64_t rows, int64_t cols, ThreadPool& pool);

}  // namespace rowlm::cpu
