#include "model/gemma4_assistant.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/config_fields.h"
#include "model/decoder.h"
#include "model/gemma4.h"
#include "model/gemma4_config.h"
#include "model/gemma4_weights.h"
#include "model/weight_binder.h"

namespace rowlm::gemma4 {
namespace {

// Keys a sliding layer reads before the query: transformers' bidirectional
// window overlay keeps |q - kv| <= sliding_window, and the assistant flips it
// onto the last entries of the KV, so sliding_window + 1 of them.
int sliding_keys(int sliding_window) { return sliding_window + 1; }

// The target's storage layer that the last decoder layer of each kind reads
// (window layers, full layers); -1 where the target has none.
struct TargetKv {
  int sliding = -1, full = -1;
};

// `t`'s rows in `order` (row i of the result is row order[i] of `t`), owned.
Tensor permute_rows(const Tensor& t, std::span<const int32_t> order) {
  Tensor out(t.dtype(), t.shape());
  const std::size_t row = t.nbytes() / std::size_t(t.dim(0));
  for (std::size_t i = 0; i < order.size(); ++i)
    std::memcpy(static_cast<std::byte*>(out.raw()) + i * row,
                static_cast<const std::byte*>(t.raw()) + std::size_t(order[i]) * row, row);
  return out;
}

// A matrix whose rows are `w`'s in `order`, same format.
Weight permute_rows(const Weight& w, std::span<const int32_t> order) {
  Weight p = w;
  p.values = permute_rows(w.values, order);
  if (w.format == WeightFormat::Affine) {
    p.scales = permute_rows(w.scales, order);
    p.biases = permute_rows(w.biases, order);
  }
  return p;
}

TargetKv target_kv_of(const Model& target, const std::vector<kv::LayerSpec>& specs) {
  TargetKv t;
  for (int storage : target.kv_storage_of_layers()) (specs.at(std::size_t(storage)).window > 0 ? t.sliding : t.full) = storage;
  return t;
}

class AssistantImpl final : public Assistant {
 public:
  AssistantImpl(const std::string& dir, Backend& backend, const Model& target) : be_(backend) {
    const std::string source = dir + "/config.json";
    config_ = load_config(dir);
    if (!config_.assistant)
      throw Error(source + ": model_type '" + config_.model_type + "' is not a Gemma 4 assistant (gemma4_assistant)");
    const AssistantFields& a = *config_.assistant;
    const ModelInfo& ti = target.info();
    if (config_.vocab_size != ti.vocab_size)
      throw Error(source + ": the assistant's vocabulary has " + std::to_string(config_.vocab_size) +
                  " tokens, the model's " + std::to_string(ti.vocab_size) + "; it drafts the model's tokens");
    if (a.backbone_hidden_size != ti.hidden_size)
      throw Error(source + ": backbone_hidden_size is " + std::to_string(a.backbone_hidden_size) +
                  " but the model's hidden size is " + std::to_string(ti.hidden_size) +
                  "; the assistant reads the model's hidden states");
    state_size_ = a.backbone_hidden_size;

    // Which target storage each layer reads, checked against its geometry.
    const std::vector<kv::LayerSpec> specs = target.kv_layers(kv::CodecSpec{});
    const TargetKv tkv = target_kv_of(target, specs);
    read_window_ = sliding_keys(config_.sliding_window) + 1;
    decoder::DecoderConfig d = decoder_config(config_);
    d.info.directory = dir;
    d.final_softcap = 0.0f;  // transformers' assistant applies its lm_head alone
    d.per_layer_input = 0;
    for (std::size_t l = 0; l < d.layers.size(); ++l) {
      decoder::AttentionConfig& att = d.layers[l].attention;
      const bool sliding = config_.layers[l].type == LayerType::Sliding;
      const int storage = sliding ? tkv.sliding : tkv.full;
      const std::string where = source + ": layer " + std::to_string(l) + " (" +
                                (sliding ? "sliding_attention" : "full_attention") + ")";
      if (storage < 0)
        throw Error(where + " reads the model's last " + (sliding ? "sliding" : "full") +
                    " attention layer, but the model has none");
      const kv::LayerSpec& spec = specs[std::size_t(storage)];
      if (spec.head_dim != att.head_dim || spec.kv_heads != att.kv_heads)
        throw Error(where + " has " + std::to_string(att.kv_heads) + " KV heads of " + std::to_string(att.head_dim) +
                    ", but the model's KV it reads has " + std::to_string(spec.kv_heads) + " of " +
                    std::to_string(spec.head_dim));
      att.kv_source = int(l);
      att.target_kv = storage;
      // Keys P - window + 1 .. P - 1: the query's own position has no KV yet.
      att.window = sliding ? read_window_ : 0;
      reads_sliding_ = reads_sliding_ || sliding;
    }
    target_sliding_ = tkv.sliding;

    decoder::DecoderWeights w = load_weights(dir, config_);
    bind_projections(dir, w);
    if (a.use_ordered_embeddings) {
      // The head in centroid order, so that a centroid's tokens are one row
      // range; the reader then has no head of its own.
      Weight& head = config_.tie_word_embeddings ? w.embed : w.lm_head;
      ordered_head_ = be_.prepare_weight(permute_rows(head, token_ordering_));
      w.embed = Weight{};
      w.lm_head = Weight{};
    }
    info_ = d.info;
    info_.vocab_size = config_.vocab_size;
    info_.hidden_size = config_.hidden_size;
    info_.num_layers = config_.num_layers;
    info_.parameter_count = w.parameter_count;
    info_.weight_bytes = w.weight_bytes;
    info_.device = be_.name();
    reader_ = decoder::make_kv_reader(std::move(d), std::move(w), be_);
  }

  const ModelInfo& info() const override { return info_; }
  int state_size() const override { return state_size_; }

  void widen_target_windows(std::vector<kv::LayerSpec>& layers) const override {
    if (!reads_sliding_) return;
    kv::LayerSpec& spec = layers.at(std::size_t(target_sliding_));
    spec.window = std::max(spec.window, read_window_);
  }

  void step(std::span<const int32_t> tokens, const Tensor& states, std::span<const kv::AttentionQuery> queries,
            Model& target, kv::KvCache& target_cache, Tensor& logits, Tensor& next_states) override;

 private:
  void bind_projections(const std::string& dir, decoder::DecoderWeights& w);
  void ordered_logits(const Tensor& h, Tensor& logits);

  Backend& be_;
  Config config_;
  ModelInfo info_;
  int state_size_ = 0;
  bool reads_sliding_ = false;
  int read_window_ = 0;     // the attention window of the sliding layers (keys P - window + 1 .. P - 1)
  int target_sliding_ = -1;  // the target storage the sliding layers read
  std::unique_ptr<decoder::KvReader> reader_;
  Weight pre_projection_, post_projection_, centroids_;
  Weight ordered_head_;  // ordered embeddings: the head's rows in token_ordering_'s order
  std::vector<int32_t> token_ordering_;  // [num_centroids · tokens per centroid]: centroid c's tokens at c·K
  std::shared_ptr<const void> storage_;  // the checkpoint behind the projections
};

void AssistantImpl::bind_projections(const std::string& dir, decoder::DecoderWeights& w) {
  const Checkpoint ck = Checkpoint::open(dir);
  storage_ = ck.storage();
  decoder::CheckpointSource b(ck, "", w, config_.quantization);
  const int64_t Ha = config_.hidden_size, Hb = state_size_, V = config_.vocab_size;
  pre_projection_ = be_.prepare_weight(b.matrix("pre_projection.weight", {Ha, 2 * Hb}));
  post_projection_ = be_.prepare_weight(b.matrix("post_projection.weight", {Hb, Ha}));
  if (!config_.assistant->use_ordered_embeddings) return;
  const int64_t C = config_.assistant->num_centroids;
  centroids_ = be_.prepare_weight(b.matrix("masked_embedding.centroids.weight", {C, Ha}));
  const std::string name = "masked_embedding.token_ordering";
  const SafetensorsEntry* e = ck.find(name);
  if (!e) throw Error(ck.listing() + ": missing tensor '" + name + "' (config.json has use_ordered_embeddings true)");
  if (e->dtype != DType::I64 && e->dtype != DType::I32)
    b.fail(name, "has dtype " + std::string(dtype_name(e->dtype)) + "; expected i64 or i32");
  if (e->shape != Shape{V}) b.fail(name, "has shape " + shape_str(e->shape) + "; expected [" + std::to_string(V) + "]");
  const Tensor t = ck.tensor(name);
  token_ordering_.resize(std::size_t(V));
  for (int64_t i = 0; i < V; ++i) {
    const int64_t id = e->dtype == DType::I64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
    if (id < 0 || id >= V) b.fail(name, "holds token " + std::to_string(id) + " outside the vocabulary");
    token_ordering_[std::size_t(i)] = int32_t(id);
  }
}

void AssistantImpl::step(std::span<const int32_t> tokens, const Tensor& states,
                         std::span<const kv::AttentionQuery> queries, Model& target, kv::KvCache& target_cache,
                         Tensor& logits, Tensor& next_states) {
  const int64_t n = int64_t(tokens.size()), Hb = state_size_, Ha = config_.hidden_size;
  ROWLM_CHECK(int64_t(queries.size()) == n && states.dim(0) == n && states.dim(1) == Hb, "assistant step: shapes");
  Workspace& ws = be_.workspace();
  ws.reset();
  logits = be_.host_output(DType::F32, {n, int64_t(config_.vocab_size)});
  next_states = be_.host_output(DType::F32, {n, Hb});
  if (n == 0) return;
  // [target_embed(t) ; s] per row, in the order transformers concatenates.
  Tensor embedded = ws.tensor(DType::F32, {n, Hb});
  target.embed(tokens, embedded);
  Tensor host_embedded = Tensor::uninitialized(DType::F32, {n, Hb});
  be_.copy_to_host(embedded, host_embedded.raw());
  Tensor joined_host = Tensor::uninitialized(DType::F32, {n, 2 * Hb});
  for (int64_t i = 0; i < n; ++i) {
    float* row = joined_host.data<float>() + i * 2 * Hb;
    std::memcpy(row, host_embedded.data<float>() + i * Hb, std::size_t(Hb) * sizeof(float));
    std::memcpy(row + Hb, states.data<float>() + i * Hb, std::size_t(Hb) * sizeof(float));
  }
  Tensor joined = ws.tensor(DType::F32, {n, 2 * Hb});
  be_.copy_from_host(joined_host.data<float>(), joined);
  Tensor h = ws.tensor(DType::F32, {n, Ha});
  be_.matmul(joined, pre_projection_, h);
  const bool ordered = config_.assistant->use_ordered_embeddings;
  reader_->forward(h, queries, target_cache, ordered ? nullptr : &logits);  // h: the final-normed stream
  Tensor post = ws.tensor(DType::F32, {n, Hb});
  be_.matmul(h, post_projection_, post);
  be_.copy_to_host(post, next_states.raw());
  if (ordered) ordered_logits(h, logits);
}

// Scores only the tokens of each row's top-k centroids (one row range of the
// ordered head each); every other token gets the smallest of those minus 1
// (transformers' mask value).
void AssistantImpl::ordered_logits(const Tensor& h, Tensor& logits) {
  const int64_t n = h.dim(0), C = config_.assistant->num_centroids, V = config_.vocab_size, K = V / C;
  const int top = config_.assistant->centroid_intermediate_top_k;
  Tensor scores_dev = be_.workspace().tensor(DType::F32, {n, C});
  be_.matmul(h, centroids_, scores_dev);
  std::vector<float> scores(std::size_t(n * C));
  be_.copy_to_host(scores_dev, scores.data());
  Tensor part_dev = be_.workspace().tensor(DType::F32, {1, K});
  std::vector<float> part(static_cast<std::size_t>(K));
  std::vector<int> order(static_cast<std::size_t>(C));
  for (int64_t i = 0; i < n; ++i) {
    const float* s = scores.data() + i * C;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [&](int a, int b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
    float* row = logits.data<float>() + i * V;
    std::vector<std::pair<int32_t, float>> scored;
    scored.reserve(std::size_t(top * K));
    float lowest = 0.0f;
    for (int c = 0; c < top; ++c) {
      const int64_t first = int64_t(order[std::size_t(c)]) * K;
      be_.matmul(h.rows(i, i + 1), ordered_head_.row_range(first, first + K), part_dev);
      be_.copy_to_host(part_dev, part.data());
      for (int64_t j = 0; j < K; ++j) {
        scored.emplace_back(token_ordering_[std::size_t(first + j)], part[std::size_t(j)]);
        lowest = scored.size() == 1 ? part[std::size_t(j)] : std::min(lowest, part[std::size_t(j)]);
      }
    }
    std::fill(row, row + V, lowest - 1.0f);
    for (const auto& [token, logit] : scored) row[token] = logit;
  }
}

}  // namespace

bool is_assistant_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json", ec)) return false;
  config::json j;
  try {
    j = config::read_config(dir);
  } catch (const Error&) {
    return false;  // the loader that reads it next reports what is wrong
  }
  if (!j.is_object()) return false;
  if (j.contains("model_type") && j["model_type"] == "gemma4_assistant") return true;
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a == "Gemma4AssistantForCausalLM") return true;
  return false;
}

std::unique_ptr<Assistant> Assistant::load(const std::string& dir, Backend& backend, const Model& target) {
  return std::make_unique<AssistantImpl>(dir, backend, target);
}

}  // namespace rowlm::gemma4
