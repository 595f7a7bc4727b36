#pragma once
// The weight binder's Source interface (weight_binder.h) over a GGUF file:
// a family's binder asks for Hugging Face names under prefix() ("model."),
// gguf_names maps them to llama.cpp's, and each tensor is checked against
// the shape the metadata implies (GGUF lists dimensions innermost first;
// shapes here are outermost first, as transformers has them). Matrices come
// back as gguf_weight() makes them (dense views or affine); tensors of other
// ranks as gguf_tensor() does, vectors and scalars as f32. Tensors that the
// architecture stores permuted for GGML's interleaved RoPE (gguf_names.h's
// rope_rows: llama's q and k) come back in transformers' row order, as
// owned copies. check_all_used() then refuses a file holding tensors the
// model did not bind (another architecture's, or more layers).

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/decoder.h"

namespace rowlm::decoder {

// The attention geometry that un-permuting q and k rows needs.
struct RopeHeads {
  int64_t query = 0, key_value = 0, head_dim = 0;
};

class GgufSource {
 public:
  GgufSource(const gguf::File& file, std::string arch, DecoderWeights& weights, RopeHeads heads = {});

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& rel) const;
  Tensor tensor(const std::string& rel, const Shape& shape);
  Weight matrix(const std::string& rel, const Shape& shape);
  Tensor vector(const std::string& rel, int64_t size);
  float scalar(const std::string& rel);
  Tensor first_of(const std::vector<std::string>& candidates, const Shape& shape);
  Weight first_matrix_of(const std::vector<std::string>& candidates, const Shape& shape);

  // Throws naming the first tensor of the file that nothing bound, unless
  // it is in `ignored` (tensors llama.cpp adds that rowlm computes itself).
  void check_all_used(const std::set<std::string>& ignored = {}) const;

 private:
  const gguf::TensorInfo* lookup(const std::string& hf_name) const;
  const gguf::TensorInfo& bind(const std::string& hf_name, const Shape& shape);
  const gguf::TensorInfo& bind_first(const std::vector<std::string>& candidates, const Shape& shape);
  // `t` (bound for `hf_name`) in transformers' row order: itself, or a
  // permuted copy whose bytes `owner` keeps.
  const gguf::TensorInfo& unpermuted(const std::string& hf_name, const gguf::TensorInfo& t,
                                     std::shared_ptr<const void>& owner, gguf::TensorInfo& copy) const;

  const gguf::File& file_;
  std::string arch_;
  RopeHeads heads_;
  std::string prefix_ = "model.";
  DecoderWeights& w_;
  std::set<std::string> bound_;  // GGUF names
};

}  // namespace rowlm::decoder
