#include "backend/cpu/affine_order.h"

#include <cstring>

#include "core/error.h"

namespace rowlm::cpu {

Tensor halves32_from_stream(const Tensor& codes, int64_t rows, int64_t cols) {
  ROWLM_CHECK(cols % 16 == 0 && codes.dtype() == DType::U32 && codes.numel() == rows * cols / 8,
              "halves32_from_stream: codes must be u32 [rows, cols / 8] with cols a multiple of 16");
  Tensor out(DType::U32, codes.shape());
  const int64_t row_bytes = cols / 2, blocks = cols / 32;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* in = static_cast<const uint8_t*>(codes.raw()) + r * row_bytes;
    auto* o = static_cast<uint8_t*>(out.raw()) + r * row_bytes;
    // Stream order: code c is byte c / 2's low nibble when c is even, its
    // high nibble when odd; so codes i and i + 16 of a block are the same
    // nibble of bytes i / 2 and 8 + i / 2.
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* s = in + b * 16;
      uint8_t* d = o + b * 16;
      for (int j = 0; j < 8; ++j) {
        d[2 * j] = uint8_t((s[j] & 0x0f) | (s[8 + j] & 0x0f) << 4);
        d[2 * j + 1] = uint8_t((s[j] >> 4) | (s[8 + j] & 0xf0));
      }
    }
    // An odd multiple of 16: the last 16 codes keep the stream's bytes.
    std::memcpy(o + blocks * 16, in + blocks * 16, std::size_t(row_bytes - blocks * 16));
  }
  return out;
}

Tensor bytes_from_6bit_stream(const Tensor& codes, int64_t rows, int64_t cols, ThreadPool& pool) {
  ROWLM_CHECK(cols % 16 == 0 && codes.dtype() == DType::U32 && codes.numel() == rows * cols * 6 / 32,
              "bytes_from_6bit_stream: codes must be u32 [rows, cols * 6 / 32] with cols a multiple of 16");
  Tensor out(DType::U32, Shape{rows, cols / 4});
  pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // Four codes in every three bytes of the stream (little-endian words:
      // the bytes in stream order), a row being whole such groups.
      const auto* b = static_cast<const uint8_t*>(codes.raw()) + r * cols * 6 / 8;
      auto* o = static_cast<uint8_t*>(out.raw()) + r * cols;
      for (int64_t c = 0; c < cols; c += 4, b += 3) {
        const uint32_t v = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16;
        o[c] = uint8_t(v & 63);
        o[c + 1] = uint8_t(v >> 6 & 63);
        o[c + 2] = uint8_t(v >> 12 & 63);
        o[c + 3] = uint8_t(v >> 18 & 63);
      }
    }
  });
  return out;
}

}  // namespace rowlm::cpu
