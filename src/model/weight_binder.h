#pragma once
// Binding checkpoint tensors into DecoderWeights: the part of every family's
// loader that is not about names. A family's bind function is written once
// against the Source interface below and runs on either source:
//
//   CheckpointSource  tensors of a checkpoint under a name prefix, checked
//                     for dtype and the shape the config implies, as
//                     zero-copy views (matrices) or owned f32 (vectors);
//   SyntheticSource   random tensors of the same shapes (bf16 matrices ~
//                     N(0, stddev), or those quantized, vectors near 1,
//                     scalars 1), for benchmarks and tests.
//
// Source interface: prefix(); has(rel); tensor(rel, shape) (a view of any
// rank); matrix(rel, shape) -> Weight, shape [rows, cols] or a stack
// [E, rows, cols] (experts) viewed as [E·rows, cols]; first_matrix_of(full
// names, shape); vector(rel, size) -> f32 Tensor; scalar(rel); first_of(full
// names, shape). Each stored tensor is counted once in weight_bytes (bytes
// as stored) and parameter_count (a quantized matrix counts rows · cols).
//
// MLX-quantized matrices: `<p>.weight` (u32 codes) with `<p>.scales` and
// `<p>.biases` beside it is an affine Weight (backend/weight.h). Its bits
// and group size follow from the shapes (codes: cols·bits/32 words a row,
// scales: cols/group a row) and must agree with config.json's quantization
// (quantization_config.h) for that module when the config has one.

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/decoder.h"
#include "model/quantization_config.h"
#include "quant/affine.h"

namespace rowlm::decoder {

class CheckpointSource {
 public:
  CheckpointSource(const Checkpoint& checkpoint, std::string prefix, DecoderWeights& weights,
                   QuantizationConfig quantization = {});

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& rel) const { return ck_.contains(prefix_ + rel); }
  Tensor tensor(const std::string& rel, const Shape& shape) { return bind(prefix_ + rel, shape); }
  Weight matrix(const std::string& rel, const Shape& shape) { return bind_matrix(prefix_ + rel, shape); }
  Weight first_matrix_of(const std::vector<std::string>& candidates, const Shape& shape);
  Tensor vector(const std::string& rel, int64_t size);
  float scalar(const std::string& rel);
  // The first of `candidates` (full names) that exists, bound with `shape`.
  Tensor first_of(const std::vector<std::string>& candidates, const Shape& shape);

  [[noreturn]] void fail(const std::string& name, const std::string& what) const;

 private:
  const SafetensorsEntry& check(const std::string& name) const;
  Tensor bind(const std::string& name, const Shape& shape);
  Weight bind_matrix(const std::string& name, const Shape& shape);
  Weight bind_affine(const std::string& name, const std::string& stem, const Shape& shape);
  void count(const std::string& name, const SafetensorsEntry& e, int64_t parameters);

  const Checkpoint& ck_;
  std::string prefix_;
  DecoderWeights& w_;
  QuantizationConfig quant_;
  std::set<std::string> bound_;
};

class SyntheticSource {
 public:
  // With `quantize`, every matrix is the random bf16 matrix quantized with
  // that spec (bf16 scales and biases), as `rowlm quantize` would store it.
  SyntheticSource(uint64_t seed, float stddev, DecoderWeights& weights,
                  std::optional<quant::AffineSpec> quantize = std::nullopt);

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string&) const { return false; }
  Tensor tensor(const std::string& rel, const Shape& shape);
  Weight matrix(const std::string& rel, const Shape& shape);
  Weight first_matrix_of(const std::vector<std::string>& names, const Shape& shape) {
    return matrix(names.front(), shape);
  }
  Tensor vector(const std::string& rel, int64_t size);
  float scalar(const std::string&) { return 1.0f; }
  Tensor first_of(const std::vector<std::string>& names, const Shape& shape) { return tensor(names.front(), shape); }

 private:
  // n elements of the stream into d, in parallel chunks for large n (the
  // same values as drawn one by one).
  void fill_bf16(uint16_t* d, int64_t n);
  ThreadPool& pool();
  uint64_t state_;
  float std_;
  DecoderWeights& w_;
  std::optional<quant::AffineSpec> quantize_;
  std::string prefix_;
  std::unique_ptr<ThreadPool> pool_;  // made on the first large tensor
};

// An expert bank from stacked expert tensors, each viewed as a matrix of E
// equal row blocks: gate and up [E·I, H] and down [E·H, I] (MLX's
// switch_glu / switch_mlp), or one gate_up [E·2I, H] whose block e is
// expert e's gate rows then its up rows (transformers' Mixtral-style
// experts). The experts are row views of the stacks.
ExpertBank experts_from_stacks(const Weight& gate, const Weight& up, const Weight& down, int64_t experts);
ExpertBank experts_from_gate_up_stack(const Weight& gate_up, const Weight& down, int64_t experts);

// An affine Weight holding `t` ([rows, cols] f32, bf16 or f16 values)
// quantized with `spec`, scales and biases stored as `params`: what MLX's
// quantizer computes (quant/affine.h) and `rowlm quantize` writes, owned by
// the result. An Error if cols are not whole groups and 32-bit words.
Weight quantize_matrix(const Tensor& t, const quant::AffineSpec& spec, DType params = DType::BF16);

// Throws if the checkpoint holds tensors of layers at or past `num_layers`
// under `prefix` (a checkpoint made for another config: binding would
// silently ignore them).
void check_layer_count(const Checkpoint& checkpoint, const std::string& prefix, int num_layers);

// A family's weights from a checkpoint directory: the text decoder's prefix
// found, the checkpoint checked against the config (`check(checkpoint,
// prefix)`), every tensor bound by `bind(source, weights)`.
template <class Check, class Bind>
DecoderWeights load_checkpoint_weights(const std::string& model_dir, const QuantizationConfig& quantization,
                                       const Check& check, const Bind& bind) {
  const Checkpoint ck = Checkpoint::open(model_dir);
  const std::string prefix = detect_text_prefix(ck);
  check(ck, prefix);
  DecoderWeights w;
  w.storage = ck.storage();
  CheckpointSource b(ck, prefix, w, quantization);
  bind(b, w);
  return w;
}

}  // namespace rowlm::decoder
