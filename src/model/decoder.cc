#include "model/decoder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_set>

#include "core/error.h"
#include "model/shard_workers.h"
#include "model/tensor_parallel.h"

namespace rowlm::decoder {

RopeFrequencies default_rope(int head_dim, double theta, double factor, int rotated_pairs) {
  RopeFrequencies f;
  f.head_dim = head_dim;
  f.inv_freq.assign(std::size_t(head_dim / 2), 0.0f);
  const int rotated = rotated_pairs < 0 ? head_dim / 2 : rotated_pairs;
  const float base = float(theta);
  for (int k = 0; k < rotated; ++k) {
    // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in f32;
    // the exponent's denominator is the whole head, also when proportional.
    const float exponent = float(2 * k) / float(head_dim);
    f.inv_freq[std::size_t(k)] = float(1.0f / std::pow(base, exponent)) / float(factor);
  }
  return f;
}

namespace {

void check_config(const DecoderConfig& c) {
  const auto fail = [](const std::string& what) { throw Error("decoder config: " + what); };
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.layers.empty()) fail("vocab, hidden size and layers must be positive");
  for (std::size_t r = 0; r < c.ropes.size(); ++r)
    if (c.ropes[r].head_dim <= 0 || c.ropes[r].head_dim % 2 || int(c.ropes[r].inv_freq.size()) != c.ropes[r].head_dim / 2)
      fail("rope table " + std::to_string(r) + " does not match its head_dim");
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    const AttentionConfig& a = c.layers[i].attention;
    const std::string where = "layer " + std::to_string(i) + ": ";
    if (a.num_heads <= 0 || a.kv_heads <= 0 || a.head_dim <= 0 || a.num_heads % a.kv_heads)
      fail(where + "query heads must be a positive multiple of KV heads");
    if (a.rope < 0 || std::size_t(a.rope) >= c.ropes.size() || c.ropes[std::size_t(a.rope)].head_dim != a.head_dim)
      fail(where + "no rope table of its head_dim");
    if (a.kv_source < 0 || std::size_t(a.kv_source) > i) fail(where + "reads the K/V of a later layer");
    if (a.target_kv >= 0 && std::size_t(a.kv_source) != i) fail(where + "reads both target storage and layer " + std::to_string(a.kv_source));
    if (std::size_t(a.kv_source) != i) {
      const AttentionConfig& d = c.layers[std::size_t(a.kv_source)].attention;
      if (!c.layers[std::size_t(a.kv_source)].owns_kv(a.kv_source) || d.kv_heads != a.kv_heads ||
          d.head_dim != a.head_dim || (d.window == 0) != (a.window == 0) || a.window > d.window)
        fail(where + "reads layer " + std::to_string(a.kv_source) + ", whose K/V do not match it");
    }
    const FfnConfig& f = c.layers[i].ffn;
    if (f.kind != FfnKind::Experts && f.intermediate <= 0) fail(where + "the MLP needs a positive width");
    if (f.kind != FfnKind::Dense && (f.experts <= 0 || f.top_k <= 0 || f.top_k > f.experts || f.expert_intermediate <= 0))
      fail(where + "experts, top_k and the experts' width must be positive, top_k at most the experts");
  }
}

class DecoderModel final : public Model {
 public:
  DecoderModel(DecoderConfig config, DecoderWeights weights, Backend& backend, std::string description,
               int shards = 1, std::vector<std::shared_ptr<Backend>> shard_backends = {})
      : devices_(std::move(shard_backends)), cfg_(std::move(config)), w_(std::move(weights)), be_(backend), description_(std::move(description)),
        shards_(shards) {
    check_config(cfg_);
    tensor_parallel::check_split(cfg_, shards_);
    place_shards();
    ROWLM_CHECK(w_.layers.size() == cfg_.layers.size(), "weights do not match the config");
    info_ = cfg_.info;
    info_.vocab_size = cfg_.vocab_size;
    info_.hidden_size = cfg_.hidden_size;
    info_.num_layers = int(cfg_.layers.size());
    info_.parameter_count = w_.parameter_count;
    info_.weight_bytes = w_.weight_bytes;
    info_.device = be_.name();
    info_.tensor_parallel = shards_;
    for (std::size_t l = 0; l < cfg_.layers.size(); ++l) {
      const AttentionConfig& a = cfg_.layers[l].attention;
      if (a.target_kv >= 0)
        storage_of_.push_back(a.target_kv);
      else
        storage_of_.push_back(std::size_t(a.kv_source) == l ? num_storage_++ : storage_of_.at(std::size_t(a.kv_source)));
    }
    prepare();
  }

  const ModelInfo& info() const override { return info_; }

  std::vector<kv::LayerSpec> kv_layers(const kv::CodecSpec& codec) const override {
    std::vector<kv::LayerSpec> out;
    for (std::size_t l = 0; l < cfg_.layers.size(); ++l) {
      const AttentionConfig& a = cfg_.layers[l].attention;
      // Shard s of logical storage layer i is storage layer i·N + s (storage()).
      if (cfg_.layers[l].owns_kv(int(l)))
        for (int s = 0; s < shards_; ++s) out.push_back({a.kv_heads / shards_, a.head_dim, a.window, codec});
    }
    return out;
  }

  std::vector<Backend*> kv_backends() const override {
    if (!workers_) return {};
    std::vector<Backend*> out;  // in kv_layers()'s order: storage layer i·N + s on shard s's
    for (std::size_t l = 0; l < cfg_.layers.size(); ++l)
      if (cfg_.layers[l].owns_kv(int(l)))
        for (Backend* b : shard_be_) out.push_back(b);
    return out;
  }
  std::string describe() const override { return description_; }
  using Model::forward;
  void forward(const ForwardBatch& batch, kv::KvCache& cache, Tensor& logits, Tensor* hidden, RowPicks* picks) override;
  void embed(std::span<const int32_t> tokens, Tensor& out) override;
  std::vector<int> kv_storage_of_layers() const override {
    // A reader of this cache (the Gemma 4 assistant) would read one shard's heads only.
    if (shards_ > 1) throw Error("a model split by tensor parallelism does not share its KV cache with a drafter");
    return storage_of_;
  }
  // KvReader::forward (every layer reads target storage).
  void forward_states(Tensor& h, std::span<const kv::AttentionQuery> queries, kv::KvCache& cache, Tensor* logits);
  const DecoderConfig& config() const { return cfg_; }

 private:
  // One shard's part of a layer's split projections (tensor_parallel.h);
  // with one shard, the whole projections.
  // On the shard's backend, with the replicated vectors its projections
  // read (the norms before them), uploaded there too.
  struct ShardWeights {
    Weight q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
    Tensor q_bias, k_bias, v_bias;
    Tensor attn_norm, ffn_norm, q_norm, k_norm;
  };
  // One shard's attention inputs and output within a layer.
  struct ShardAttention {
    Tensor q, k, v;  // on the shard's backend
    Tensor attn;     // on the model's backend (the cache's)
  };

  // One step's inputs on the device, shared by every layer.
  struct Step {
    int64_t T = 0;
    Tensor tokens, positions;                  // [T] i32
    std::vector<kv::AttentionQuery> queries;   // per token
    Tensor per_layer;                          // per-layer inputs, layer-major [L·T, P]
  };

  void place_shards();
  void prepare();
  void prepare_weights();
  void validate(const ForwardBatch& batch, const kv::KvCache& cache) const;
  void check_ids(std::span<const int32_t> ids) const;
  void run_layers(Step& step, const ForwardBatch& batch, kv::KvCache& cache, Tensor& h);
  // The output head (and softcap) of the final-normed rows `normed`: into
  // the host tensor `logits` the rows `batch` does not mark argmax_only (all
  // when batch is null or marks none); into `picks` the argmax codes of all
  // rows when it marks any, and the tokens of the rows it samples on the device.
  void head(const Tensor& normed, const ForwardBatch* batch, Tensor& logits, RowPicks* picks);
  Tensor scratch(Shape shape) { return scratch(be_, std::move(shape)); }
  static Tensor scratch(Backend& be, Shape shape) { return be.workspace().tensor(DType::F32, std::move(shape)); }
  Tensor ids_tensor(const std::vector<int32_t>& ids) {
    Tensor t = be_.workspace().tensor(DType::I32, {int64_t(ids.size())});
    be_.copy_from_host(ids.data(), t);
    return t;
  }
  Tensor linear(const Tensor& x, const Weight& w, const Tensor& bias = {}) { return linear(be_, x, w, bias); }
  static Tensor linear(Backend& be, const Tensor& x, const Weight& w, const Tensor& bias = {}) {
    Tensor y = scratch(be, {x.dim(0), w.rows});
    be.matmul(x, w, y);
    if (!bias.empty()) be.add_bias(y, bias);
    return y;
  }
  // The linear of act(gate) ⊙ up (a product with no other use; gate is scratch).
  Tensor gated_linear(Tensor& gate, const Tensor& up, Activation act, const Weight& w) {
    return gated_linear(be_, gate, up, act, w);
  }
  static Tensor gated_linear(Backend& be, Tensor& gate, const Tensor& up, Activation act, const Weight& w) {
    Tensor y = scratch(be, {gate.dim(0), w.rows});
    be.gated_matmul(gate, up, act, w, y);
    return y;
  }
  // Linears of rms_norm(x, norm_weight) (a normed input with no other use),
  // in one go where the backend can (rms_norm_matmul_each).
  template <std::size_t N>
  std::array<Tensor, N> normed_linears(Backend& be, const Tensor& x, const Tensor& norm_weight,
                                       const std::array<const Weight*, N>& w, const std::array<const Tensor*, N>& bias) {
    std::array<Tensor, N> y;
    std::array<Tensor*, N> out;
    for (std::size_t i = 0; i < N; ++i) {
      y[i] = scratch(be, {x.dim(0), w[i]->rows});
      out[i] = &y[i];
    }
    be.rms_norm_matmul_each(x, &norm_weight, eps(), cfg_.norm_kind, w, out);
    for (std::size_t i = 0; i < N; ++i)
      if (!bias[i]->empty()) be.add_bias(y[i], *bias[i]);
    return y;
  }
  Tensor norm(const Tensor& x, const Tensor& w) {
    Tensor y = scratch(x.shape());
    be_.rms_norm(x, &w, eps(), cfg_.norm_kind, y);
    return y;
  }
  void norm_in_place(Tensor& x, const Tensor& w) { be_.rms_norm(x, &w, eps(), cfg_.norm_kind, x); }
  float eps() const { return cfg_.norm_eps; }

  // A layer's attention sublayer over its shards, in three phases:
  // project (each shard on its backend: its heads' q, k, v), attend (the
  // caller, shard after shard, on the cache's backend: its KV storage
  // written and read), and o_proj (each shard: its columns' partial); then
  // the sum in shard order, o_proj's bias and the residual add.
  void attention(int layer, const Step& step, const ForwardBatch& batch, kv::KvCache& cache, Tensor& h);
  // `home`: be_'s mark_home, taken after h and step.positions were written.
  ShardAttention project_shard(int layer, int shard, const Step& step, const Tensor& h, const WorkMark* home);
  // Runs fn(s) for every shard: on their own threads when the shards have
  // backends of their own, else one after another on the caller's.
  void for_each_shard(const std::function<void(int)>& fn);
  Backend& shard_backend(int shard) { return *shard_be_[std::size_t(shard)]; }
  // `t` (on `from`) as a tensor of `to`: itself when they are one backend,
  // else a copy in to's workspace once `after` (from's mark, taken after t
  // was written) is reached: a host copy between CPU devices, a copy on
  // to's stream between CUDA backends (place_shards admits no other pair).
  // Called on to's caller, never calling `from`: its caller may be running.
  // The copy may still be in flight on return: `from` must not write t
  // before `to`'s work so far is done. The decoder holds to that by
  // copying every shard's partial home after the shard's reads of be_'s
  // tensors (mark_shards), before be_ changes the stream again, and by
  // resetting be_'s workspace (which waits for be_'s stream) before the
  // shards' at the next step.
  static Tensor transfer(const Backend& from, const Tensor& t, const WorkMark* after, Backend& to);
  // be_'s mark for the shards' reads of its tensors (null when the shards
  // have no backends of their own). On the caller, between two runs.
  std::shared_ptr<const WorkMark> mark_home();
  // Each shard backend's mark ([shard]; null for be_'s shards and host
  // backends), on the caller between two runs (the workers wait).
  std::vector<std::shared_ptr<const WorkMark>> mark_shards();
  // Shard `shard`'s tensor t copied to be_, after `after` (of mark_shards).
  Tensor from_shard(int shard, const Tensor& t, const WorkMark* after);
  // The gated MLP of rms_norm(h, ffn_norm): each shard's columns on its
  // backend (with its copy of ffn_norm), summed in shard order on be_.
  Tensor mlp(std::span<const ShardWeights> shards, Activation act, const Tensor& h);
  // The feed-forward sublayer's output, before the post-feed-forward norm (run_layers adds it).
  Tensor feed_forward(const LayerConfig& lc, const LayerWeights& lw, std::span<const ShardWeights> shards,
                      const Tensor& h);
  // The KV storage layer of `shard` of decoder layer `layer`.
  int storage(int layer, int shard) const { return storage_of_[std::size_t(layer)] * shards_ + shard; }
  Tensor per_layer_inputs(const ForwardBatch& batch, const Tensor& x0);
  void per_layer_input(int layer, const Step& step, Tensor& h, float then_scale);

  // ModelOptions::shard_backends, first so that it outlives every weight
  // and table prepared on them.
  std::vector<std::shared_ptr<Backend>> devices_;
  DecoderConfig cfg_;
  DecoderWeights w_;
  Backend& be_;
  std::string description_;
  ModelInfo info_;
  int shards_ = 1;               // tensor-parallel shards
  std::vector<int> storage_of_;  // decoder layer -> logical KV storage layer (before the split)
  std::vector<std::vector<ShardWeights>> shard_weights_;  // [layer][shard]
  // [shard] -> the backend it runs on: all be_ (the one-device stand-in),
  // or be_ then devices_, with workers_ driving them.
  std::vector<Backend*> shard_be_;
  std::unique_ptr<tensor_parallel::ShardWorkers> workers_;
  int num_storage_ = 0;
  std::vector<std::unique_ptr<RopeTable>> rope_tables_;  // per DecoderConfig::ropes entry, on be_
  // [shard][rope] on the shard's backend; shard 0's are rope_tables_'s.
  std::vector<std::vector<RopeTable*>> shard_ropes_;
  std::vector<std::unique_ptr<RopeTable>> owned_shard_ropes_;  // those of shards on other backends
  Weight per_layer_table_;        // per_layer_embed viewed as [V_ple·L, P]
};

void DecoderModel::place_shards() {
  shard_be_.assign(std::size_t(shards_), &be_);
  if (devices_.empty()) return;
  const std::string what = "tensor parallel " + std::to_string(shards_) + ": ";
  if (int(devices_.size()) != shards_ - 1)
    throw Error(what + std::to_string(devices_.size()) + " shard backends given for shards 1 to " +
                std::to_string(shards_ - 1));
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    const std::string shard = "shard " + std::to_string(i + 1);
    Backend* b = devices_[i].get();
    if (b == nullptr) throw Error(what + "no backend for " + shard);
    if (b == &be_) throw Error(what + shard + " runs on the model's own backend");
    // Tensors cross between shard 0 and each shard both ways (transfer):
    // both in host memory (CPU devices) or both CUDA backends, never a mix.
    if (b->device().is_host() != be_.device().is_host())
      throw Error(what + shard + " on " + b->name() + " beside the model's " + be_.name() +
                  ": shards run all on the CPU or all on GPUs (a mix of CPU and GPU shards is not supported)");
    if (!b->reads_from(be_) || !be_.reads_from(*b))
      throw Error(what + shard + " on " + b->name() + " beside the model's " + be_.name() +
                  ": these backends cannot copy tensors between them");
    for (std::size_t o = 0; o < i; ++o)
      if (devices_[o].get() == b) throw Error(what + "shards " + std::to_string(o + 1) + " and " + std::to_string(i + 1) + " share a backend");
    shard_be_[i + 1] = b;
  }
  workers_ = std::make_unique<tensor_parallel::ShardWorkers>(shards_);
}

Tensor DecoderModel::transfer(const Backend& from, const Tensor& t, const WorkMark* after, Backend& to) {
  if (&from == &to || t.empty()) return t;
  Tensor copy = to.workspace().tensor(t.dtype(), t.shape());
  to.copy_from_backend(from, t, after, copy);  // place_shards admitted the pair
  return copy;
}

std::shared_ptr<const WorkMark> DecoderModel::mark_home() {
  // Without backends of their own the shards read be_'s tensors in place:
  // no mark (on a GPU it would cut the step's held launches in two).
  return workers_ ? be_.mark_work() : nullptr;
}

Tensor DecoderModel::from_shard(int shard, const Tensor& t, const WorkMark* after) {
  return transfer(shard_backend(shard), t, after, be_);
}

std::vector<std::shared_ptr<const WorkMark>> DecoderModel::mark_shards() {
  std::vector<std::shared_ptr<const WorkMark>> out(static_cast<std::size_t>(shards_));
  for (int s = 0; s < shards_; ++s)
    if (&shard_backend(s) != &be_) out[std::size_t(s)] = shard_backend(s).mark_work();
  return out;
}

void DecoderModel::for_each_shard(const std::function<void(int)>& fn) {
  if (workers_) {
    workers_->run(fn);
  } else {
    for (int s = 0; s < shards_; ++s) fn(s);
  }
}

void DecoderModel::prepare() {
  const std::size_t free_before = be_.available_memory();
  try {
    prepare_weights();
  } catch (const OutOfMemory& e) {
    throw Error("the model's weights (" + std::to_string(w_.weight_bytes >> 20) + " MiB) do not fit in " +
                be_.name() + " (" + std::to_string(free_before >> 20) + " MiB were free): " + e.what());
  }
}

void DecoderModel::prepare_weights() {
  auto weight = [&](Weight& w) {
    if (!w.empty()) w = be_.prepare_weight(w);
  };
  auto vec = [&](Tensor& t) {
    if (!t.empty()) t = be_.upload(t);
  };
  weight(w_.embed);
  weight(w_.lm_head);
  vec(w_.final_norm);
  if (cfg_.per_layer_input > 0 && !w_.per_layer_embed.empty()) {
    // Row id·L + l of the table [V, L·P] viewed as [V·L, P] is token id's
    // part for layer l: prepared in that shape, so that a backend's code
    // order (weight.h) is laid out along the rows that are read.
    const int64_t L = int64_t(cfg_.layers.size()), P = cfg_.per_layer_input;
    w_.per_layer_embed = be_.prepare_weight(w_.per_layer_embed.reshaped(w_.per_layer_embed.rows * L, P));
  }
  weight(w_.per_layer_model_projection);
  vec(w_.per_layer_projection_norm);
  for (LayerWeights& l : w_.layers) {
    // The split projections, from the checkpoint's (host) weights; the
    // whole ones are dropped once split.
    using namespace tensor_parallel;
    std::vector<ShardWeights> shards(static_cast<std::size_t>(shards_));
    for (int s = 0; s < shards_; ++s) {
      Backend& sb = shard_backend(s);
      ShardWeights& sw = shards[std::size_t(s)];
      sw.q_proj = split_rows(l.q_proj, s, shards_);
      sw.k_proj = split_rows(l.k_proj, s, shards_);
      sw.v_proj = split_rows(l.v_proj, s, shards_);
      sw.gate_proj = split_rows(l.gate_proj, s, shards_);
      sw.up_proj = split_rows(l.up_proj, s, shards_);
      sw.o_proj = split_columns(l.o_proj, s, shards_);
      sw.down_proj = split_columns(l.down_proj, s, shards_);
      sw.q_bias = split_vector(l.q_bias, s, shards_);
      sw.k_bias = split_vector(l.k_bias, s, shards_);
      sw.v_bias = split_vector(l.v_bias, s, shards_);
      for (Weight* m : {&sw.q_proj, &sw.k_proj, &sw.v_proj, &sw.o_proj, &sw.gate_proj, &sw.up_proj, &sw.down_proj})
        if (!m->empty()) *m = sb.prepare_weight(*m);
      for (Tensor* t : {&sw.q_bias, &sw.k_bias, &sw.v_bias})
        if (!t->empty()) *t = sb.upload(*t);
      // A shard on a backend of its own gets its own copy of the norms its
      // projections read (still the checkpoint's host tensors here); one on
      // be_ shares the layer's, below.
      if (&sb != &be_)
        for (auto [from, to] : {std::pair{&l.attn_norm, &sw.attn_norm}, std::pair{&l.ffn_norm, &sw.ffn_norm},
                                std::pair{&l.q_norm, &sw.q_norm}, std::pair{&l.k_norm, &sw.k_norm}})
          if (!from->empty()) *to = sb.upload(*from);
    }
    shard_weights_.push_back(std::move(shards));
    std::vector<ShardWeights>& placed = shard_weights_.back();
    for (Weight* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) *m = Weight();
    for (Tensor* t : {&l.q_bias, &l.k_bias, &l.v_bias}) *t = Tensor();
    for (Weight* m : {&l.per_layer_gate, &l.per_layer_projection, &l.router})
      weight(*m);
    for (auto* bank : {&l.experts.gate, &l.experts.up, &l.experts.down})
      for (Weight& m : *bank) weight(m);
    for (Tensor* t : {&l.attn_norm, &l.post_attn_norm, &l.ffn_norm, &l.post_ffn_norm, &l.q_norm, &l.k_norm, &l.o_bias, &l.per_layer_norm, &l.router_scale,
                      &l.router_expert_scale, &l.expert_norm, &l.dense_post_norm, &l.expert_post_norm})
      vec(*t);
    for (int s = 0; s < shards_; ++s)
      if (&shard_backend(s) == &be_) {
        ShardWeights& sw = placed[std::size_t(s)];
        sw.attn_norm = l.attn_norm;
        sw.ffn_norm = l.ffn_norm;
        sw.q_norm = l.q_norm;
        sw.k_norm = l.k_norm;
      }
  }
  for (const RopeFrequencies& r : cfg_.ropes) rope_tables_.push_back(be_.make_rope_table(r.inv_freq));
  for (int s = 0; s < shards_; ++s) {
    std::vector<RopeTable*> tables;
    for (std::size_t r = 0; r < cfg_.ropes.size(); ++r) {
      if (&shard_backend(s) == &be_) {
        tables.push_back(rope_tables_[r].get());
      } else {
        owned_shard_ropes_.push_back(shard_backend(s).make_rope_table(cfg_.ropes[r].inv_freq));
        tables.push_back(owned_shard_ropes_.back().get());
      }
    }
    shard_ropes_.push_back(std::move(tables));
  }
  if (cfg_.per_layer_input > 0) per_layer_table_ = w_.per_layer_embed;
}

void DecoderModel::check_ids(std::span<const int32_t> ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= cfg_.vocab_size)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(cfg_.vocab_size) + ")");
    if (cfg_.per_layer_input > 0 && id >= cfg_.per_layer_vocab)
      throw Error("token id " + std::to_string(id) + " has no per-layer embedding (the table holds " +
                  std::to_string(cfg_.per_layer_vocab) + " ids)");
  }
}

void DecoderModel::validate(const ForwardBatch& batch, const kv::KvCache& cache) const {
  const std::size_t n = batch.tokens.size();
  check_ids(batch.tokens);
  std::unordered_set<kv::RowId> seen;
  std::size_t counted = 0;
  for (const kv::TokenRun& run : batch.runs) {
    if (run.count <= 0) throw Error("forward batch: a run of row " + std::to_string(run.row) + " has no tokens");
    if (!seen.insert(run.row).second)
      throw Error("forward batch: the tokens of row " + std::to_string(run.row) +
                  " must be contiguous with consecutive positions");
    const int64_t len = cache.length(run.row);
    if (run.position != len)
      throw Error("forward batch: row " + std::to_string(run.row) + " starts at position " +
                  std::to_string(run.position) + " but holds " + std::to_string(len) + " tokens");
    if (run.position + run.count > std::numeric_limits<int32_t>::max())
      throw Error("forward batch: row " + std::to_string(run.row) + " runs past position 2^31");
    counted += std::size_t(run.count);
  }
  if (counted != n) throw Error("forward batch: runs cover " + std::to_string(counted) + " of " + std::to_string(n) + " tokens");
  for (int32_t r : batch.logit_rows)
    if (r < 0 || std::size_t(r) >= n) throw Error("forward batch: logit row out of range");
  if (!batch.argmax_only.empty() && batch.argmax_only.size() != batch.logit_rows.size())
    throw Error("forward batch: " + std::to_string(batch.argmax_only.size()) + " argmax marks for " +
                std::to_string(batch.logit_rows.size()) + " logits rows");
  for (const RowSampling& r : batch.sample_on_device)
    if (r.row < 0 || std::size_t(r.row) >= batch.argmax_only.size() || !batch.argmax_only[std::size_t(r.row)])
      throw Error("forward batch: a row sampled on the device must be a logits row marked argmax_only");
}

void DecoderModel::forward(const ForwardBatch& batch, kv::KvCache& cache, Tensor& logits, Tensor* hidden,
                           RowPicks* picks) {
  ROWLM_CHECK(&cache.backend() == &be_, "the KV cache belongs to another backend than the model");
  validate(batch, cache);
  const int64_t T = int64_t(batch.tokens.size()), H = cfg_.hidden_size, V = cfg_.vocab_size;
  const int64_t n_logits = int64_t(batch.logit_rows.size());
  const int64_t marked = std::count(batch.argmax_only.begin(), batch.argmax_only.end(), uint8_t(1));
  ROWLM_CHECK(marked == 0 || picks, "forward: rows marked argmax_only need somewhere to put the codes");
  if (picks) *picks = RowPicks{};
  // Read back from the device each step: the backend's readback memory
  // (pinned on a GPU), not a fresh pageable buffer.
  logits = be_.host_output(DType::F32, {n_logits - marked, V});
  if (hidden) *hidden = be_.host_output(DType::F32, {n_logits, H});
  if (T == 0) return;

  std::vector<kv::RowId> rows;
  std::vector<int32_t> counts;
  for (const kv::TokenRun& run : batch.runs) {
    rows.push_back(run.row);
    counts.push_back(run.count);
  }
  cache.begin_step(rows, counts);  // throws OutOfBlocks with nothing changed
  try {
    // The previous step's scratch is dead. be_ first: waiting for its
    // stream also waits for its last copies out of the shards' workspaces.
    be_.workspace().reset();
    for (int s = 1; s < shards_; ++s)
      if (&shard_backend(s) != &be_) shard_backend(s).workspace().reset();
    Step step;
    step.T = T;
    std::vector<int32_t> positions;
    positions.reserve(std::size_t(T));
    step.queries.reserve(std::size_t(T));
    for (const kv::TokenRun& run : batch.runs)
      for (int64_t p = run.position; p < run.position + run.count; ++p) {
        positions.push_back(int32_t(p));
        step.queries.push_back({run.row, p});
      }
    int64_t end = 0;
    for (const kv::TokenRun& run : batch.runs) end = std::max(end, run.position + run.count);
    for (auto& table : rope_tables_) table->reserve(end);
    for (auto& table : owned_shard_ropes_) table->reserve(end);
    // The step's launches go out together (a repeated step as one graph),
    // unless the shards run on backends of their own: then every meeting
    // point issues what be_ holds (mark_work, copy_from_backend), about
    // three pieces a layer, more than the CUDA launch queue keeps graphs of
    // (32), so no piece would be replayed and each would be captured again
    // and again. They go out one by one instead (on the CPU no difference).
    std::optional<DeferredLaunches> deferred;
    if (!workers_) deferred.emplace(be_);
    step.tokens = ids_tensor(batch.tokens);
    step.positions = ids_tensor(positions);

    Tensor h = scratch({T, H});
    be_.embed(step.tokens, w_.embed, cfg_.embed_scale, h);
    if (cfg_.per_layer_input > 0) step.per_layer = per_layer_inputs(batch, h);
    run_layers(step, batch, cache, h);

    if (n_logits > 0) {
      Tensor last = scratch({n_logits, H});
      be_.gather_rows(h, ids_tensor(batch.logit_rows), last);
      norm_in_place(last, w_.final_norm);
      if (hidden) be_.copy_to_host(last, hidden->raw());
      head(last, marked > 0 ? &batch : nullptr, logits, picks);
    }
    if (deferred) deferred->issue();
  } catch (...) {
    cache.abort_step();
    throw;
  }
  cache.end_step();
}

void DecoderModel::run_layers(Step& step, const ForwardBatch& batch, kv::KvCache& cache, Tensor& h) {
  for (std::size_t l = 0; l < cfg_.layers.size(); ++l) {
    const LayerConfig& lc = cfg_.layers[l];
    const LayerWeights& lw = w_.layers[l];
    attention(int(l), step, batch, cache, h);
    // The sublayer's output, normed into the stream where the layer has a post-norm.
    // The layer scalar goes into the layer's last normed add (one launch
    // fewer); the bits are those of add then scale.
    const Tensor f = feed_forward(lc, lw, shard_weights_[l], h);
    const bool ple = cfg_.per_layer_input > 0;
    if (lc.post_ffn_norm) {
      be_.add_rms_norm(h, f, &lw.post_ffn_norm, eps(), cfg_.norm_kind, ple ? 1.0f : lw.layer_scalar);
    } else {
      be_.add(h, f);
      if (!ple && lw.layer_scalar != 1.0f) be_.scale(h, lw.layer_scalar);
    }
    if (ple) per_layer_input(int(l), step, h, lw.layer_scalar);
  }
}

void DecoderModel::head(const Tensor& normed, const ForwardBatch* batch, Tensor& logits, RowPicks* picks) {
  const int64_t n = normed.dim(0);
  std::vector<int32_t> kept;  // the rows that cross whole
  for (int64_t i = 0; i < n; ++i)
    if (!batch || !batch->argmax_only[std::size_t(i)]) kept.push_back(int32_t(i));
  const bool all = int64_t(kept.size()) == n;
  // On the host, with every row wanted, the head writes straight into the caller's logits.
  Tensor out = be_.device().is_host() && all ? logits : scratch({n, int64_t(cfg_.vocab_size)});
  be_.matmul(normed, cfg_.tie_word_embeddings ? w_.embed : w_.lm_head, out);
  if (cfg_.final_softcap > 0) be_.softcap(out, cfg_.final_softcap);
  if (!all) {
    // The codes, then the sampled tokens, in one buffer and one copy; the
    // codes are of the rows as computed, before sampling edits them.
    const int64_t s = int64_t(batch->sample_on_device.size());
    Tensor picked = be_.workspace().tensor(DType::I32, {n + s});
    Tensor codes = picked.rows(0, n), tokens = picked.rows(n, n + s);
    be_.argmax_rows(out, codes);
    const bool logprobs = std::any_of(batch->sample_on_device.begin(), batch->sample_on_device.end(),
                                      [](const RowSampling& r) { return r.logprobs >= 0; });
    Tensor stats = logprobs ? be_.workspace().tensor(DType::U8, {s * int64_t(sizeof(RowLogprobStats))}) : Tensor();
    if (s > 0) be_.sample_rows(out, batch->sample_on_device, batch->sampling_edits, batch->sampling_masks, tokens,
                               logprobs ? &stats : nullptr);
    std::vector<int32_t> host(std::size_t(n + s));
    be_.copy_to_host(picked, host.data());
    picks->argmax.assign(host.begin(), host.begin() + n);
    picks->sampled.assign(host.begin() + n, host.end());
    if (logprobs) {
      picks->logprob_stats.resize(std::size_t(s));
      be_.copy_to_host(stats, picks->logprob_stats.data());
    }
    if (kept.empty()) return;
    if (be_.device().is_host()) {
      be_.gather_rows(out, ids_tensor(kept), logits);
    } else {
      Tensor wanted = scratch({int64_t(kept.size()), int64_t(cfg_.vocab_size)});
      be_.gather_rows(out, ids_tensor(kept), wanted);
      be_.copy_to_host(wanted, logits.raw());
    }
  } else if (out.raw() != logits.raw()) {
    be_.copy_to_host(out, logits.raw());
  }
}

void DecoderModel::embed(std::span<const int32_t> tokens, Tensor& out) {
  check_ids(tokens);
  ROWLM_CHECK(out.dim(0) == int64_t(tokens.size()) && out.dim(1) == cfg_.hidden_size, "embed: output shape");
  if (tokens.empty()) return;
  be_.embed(ids_tensor(std::vector<int32_t>(tokens.begin(), tokens.end())), w_.embed, cfg_.embed_scale, out);
}

void DecoderModel::forward_states(Tensor& h, std::span<const kv::AttentionQuery> queries, kv::KvCache& cache,
                                  Tensor* logits) {
  ROWLM_CHECK(&cache.backend() == &be_, "the KV cache belongs to another backend than the reader");
  const int64_t T = int64_t(queries.size());
  if (h.dim(0) != T || h.dim(1) != cfg_.hidden_size)
    throw Error("kv reader: input states are [" + std::to_string(h.dim(0)) + ", " + std::to_string(h.dim(1)) +
                "], expected [" + std::to_string(T) + ", " + std::to_string(cfg_.hidden_size) + "]");
  if (logits) *logits = be_.host_output(DType::F32, {T, int64_t(cfg_.vocab_size)});
  if (T == 0) return;
  Step step;
  step.T = T;
  step.queries.assign(queries.begin(), queries.end());
  std::vector<int32_t> positions;
  int64_t end = 0;
  for (const kv::AttentionQuery& q : queries) {
    if (q.position < 0 || q.position >= std::numeric_limits<int32_t>::max())
      throw Error("kv reader: query position " + std::to_string(q.position) + " is out of range");
    positions.push_back(int32_t(q.position));
    end = std::max(end, q.position + 1);
  }
  for (auto& table : rope_tables_) table->reserve(end);
  DeferredLaunches deferred(be_);
  step.positions = ids_tensor(positions);
  const ForwardBatch nothing_written;  // no layer owns KV
  run_layers(step, nothing_written, cache, h);
  norm_in_place(h, w_.final_norm);
  if (logits) head(h, nullptr, *logits, nullptr);
  deferred.issue();
}

void DecoderModel::attention(int l, const Step& step, const ForwardBatch& batch, kv::KvCache& cache, Tensor& h) {
  const LayerConfig& lc = cfg_.layers[std::size_t(l)];
  const AttentionConfig& ac = lc.attention;
  const LayerWeights& lw = w_.layers[std::size_t(l)];
  const std::size_t n = std::size_t(shards_);
  std::vector<ShardAttention> parts(n);  // of the two-phase path below
  AttentionParams params;
  params.num_heads = ac.num_heads / shards_;
  params.head_dim = ac.head_dim;
  params.window = ac.window;
  params.scale = ac.scale;
  params.softcap = ac.softcap;
  const bool owns_kv = lc.owns_kv(l);
  // Its KV storage written and read where the cache keeps it: on each
  // shard's backend (Model::kv_backends: the shard does it on its thread),
  // or all on the model's (the caller does it, shard after shard, between
  // two phases).
  bool kv_on_shards = true, kv_home = true;
  for (int s = 0; s < shards_; ++s) {
    const Backend* kb = &cache.layer_backend(storage(l, s));
    kv_on_shards = kv_on_shards && kb == &shard_backend(s);
    kv_home = kv_home && kb == &be_;
  }
  if (!kv_on_shards && !kv_home)
    throw Error("tensor parallel: the KV cache's storage layers of layer " + std::to_string(l) +
                " are neither on their shards' backends nor all on the model's");
  // On the cache layer's backend kb, with p's tensors there.
  auto attend = [&](int s, ShardAttention& p, Backend& kb) {
    if (owns_kv) cache.write(storage(l, s), batch.runs, p.k, p.v);
    p.attn = scratch(kb, {step.T, int64_t(params.num_heads) * params.head_dim});
    cache.attend(storage(l, s), step.queries, p.q, params, p.attn);
  };
  std::vector<Tensor> partials(n);
  // The stream and positions as the shards read them.
  const std::shared_ptr<const WorkMark> home = mark_home();
  if (kv_on_shards) {
    // One phase: each shard's q/k/v, KV, attention and o_proj partial on its backend.
    for_each_shard([&](int s) {
      Backend& sb = shard_backend(s);
      ShardAttention p = project_shard(l, s, step, h, home.get());
      attend(s, p, sb);
      partials[std::size_t(s)] = linear(sb, p.attn, shard_weights_[std::size_t(l)][std::size_t(s)].o_proj);
    });
  } else {
    for_each_shard([&](int s) { parts[std::size_t(s)] = project_shard(l, s, step, h, home.get()); });
    const auto projected = mark_shards();
    for (int s = 0; s < shards_; ++s) {
      ShardAttention& p = parts[std::size_t(s)];
      const WorkMark* after = projected[std::size_t(s)].get();
      p.k = from_shard(s, p.k, after);
      p.v = from_shard(s, p.v, after);
      p.q = from_shard(s, p.q, after);
      attend(s, p, be_);
    }
    // Each shard's partial of o_proj, on its backend.
    const std::shared_ptr<const WorkMark> attended = mark_home();
    for_each_shard([&](int s) {
      Backend& sb = shard_backend(s);
      partials[std::size_t(s)] = linear(sb, transfer(be_, parts[std::size_t(s)].attn, attended.get(), sb),
                                        shard_weights_[std::size_t(l)][std::size_t(s)].o_proj);
    });
  }
  // The partials to be_. Each shard's mark also covers its reads of be_'s
  // tensors above, so be_ changes h (below) only after them.
  const auto summed = mark_shards();
  for (int s = 1; s < shards_; ++s) partials[std::size_t(s)] = from_shard(s, partials[std::size_t(s)], summed[std::size_t(s)].get());
  Tensor o = tensor_parallel::all_reduce_in_order(be_, partials);
  if (!lw.o_bias.empty()) be_.add_bias(o, lw.o_bias);  // once, after the sum
  if (lc.post_attention_norm) {
    be_.add_rms_norm(h, o, &lw.post_attn_norm, eps(), cfg_.norm_kind);
  } else {
    be_.add(h, o);
  }
}

DecoderModel::ShardAttention DecoderModel::project_shard(int l, int shard, const Step& step, const Tensor& h_home,
                                                        const WorkMark* home) {
  const LayerConfig& lc = cfg_.layers[std::size_t(l)];
  const AttentionConfig& ac = lc.attention;
  const ShardWeights& sw = shard_weights_[std::size_t(l)][std::size_t(shard)];
  Backend& be = shard_backend(shard);
  const int64_t T = step.T;
  const int hd = ac.head_dim, kvh = ac.kv_heads / shards_;
  RopeTable& rope = *shard_ropes_[std::size_t(shard)][std::size_t(ac.rope)];
  const Tensor h = transfer(be_, h_home, home, be);
  const Tensor positions = transfer(be_, step.positions, home, be);

  const bool owns_kv = lc.owns_kv(l);
  // q, and the layer's own k and v, from the normed stream in one go.
  ShardAttention out;
  Tensor &q = out.q, &k = out.k, &v = out.v;
  if (owns_kv && !ac.k_eq_v) {
    auto y = normed_linears<3>(be, h, sw.attn_norm, {&sw.q_proj, &sw.k_proj, &sw.v_proj},
                               {&sw.q_bias, &sw.k_bias, &sw.v_bias});
    q = std::move(y[0]);
    k = std::move(y[1]);
    v = std::move(y[2]);
  } else if (owns_kv) {
    auto y = normed_linears<2>(be, h, sw.attn_norm, {&sw.q_proj, &sw.k_proj}, {&sw.q_bias, &sw.k_bias});
    q = std::move(y[0]);
    k = std::move(y[1]);
  } else {
    q = std::move(normed_linears<1>(be, h, sw.attn_norm, {&sw.q_proj}, {&sw.q_bias})[0]);  // [T, nH·hd]
  }
  if (ac.qk_norm) {
    be.rms_norm_rope(q, &sw.q_norm, eps(), cfg_.norm_kind, positions, rope);
  } else {
    be.rope(q, positions, rope);
  }

  if (owns_kv) {
    // k: [T, kvh·hd], raw
    if (ac.k_eq_v) {
      v = scratch(be, k.shape());
      be.copy(k, v);  // V from the raw K projection
    }
    if (ac.qk_norm) {
      be.rms_norm_rope(k, &sw.k_norm, eps(), cfg_.norm_kind, positions, rope);
    } else {
      be.rope(k, positions, rope);
    }
    if (ac.v_norm) {
      Tensor v_heads = v.reshaped({T * kvh, hd});
      be.rms_norm(v_heads, nullptr, eps(), NormKind::NoScale, v_heads);
    }
  }
  return out;
}

Tensor DecoderModel::mlp(std::span<const ShardWeights> shards, Activation act, const Tensor& h) {
  const Tensor none;
  std::vector<Tensor> partials(shards.size());
  const std::shared_ptr<const WorkMark> home = mark_home();
  for_each_shard([&](int s) {
    const ShardWeights& sw = shards[std::size_t(s)];
    Backend& sb = shard_backend(s);
    const Tensor hs = transfer(be_, h, home.get(), sb);
    auto [gate, up] = normed_linears<2>(sb, hs, sw.ffn_norm, {&sw.gate_proj, &sw.up_proj}, {&none, &none});
    partials[std::size_t(s)] = gated_linear(sb, gate, up, act, sw.down_proj);
  });
  // Each mark covers its shard's read of h too: be_ adds into h after these copies.
  const auto done = mark_shards();
  for (int s = 1; s < shards_; ++s) partials[std::size_t(s)] = from_shard(s, partials[std::size_t(s)], done[std::size_t(s)].get());
  return tensor_parallel::all_reduce_in_order(be_, partials);
}

Tensor DecoderModel::feed_forward(const LayerConfig& lc, const LayerWeights& lw, std::span<const ShardWeights> shards,
                                  const Tensor& h) {
  const FfnConfig& fc = lc.ffn;
  if (fc.kind == FfnKind::Dense) {
    return mlp(shards, fc.activation, h);
  }
  const int64_t T = h.dim(0), H = h.dim(1);
  if (fc.kind == FfnKind::Experts) {
    // Routed experts alone: the router and the experts read the same normed stream.
    Tensor x = norm(h, lw.ffn_norm);
    Tensor router_logits = linear(x, lw.router);  // [T, E]
    Tensor experts = be_.workspace().tensor(DType::I32, {T, fc.top_k});
    Tensor weights = scratch({T, fc.top_k});
    be_.moe_route(router_logits, fc.top_k, fc.renormalize, nullptr, experts, weights);
    Tensor f = scratch({T, H});
    be_.moe_experts(x, experts, weights, lw.experts, fc.activation, f);
    return f;
  }
  // Gemma 4's MoE block: the dense "shared expert" branch ...
  Tensor dense = mlp(shards, fc.activation, h);
  norm_in_place(dense, lw.dense_post_norm);
  // ... the router, reading the post-attention stream itself ...
  Tensor z = scratch({T, H});
  be_.rms_norm(h, &lw.router_scale, eps(), cfg_.norm_kind, z);
  be_.scale(z, 1.0f / std::sqrt(float(H)));
  Tensor router_logits = linear(z, lw.router);  // [T, E]
  Tensor experts = be_.workspace().tensor(DType::I32, {T, fc.top_k});
  Tensor weights = scratch({T, fc.top_k});
  be_.moe_route(router_logits, fc.top_k, fc.renormalize, &lw.router_expert_scale, experts, weights);
  // ... and the routed experts, summed.
  Tensor routed = scratch({T, H});
  be_.moe_experts(norm(h, lw.expert_norm), experts, weights, lw.experts, fc.activation, routed);
  norm_in_place(routed, lw.expert_post_norm);
  be_.add(dense, routed);
  return dense;
}

// Gemma 3n/4's per-layer inputs of every layer, computed once before the
// layers from the scaled embedding x0: one lookup of [T·L] rows, one
// projection to [T, L·P], and each elementwise step once over [T·L, P] rows
// (the norm is over each P-wide row), instead of each of these per layer
// (about eight launches a layer on a GPU). Every element goes through the
// same operations as layer by layer, so the bits are the same. Returned
// layer-major: layer l's [T, P] inputs are rows l·T … l·T + T − 1.
Tensor DecoderModel::per_layer_inputs(const ForwardBatch& batch, const Tensor& x0) {
  const int64_t T = x0.dim(0), L = int64_t(cfg_.layers.size()), P = cfg_.per_layer_input;
  // Token part: row id·L + l of the table viewed as [V·L, P], token-major.
  std::vector<int32_t> ids(static_cast<std::size_t>(T * L));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t l = 0; l < L; ++l) ids[std::size_t(t * L + l)] = batch.tokens[std::size_t(t)] * int32_t(L) + int32_t(l);
  Tensor token_part = scratch({T * L, P});
  be_.embed(ids_tensor(ids), per_layer_table_, std::sqrt(float(P)), token_part);
  // Context part: x0 projected to every layer's P (row t: layer l at columns
  // l·P …, so viewed as [T·L, P] its rows line up with the token part's),
  // scaled, normalised.
  Tensor ple = linear(x0, w_.per_layer_model_projection).reshaped({T * L, P});
  be_.scale(ple, 1.0f / std::sqrt(float(cfg_.hidden_size)));
  norm_in_place(ple, w_.per_layer_projection_norm);
  be_.add(ple, token_part);
  be_.scale(ple, 1.0f / std::sqrt(2.0f));
  if (T == 1) return ple;  // one token: token-major is layer-major
  std::vector<int32_t> order(static_cast<std::size_t>(T * L));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t t = 0; t < T; ++t) order[std::size_t(l * T + t)] = int32_t(t * L + l);
  Tensor by_layer = scratch({T * L, P});
  be_.gather_rows(ple, ids_tensor(order), by_layer);
  return by_layer;
}

void DecoderModel::per_layer_input(int l, const Step& step, Tensor& h, float then_scale) {
  const LayerWeights& lw = w_.layers[std::size_t(l)];
  const int64_t T = step.T;
  const Tensor ple = step.per_layer.rows(int64_t(l) * T, int64_t(l + 1) * T);
  // Gated into the stream.
  Tensor gate = linear(h, lw.per_layer_gate);
  Tensor proj = gated_linear(gate, ple, cfg_.layers[std::size_t(l)].ffn.activation, lw.per_layer_projection);
  be_.add_rms_norm(h, proj, &lw.per_layer_norm, eps(), cfg_.norm_kind, then_scale);
}

}  // namespace

namespace {

class KvReaderImpl final : public KvReader {
 public:
  explicit KvReaderImpl(std::unique_ptr<DecoderModel> model) : model_(std::move(model)) {}
  const DecoderConfig& config() const override { return model_->config(); }
  void forward(Tensor& h, std::span<const kv::AttentionQuery> queries, kv::KvCache& cache, Tensor* logits) override {
    model_->forward_states(h, queries, cache, logits);
  }

 private:
  std::unique_ptr<DecoderModel> model_;
};

}  // namespace

std::unique_ptr<KvReader> make_kv_reader(DecoderConfig config, DecoderWeights weights, Backend& backend) {
  if (config.per_layer_input > 0) throw Error("decoder config: a KV reader has no per-layer inputs");
  for (std::size_t i = 0; i < config.layers.size(); ++i)
    if (config.layers[i].attention.target_kv < 0)
      throw Error("decoder config: layer " + std::to_string(i) + " of a KV reader reads no target storage");
  return std::make_unique<KvReaderImpl>(
      std::make_unique<DecoderModel>(std::move(config), std::move(weights), backend, "kv reader"));
}

std::unique_ptr<Model> make_decoder_model(DecoderConfig config, DecoderWeights weights, Backend& backend,
                                          std::string description, const ModelOptions& options) {
  if (options.tensor_parallel == 1 && !options.shard_backends.empty())
    throw Error("tensor parallel 1: shard backends given");
  return std::make_unique<DecoderModel>(std::move(config), std::move(weights), backend, std::move(description),
                                        options.tensor_parallel,
                                        options.shard_backends);
}

}  // namespace rowlm::decoder
