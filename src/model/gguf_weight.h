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
// Errors name the file and the tensor: a type rowlm cannot read, or an
// affine layout (bits, group size) that quant/affine.h does not accept.

#include "backend/weight.h"
#include "io/gguf.h"

namespace rowlm {

// `t` must belong to `file` (whose owner the views keep alive).
Weight gguf_weight(const gguf::File& file, const gguf::TensorInfo& t);

// A tensor of any rank: a view for F32/F16/BF16, else gguf_f32().
Tensor gguf_tensor(const gguf::File& file, const gguf::TensorInfo& t);

// The tensor's values as an owned f32 tensor of shape t.shape() (norm
// vectors, scalars, anything the model keeps in f32).
Tensor gguf_f32(const gguf::File& file, const gguf::TensorInfo& t);

}  // namespace rowlm
