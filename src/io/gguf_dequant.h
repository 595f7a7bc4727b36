#pragma once
// Dequantization of ggml tensor data to f32, written from ggml's block
// definitions (ggml-common.h) and reference dequantizers (ggml-quants.c,
// dequantize_row_*), in their arithmetic order. This is rowlm's reference
// for what a GGUF tensor holds: the loader converts quantized tensors to
// affine weights (gguf_affine.h), and the tests check that conversion
// against this, and this against gguf-py's gguf.quants.dequantize.

#include <cstddef>
#include <span>

#include "io/gguf_types.h"

namespace rowlm::gguf {

// Decodes out.size() values (a whole number of blocks) of `type` from
// `blocks` (exactly out.size() / block_size blocks). Supported types: F32,
// F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K;
// others throw rowlm::Error naming the type.
void dequantize(GgmlType type, std::span<const std::byte> blocks, std::span<float> out);

}  // namespace rowlm::gguf
