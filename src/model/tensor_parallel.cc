#include "model/tensor_parallel.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace rowlm::tensor_parallel {

void check_split(const decoder::DecoderConfig& config, int shards) {
  if (shards < 1) throw Error("tensor parallel: " + std::to_string(shards) + " shards; it must be at least 1");
  if (shards == 1) return;
  const std::string n = std::to_string(shards);
  for (std::size_t i = 0; i < config.layers.size(); ++i) {
    const decoder::LayerConfig& lc = config.layers[i];
    const decoder::AttentionConfig& a = lc.attention;
    const std::string where = "tensor parallel " + n + ": layer " + std::to_string(i) + " ";
    if (a.kv_heads < shards)
      throw Error(where + "has " + std::to_string(a.kv_heads) + " KV head" + (a.kv_heads == 1 ? "" : "s") +
                  ", fewer than the shards (KV heads are split, not replicated); use at most " +
                  std::to_string(a.kv_heads) + (a.kv_heads == 1 ? " shard" : " shards"));
    if (a.kv_heads % shards || a.num_heads % shards)
      throw Error(where + "has " + std::to_string(a.num_heads) + " query and " + std::to_string(a.kv_heads) +
                  " KV heads, not divisible by " + n);
    if (a.target_kv >= 0) throw Error(where + "reads another model's KV cache, which is not split");
    if (lc.ffn.kind != decoder::FfnKind::Dense)
      throw Error(where + "has routed experts (MoE), which tensor parallelism does not split yet");
    if (lc.ffn.intermediate % shards)
      throw Error(where + "has an MLP width of " + std::to_string(lc.ffn.intermediate) + ", not divisible by " + n);
  }
}

Weight split_rows(const Weight& w, int shard, int shards) {
  if (shards == 1 || w.empty()) return w;
  ROWLM_CHECK(w.rows % shards == 0, "split_rows: " + w.describe() + " into " + std::to_string(shards));
  const int64_t part = w.rows / shards;
  return w.row_range(part * shard, part * (shard + 1));
}

namespace {

// Columns [begin, end) of a row-major 2-D host tensor, copied.
Tensor copy_columns(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const std::size_t elem = dtype_size(t.dtype());
  Tensor out = Tensor::uninitialized(t.dtype(), {rows, end - begin});
  const auto* src = static_cast<const std::byte*>(t.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + std::size_t(r * (end - begin)) * elem, src + std::size_t(r * cols + begin) * elem,
                std::size_t(end - begin) * elem);
  return out;
}

}  // namespace

Weight split_columns(const Weight& w, int shard, int shards) {
  if (shards == 1 || w.empty()) return w;
  const std::string what = "tensor parallel: the columns of " + w.describe() + " into " + std::to_string(shards);
  if (w.cols % shards) throw Error(what + ": not divisible");
  if (!w.values.on_host() || w.values.rank() != 2) throw Error(what + ": not a 2-D host checkpoint weight");
  const int64_t part = w.cols / shards, begin = part * shard, end = begin + part;
  Weight out = w;
  out.cols = part;
  if (w.format == WeightFormat::Dense) {
    out.values = copy_columns(w.values, begin, end);
    return out;
  }
  // Affine: whole groups per shard, and whole 32-bit words of codes.
  if (w.code_order != CodeOrder::Stream) throw Error(what + ": codes already repacked for a backend");
  if (part % w.group_size || (part * w.bits) % 32)
    throw Error(what + ": a shard's " + std::to_string(part) + " columns would cut its quantization groups of " +
                std::to_string(w.group_size));
  out.values = copy_columns(w.values, begin * w.bits / 32, end * w.bits / 32);
  out.scales = copy_columns(w.scales, begin / w.group_size, end / w.group_size);
  if (!w.biases.empty()) out.biases = copy_columns(w.biases, begin / w.group_size, end / w.group_size);
  return out;
}

Tensor split_vector(const Tensor& v, int shard, int shards) {
  if (shards == 1 || v.empty()) return v;
  ROWLM_CHECK(v.rank() == 1 && v.dim(0) % shards == 0, "split_vector: a vector of a multiple of the shards");
  const int64_t part = v.dim(0) / shards;
  return v.rows(part * shard, part * (shard + 1));
}

Tensor all_reduce_in_order(Backend& backend, std::span<Tensor> partials) {
  ROWLM_CHECK(!partials.empty(), "all_reduce_in_order: no partials");
  for (std::size_t s = 1; s < partials.size(); ++s) backend.add(partials[0], partials[s]);
  return partials[0];
}

}  // namespace rowlm::tensor_parallel
