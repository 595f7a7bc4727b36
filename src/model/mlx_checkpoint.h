#pragma once
// Writing and describing mlx-community (MLX affine) checkpoints: what
// `rowlm quantize` and `rowlm inspect` do with a model directory's tensors.
// The layout is the one weight_binder.h reads: `<p>.weight` u32 codes,
// `<p>.scales` and `<p>.biases` per quantized module, and config.json's
// `quantization` / `quantization_config` entry (quantization_config.h).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "quant/affine.h"

namespace rowlm {

// A per-module choice: modules whose tensor name contains `pattern` get
// `spec`, or stay in floating point when spec is empty. Later overrides win.
struct QuantizeOverride {
  std::string pattern;
  std::optional<quant::AffineSpec> spec;
};
// "BITS" (group 64) or "BITS/GROUP", e.g. "4/64"; an Error naming `text`
// otherwise.
quant::AffineSpec parse_quantize_spec(const std::string& text);
// "PATTERN=BITS", "PATTERN=BITS/GROUP" or "PATTERN=none" (for --override);
// an Error naming `text` otherwise.
QuantizeOverride parse_quantize_override(const std::string& text);

struct QuantizeOptions {
  quant::AffineSpec spec{4, 64};
  std::vector<QuantizeOverride> overrides;
};

struct QuantizeReport {
  int quantized = 0, kept = 0;  // matrices quantized, tensors copied unchanged
  std::size_t bytes_in = 0, bytes_out = 0;
};

// Reads the f32/bf16/f16 model directory `src` and writes `dst` (which must
// not exist or be empty) in the MLX layout: every matrix (a `.weight` of
// rank 2, or an expert stack of rank 3) whose input width is a whole number
// of groups and 32-bit words (for Gemma's per-layer embedding table, each
// layer's part of a row) is quantized as MLX does (quant/affine.h), its
// scales and biases in the matrix's own dtype; everything else is copied.
// As mlx-lm does, a Gemma 4 router (`router.proj`) is quantized to 8 bits in
// groups of 64 unless an override says otherwise, and transformers' fused
// expert stacks are written under MLX's names (`experts.gate_up_proj` split
// into `experts.switch_glu.gate_proj.weight` and `.up_proj.weight`,
// `experts.down_proj` as `experts.switch_glu.down_proj.weight`).
// config.json gains the quantization entry (defaults, per-module specs that
// differ, `false` for matrices left unquantized); every other file of `src`
// (tokenizer, chat template, generation config) is copied. Errors (an
// already quantized source, a bad spec, an unwritable destination) are
// rowlm::Error naming the problem; on error `dst` may hold partial files.
QuantizeReport quantize_checkpoint(const std::string& src, const std::string& dst, const QuantizeOptions& options);

// One stored module of a checkpoint: a dense tensor, or a quantized
// matrix with its scales and biases counted together.
struct TensorFormat {
  std::string name;    // the stored name (`<p>.weight` for a quantized matrix)
  std::string format;  // "bf16", "f32", ..., or "q4/64 (bf16 scales)"
  Shape shape;         // the logical shape (a quantized matrix's values)
  std::size_t bytes = 0;
};
// Every tensor of the model directory `dir`, sorted by name.
std::vector<TensorFormat> tensor_formats(const std::string& dir);

}  // namespace rowlm
