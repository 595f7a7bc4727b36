#include "backend/cpu/affine_order.h"

#include <cstring>

#include "core/error.h"
#include "quant/affine.h"

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

Tensor bytes_from_stream(const Tensor& codes, int64_t rows, int64_t cols, int bits, ThreadPool& pool) {
  ROWLM_CHECK(cols % 4 == 0 && cols * bits % 32 == 0 && codes.dtype() == DType::U32 &&
                  codes.numel() == rows * quant::packed_words(cols, bits),
              "bytes_from_stream: codes must be u32 [rows, cols * bits / 32] with cols a multiple of 4");
  Tensor out(DType::U32, Shape{rows, cols / 4});
  const int64_t words = quant::packed_words(cols, bits);
  pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      quant::unpack_codes({static_cast<const uint32_t*>(codes.raw()) + r * words, std::size_t(words)}, bits,
                          {static_cast<uint8_t*>(out.raw()) + r * cols, std::size_t(cols)});
  });
  return out;
}

}  // namespace rowlm::cpu
