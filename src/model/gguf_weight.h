#pragma once
// A GGUF tensor as the engine's Weight (backend/weight.h). F32, F16 and BF16
// tensors are zero-copy views of the mapped file (WeightFormat::Dense).
// Block-quantized tensors are converted at load into WeightFormat::Affine,
// the one quantized format rowlm's kernels run (the same as MLX
// checkpoints): codes repacked as uint32 words, one scale and bias per group
// (gguf_affine.h gives each type's bits, group and parameters). Scales and
// biases are stored as f16 when every one of the tensor's values is exactly
// an f16, else as f32, so the conversion never rounds: the affine weight
// dequantizes to what ggml's dequantizer gives (gguf_affine.h says where
// Q6_K may differ in the last place).
//
// A 3-D tensor (stacked experts, [E, rows, cols] outermost first) is the
// matrix [E·rows, cols], as the weight binder's stacks are.
//
// Errors name the file and the tensor: a type rowlm cannot read, or an
// affine layout (bits, group size) that quant/affine.h does not accept.

#include <memory>
#include <span>

#include "backend/weight.h"
#include "io/gguf.h"

namespace rowlm {

// `t`'s bytes must stay alive as long as the result: they belong to `file`
// (whose owner the views keep) unless `owner` is given (gguf_permute_rows).
Weight gguf_weight(const gguf::File& file, const gguf::TensorInfo& t, std::shared_ptr<const void> owner = nullptr);

// A tensor of any rank: a view for F32/F16/BF16, else gguf_f32().
Tensor gguf_tensor(const gguf::File& file, const gguf::TensorInfo& t, std::shared_ptr<const void> owner = nullptr);

// A copy of `t` whose rows (the outermost dimension; a vector's elements)
// are reordered: row r of the copy is row from[r] of `t`. Rows move as
// bytes, so block types stay exact. `storage` holds the copy's bytes, which
// `info.bytes` points into. Throws naming the tensor if `from` does not
// have one entry per row or a vector is of a block type.
struct PermutedTensor {
  gguf::TensorInfo info;
  std::shared_ptr<const void> storage;
};
PermutedTensor gguf_permute_rows(const gguf::File& file, const gguf::TensorInfo& t, std::span<const int64_t> from);

// The tensor's values as an owned f32 tensor of shape t.shape() (norm
// vectors, scalars, anything the model keeps in f32).
Tensor gguf_f32(const gguf::File& file, const gguf::TensorInfo& t);

}  // namespace rowlm
