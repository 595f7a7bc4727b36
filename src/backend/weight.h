#pragma once
// A weight matrix as a backend holds it. The model asks its backend to
// prepare every matrix once (Backend::prepare_weight) and afterwards only
// passes the handle back: whether the bytes are a host view of an mmapped
// checkpoint, an uploaded device buffer or a quantized triple is the
// backend's business, not the model's.
//
// A Weight is plain data: the logical shape [rows, cols] (out × in, as
// checkpoints store Linear weights), a format, and the tensors holding it.

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace rowlm {

enum class WeightFormat : uint8_t {
  // values: [rows, cols] f32, bf16 or f16.
  Dense,
  // MLX affine quantization along cols (quant/affine.h): values holds the
  // codes as uint32 words [rows, cols·bits/32] (little end first), scales
  // and biases [rows, cols/group_size] in bf16 or f16; w = scale·q + bias.
  Affine,
};

struct Weight {
  WeightFormat format = WeightFormat::Dense;
  int64_t rows = 0, cols = 0;
  Tensor values;
  Tensor scales, biases;  // Affine only
  int bits = 0, group_size = 0;  // Affine only

  // A dense weight viewing `t` ([rows, cols]).
  static Weight dense(Tensor t);

  bool empty() const { return values.empty() && rows * cols == 0; }
  Shape shape() const { return {rows, cols}; }
  Device device() const { return values.device(); }
  // "bf16 [256, 64]", "affine q4/64 [256, 64]".
  std::string describe() const;
  // Rows [begin, end) as a view (an expert of a stacked bank, a slice of a
  // projection): the same format and device.
  Weight row_range(int64_t begin, int64_t end) const;
  // The same elements viewed as [rows, cols] (rows · cols unchanged; for an
  // affine weight, cols must keep whole words and groups).
  Weight reshaped(int64_t rows, int64_t cols) const;
};

// The experts of one MoE layer: gate, up and down per expert, each expert
// a gated MLP (down(act(gate·x) ⊙ up·x)).
struct ExpertBank {
  std::vector<Weight> gate, up, down;
  int size() const { return int(gate.size()); }
};

}  // namespace rowlm
