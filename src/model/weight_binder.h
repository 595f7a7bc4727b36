#pragma once
// Binding checkpoint tensors into DecoderWeights: the part of every family's
// loader that is not about names. A family's bind function is written once
// against the Source interface below and runs on either source:
//
//   CheckpointSource  tensors of a checkpoint under a name prefix, checked
//                     for dtype and the shape the config implies, as
//                     zero-copy views (matrices) or owned f32 (vectors);
//   SyntheticSource   random tensors of the same shapes (bf16 matrices ~
//                     N(0, stddev), vectors near 1, scalars 1), for
//                     benchmarks and tests.
//
// Source interface: prefix(); has(rel); tensor(rel, shape) (a view of any
// rank: stacked experts); matrix(rel, {rows, cols}) -> Weight;
// vector(rel, size) -> f32 Tensor; scalar(rel); first_of(full names, shape).
// Each stored tensor is counted once in weight_bytes and parameter_count.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/decoder.h"

namespace rowlm::decoder {

class CheckpointSource {
 public:
  CheckpointSource(const Checkpoint& checkpoint, std::string prefix, DecoderWeights& weights);

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& rel) const { return ck_.contains(prefix_ + rel); }
  Tensor tensor(const std::string& rel, const Shape& shape) { return bind(prefix_ + rel, shape); }
  Weight matrix(const std::string& rel, const Shape& shape) { return Weight::dense(tensor(rel, shape)); }
  Tensor vector(const std::string& rel, int64_t size);
  float scalar(const std::string& rel);
  // The first of `candidates` (full names) that exists, bound with `shape`.
  Tensor first_of(const std::vector<std::string>& candidates, const Shape& shape);

  [[noreturn]] void fail(const std::string& name, const std::string& what) const;

 private:
  const SafetensorsEntry& check(const std::string& name) const;
  Tensor bind(const std::string& name, const Shape& shape);

  const Checkpoint& ck_;
  std::string prefix_;
  DecoderWeights& w_;
  std::set<std::string> bound_;
};

class SyntheticSource {
 public:
  SyntheticSource(uint64_t seed, float stddev, DecoderWeights& weights);

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string&) const { return false; }
  Tensor tensor(const std::string& rel, const Shape& shape);
  Weight matrix(const std::string& rel, const Shape& shape) { return Weight::dense(tensor(rel, shape)); }
  Tensor vector(const std::string& rel, int64_t size);
  float scalar(const std::string&) { return 1.0f; }
  Tensor first_of(const std::vector<std::string>& names, const Shape& shape) { return tensor(names.front(), shape); }

 private:
  float normal();
  uint64_t state_;
  float std_;
  DecoderWeights& w_;
  std::string prefix_;
};

// An expert bank from stacked expert tensors, each viewed as a matrix of E
// equal row blocks: gate and up [E·I, H] and down [E·H, I] (MLX's
// switch_glu / switch_mlp), or one gate_up [E·2I, H] whose block e is
// expert e's gate rows then its up rows (transformers' Mixtral-style
// experts). The experts are row views of the stacks.
ExpertBank experts_from_stacks(const Weight& gate, const Weight& up, const Weight& down, int64_t experts);
ExpertBank experts_from_gate_up_stack(const Weight& gate_up, const Weight& down, int64_t experts);

// Throws if the checkpoint holds tensors of layers at or past `num_layers`
// under `prefix` (a checkpoint made for another config: binding would
// silently ignore them).
void check_layer_count(const Checkpoint& checkpoint, const std::string& prefix, int num_layers);

}  // namespace rowlm::decoder
