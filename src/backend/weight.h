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
  // MLX affine quantization along cols (quant/affine.h): w[r, c] =
  // scale[r, c/g]·q[r, c] + bias[r, c/g] in f32 (two roundings), g the
  // group size (16, 32, 64 or 128; cols a multiple of it).
  //  - values: the codes, u32 [rows, cols·bits/32], bits 2, 3, 4, 5, 6 or 8
  //    (cols·bits a multiple of 32). Each row is one little-endian bit
  //    stream: code c in bits [c·bits, (c+1)·bits), bit b of the stream
  //    being bit b % 32 of word b / 32. So for 2, 4 and 8 bits code j of a
  //    word sits in bits [j·bits, (j+1)·bits); 3- and 6-bit codes come in
  //    MLX's packs of 3 bytes (8 resp. 4 codes) and 5-bit codes in packs of
  //    5 bytes (8 codes), a code crossing a byte (and word) boundary
  //    continuing in the next byte's low bits, e.g. for 3 bits byte 0 holds
  //    q0 | q1 << 3 | (q2 & 3) << 6 and byte 1 q2 >> 2 | q3 << 1 | ...
  //  - scales, biases: [rows, cols/g], both f32, both bf16 or both f16.
  // The CPU backend runs every combination (bits 4 and 8 on fast paths,
  // 6-bit codes widened to one a byte by its prepare_weight to take the
  // 8-bit path);
  // a matmul with an affine weight equals, bitwise, the dense f32 matmul of
  // the dequantized matrix, with f32 activations, under either precision on
  // the CPU and under f32 precision on the GPU. Under bf16 precision the
  // CUDA backend multiplies 4-bit codes on tensor cores with the
  // activations rounded to bf16, as it multiplies bf16 weights
  // (backend/cuda/gemm_affine.h).
  Affine,
};

// The order of an affine weight's codes within each row.
enum class CodeOrder : uint8_t {
  // The bit stream above (every checkpoint's order).
  Stream,
  // The CPU backend's (its prepare_weight repacks 4-bit codes so): blocks
  // of 32 codes in 16 bytes, byte i holding code i of the block in its low
  // nibble and code i + 16 in its high one, so that one 16-byte load widens
  // into two steps of 16 codes in order; a row's last 16 codes, when cols
  // is an odd multiple of 16, stay in stream order. The same number of
  // words per row as the stream.
  Halves32,
  // The CUDA backend's, for 4- and 8-bit codes where cols is a multiple of
  // lanes16_block_codes(bits): blocks of 16 words, word j of a block holding
  // the block's codes j, j + 16, j + 32, … from its low bits up, so that 16
  // lanes, lane j reading word j, each get the codes of the columns it sums
  // (k ≡ j mod 16) in increasing k from one 4-byte load per word.
  Lanes16,
  // The CUDA backend's under bf16 matmul precision, for 4-, 5-, 6- and
  // 8-bit codes where rows and cols are multiples of 16: tiles of 16 × 16
  // codes in the tensor cores' fragment order, low nibbles and high bits
  // apart (backend/cuda/gemm_affine.h). Row ranges of it start and end on
  // multiples of 16 rows.
  Mma16,
};
// Codes in one 16-word block of CodeOrder::Lanes16 (128 at 4 bits, 64 at 8).
constexpr int64_t lanes16_block_codes(int bits) { return 16 * (32 / bits); }

struct Weight {
  WeightFormat format = WeightFormat::Dense;
  int64_t rows = 0, cols = 0;
  Tensor values;
  Tensor scales, biases;  // Affine only
  int bits = 0, group_size = 0;  // Affine only
  CodeOrder code_order = CodeOrder::Stream;  // Affine only
  // Affine only. Nonzero: `biases` is empty and every group's bias is
  // −implied_zero · scale, computed in f32 (exact: implied_zero is a power
  // of two), which is what the biases held (without_implied_biases). GGUF's
  // symmetric types (Q4_0, Q5_0, Q8_0, Q3_K, Q6_K) convert so: their bias
  // costs a matmul bandwidth but carries nothing.
  int implied_zero = 0;

  // A dense weight viewing `t` ([rows, cols]).
  static Weight dense(Tensor t);

  bool empty() const { return values.empty() && rows * cols == 0; }
  Shape shape() const { return {rows, cols}; }
  Device device() const { return values.device(); }
  // Bytes held: the values, and for an affine weight its scales and biases.
  std::size_t nbytes() const { return values.nbytes() + scales.nbytes() + biases.nbytes(); }
  // "bf16 [256, 64]", "affine q4/64 [256, 64]".
  std::string describe() const;
  // Rows [begin, end) as a view (an expert of a stacked bank, a slice of a
  // projection): the same format and device.
  Weight row_range(int64_t begin, int64_t end) const;
  // The same elements viewed as [rows, cols] (rows · cols unchanged; for an
  // affine weight, cols must keep whole words and groups).
  Weight reshaped(int64_t rows, int64_t cols) const;
};

// `w` without its biases where each group's bias is, bit for bit, the f32
// product scale · −2^(bits−1) (see Weight::implied_zero); otherwise `w`.
// Reads every scale and bias once (host memory); Error for an affine weight
// whose parameters are not host f32/bf16/f16 tensors of one shape.
Weight without_implied_biases(const Weight& w);

// The experts of one MoE layer: gate, up and down per expert, each expert
// a gated MLP (down(act(gate·x) ⊙ up·x)).
struct ExpertBank {
  std::vector<Weight> gate, up, down;
  int size() const { return int(gate.size()); }
};

}  // namespace rowlm
