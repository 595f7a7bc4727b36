#include "model/gguf_source.h"

#include "core/error.h"
#include "model/gguf_names.h"
#include "model/gguf_weight.h"

namespace rowlm::decoder {

GgufSource::GgufSource(const gguf::File& file, std::string arch, DecoderWeights& weights, RopeHeads heads)
    : file_(file), arch_(std::move(arch)), heads_(heads), w_(weights) {}

const gguf::TensorInfo* GgufSource::lookup(const std::string& hf_name) const {
  const auto name = gguf_names::to_gguf(arch_, hf_name);
  return name ? file_.find_tensor(*name) : nullptr;
}

bool GgufSource::has(const std::string& rel) const { return lookup(prefix_ + rel) != nullptr; }

const gguf::TensorInfo& GgufSource::bind(const std::string& hf_name, const Shape& shape) {
  const auto name = gguf_names::to_gguf(arch_, hf_name);
  if (!name) file_.fail("GGUF " + arch_ + " files have no tensor for '" + hf_name + "'");
  const gguf::TensorInfo& t = file_.tensor(*name);
  if (t.shape() != shape)
    file_.fail("GGUF tensor '" + t.name + "' has shape " + shape_str(t.shape()) + " (ggml ne " +
               shape_str({t.ne.begin(), t.ne.end()}) + "); the metadata implies " + shape_str(shape));
  if (bound_.insert(t.name).second) {
    w_.weight_bytes += t.bytes.size();
    w_.parameter_count += t.numel();
  }
  return t;
}

const gguf::TensorInfo& GgufSource::unpermuted(const std::string& hf_name, const gguf::TensorInfo& t,
                                               std::shared_ptr<const void>& owner, gguf::TensorInfo& copy) const {
  const gguf_names::RopeRows rows = gguf_names::rope_rows(arch_, hf_name);
  if (rows == gguf_names::RopeRows::None) return t;
  const int64_t heads = rows == gguf_names::RopeRows::QueryHeads ? heads_.query : heads_.key_value;
  ROWLM_CHECK(heads > 0 && heads_.head_dim > 0, "GgufSource needs the head geometry to un-permute q and k");
  PermutedTensor p = gguf_permute_rows(file_, t, gguf_names::rope_rows_source(heads, heads_.head_dim));
  owner = std::move(p.storage);
  copy = std::move(p.info);
  return copy;
}

Tensor GgufSource::tensor(const std::string& rel, const Shape& shape) {
  std::shared_ptr<const void> owner;
  gguf::TensorInfo copy;
  const gguf::TensorInfo& t = unpermuted(prefix_ + rel, bind(prefix_ + rel, shape), owner, copy);
  return gguf_tensor(file_, t, owner);
}

Weight GgufSource::matrix(const std::string& rel, const Shape& shape) {
  std::shared_ptr<const void> owner;
  gguf::TensorInfo copy;
  const gguf::TensorInfo& t = unpermuted(prefix_ + rel, bind(prefix_ + rel, shape), owner, copy);
  return gguf_weight(file_, t, owner);
}

Tensor GgufSource::vector(const std::string& rel, int64_t size) {
  std::shared_ptr<const void> owner;
  gguf::TensorInfo copy;
  return gguf_f32(file_, unpermuted(prefix_ + rel, bind(prefix_ + rel, {size}), owner, copy));
}

float GgufSource::scalar(const std::string& rel) {
  return gguf_f32(file_, bind(prefix_ + rel, {1})).data<float>()[0];
}

const gguf::TensorInfo& GgufSource::bind_first(const std::vector<std::string>& candidates, const Shape& shape) {
  for (const std::string& name : candidates)
    if (lookup(name)) return bind(name, shape);
  std::string tried;
  for (const std::string& name : candidates) {
    const auto g = gguf_names::to_gguf(arch_, name);
    tried += (tried.empty() ? "'" : ", '") + (g ? *g : name) + "'";
  }
  file_.fail("GGUF tensor " + tried + " is missing");
}

Tensor GgufSource::first_of(const std::vector<std::string>& candidates, const Shape& shape) {
  return gguf_tensor(file_, bind_first(candidates, shape));
}

Weight GgufSource::first_matrix_of(const std::vector<std::string>& candidates, const Shape& shape) {
  return gguf_weight(file_, bind_first(candidates, shape));
}

void GgufSource::check_all_used(const std::set<std::string>& ignored) const {
  for (const gguf::TensorInfo& t : file_.tensors())
    if (!bound_.count(t.name) && !ignored.count(t.name))
      file_.fail("GGUF tensor '" + t.name + "' is not part of the " + arch_ +
                 " model the metadata describes (another architecture's, or a layer past block_count)");
}

}  // namespace rowlm::decoder
