#include "model/gemma4.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace rowlm::gemma4 {

RopeFrequencies rope_frequencies(const RopeParams& params, int head_dim) {
  RopeFrequencies f;
  f.head_dim = head_dim;
  f.inv_freq.assign(std::size_t(head_dim / 2), 0.0f);
  // Pairs rotated: all of them (default), or the first R (proportional).
  int rotated = head_dim / 2;
  if (params.type == RopeType::Proportional)
    rotated = int(params.partial_rotary_factor * head_dim) / 2;
  const float base = float(params.theta);
  for (int k = 0; k < rotated; ++k) {
    // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in f32;
    // the exponent's denominator is the whole head, also when proportional.
    const float exponent = float(2 * k) / float(head_dim);
    f.inv_freq[std::size_t(k)] = float(1.0f / std::pow(base, exponent)) / float(params.factor);
  }
  return f;
}

namespace {

// One row's run of tokens in a flattened batch.
struct Segment {
  kv::RowId row;
  int32_t first;   // index of its first token in the batch
  int32_t count;
  int64_t position;  // position of its first token
};

class Gemma4Model final : public Model {
 public:
  Gemma4Model(Config config, Weights weights, Backend& backend, std::string directory)
      : cfg_(std::move(config)), w_(std::move(weights)), be_(backend) {
    info_.architecture = cfg_.model_type.empty() ? "gemma4_text" : cfg_.model_type;
    info_.directory = std::move(directory);
    info_.vocab_size = cfg_.vocab_size;
    info_.hidden_size = cfg_.hidden_size;
    info_.num_layers = cfg_.num_layers;
    info_.max_position = cfg_.max_position_embeddings;
    info_.bos_token_id = cfg_.bos_token_id;
    info_.eos_token_ids = cfg_.eos_token_ids;
    info_.parameter_count = w_.parameter_count;
    info_.weight_bytes = w_.weight_bytes;

    ROWLM_CHECK(int(w_.layers.size()) == cfg_.num_layers, "weights do not match the config");
    for (const LayerConfig& l : cfg_.layers) {
      if (l.owns_kv()) {
        storage_of_.push_back(num_storage_++);
      } else {
        storage_of_.push_back(storage_of_.at(std::size_t(l.kv_source)));
      }
    }
    rope_sliding_ = rope_frequencies(cfg_.rope_sliding, cfg_.head_dim);
    rope_full_ = rope_frequencies(cfg_.rope_full, cfg_.global_head_dim);
    prepare_weights();
  }

  const ModelInfo& info() const override { return info_; }

  std::vector<kv::LayerSpec> kv_layers(const kv::CodecSpec& codec) const override {
    std::vector<kv::LayerSpec> out;
    for (const LayerConfig& l : cfg_.layers)
      if (l.owns_kv()) out.push_back({l.kv_heads, l.head_dim, l.window, codec});
    return out;
  }

  std::string describe() const override;

  void forward(const ForwardBatch& batch, kv::KvCache& cache, Tensor& logits) override;

 private:
  void prepare_weights();
  std::vector<Segment> segments_of(const ForwardBatch& batch, const kv::KvCache& cache) const;
  void per_layer_input(int layer, const ForwardBatch& batch, const Tensor& x0, Tensor& out);
  void attention_block(int layer, const ForwardBatch& batch, const std::vector<Segment>& segs,
                       const std::vector<kv::AttentionQuery>& queries, kv::KvCache& cache,
                       Tensor& h);
  void dense_mlp(const LayerWeights& lw, const Tensor& x, Tensor& out);
  void moe_block(const LayerWeights& lw, const Tensor& h, Tensor& out);
  Tensor matmul(const Tensor& x, const Tensor& w) {
    Tensor y(DType::F32, {x.dim(0), w.dim(0)});
    be_.matmul(x, w, y);
    return y;
  }
  Tensor norm(const Tensor& x, const Tensor& w) {
    Tensor y(DType::F32, x.shape());
    be_.rms_norm(x, &w, eps(), NormKind::Plain, y);
    return y;
  }
  float eps() const { return float(cfg_.rms_norm_eps); }

  Config cfg_;
  Weights w_;
  Backend& be_;
  ModelInfo info_;
  std::vector<int> storage_of_;  // decoder layer -> KV storage layer
  int num_storage_ = 0;
  RopeFrequencies rope_sliding_, rope_full_;
};

void Gemma4Model::prepare_weights() {
  auto prep = [&](Tensor& t) {
    if (!t.empty()) t = be_.prepare_weight(t);
  };
  prep(w_.embed_tokens);
  prep(w_.lm_head);
  prep(w_.per_layer_model_projection);
  for (LayerWeights& l : w_.layers) {
    for (Tensor* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj,
                      &l.down_proj, &l.per_layer_input_gate, &l.per_layer_projection,
                      &l.router_proj})
      prep(*t);
    for (auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down})
      for (Tensor& t : *experts) prep(t);
  }
}

std::vector<Segment> Gemma4Model::segments_of(const ForwardBatch& batch,
                                              const kv::KvCache& cache) const {
  const std::size_t n = batch.tokens.size();
  if (batch.rows.size() != n || batch.positions.size() != n)
    throw Error("forward batch: tokens, rows and positions differ in length");
  std::vector<Segment> segs;
  for (std::size_t t = 0; t < n; ++t) {
    const int32_t id = batch.tokens[t];
    if (id < 0 || id >= cfg_.vocab_size)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(cfg_.vocab_size) + ")");
    if (!segs.empty() && segs.back().row == batch.rows[t] &&
        segs.back().position + segs.back().count == batch.positions[t]) {
      ++segs.back().count;
      continue;
    }
    segs.push_back({batch.rows[t], int32_t(t), 1, batch.positions[t]});
  }
  for (std::size_t i = 0; i < segs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (segs[j].row == segs[i].row)
        throw Error("forward batch: the tokens of row " + std::to_string(segs[i].row) +
                    " must be contiguous with consecutive positions");
    const int64_t len = cache.length(segs[i].row);
    if (segs[i].position != len)
      throw Error("forward batch: row " + std::to_string(segs[i].row) + " starts at position " +
                  std::to_string(segs[i].position) + " but holds " + std::to_string(len) +
                  " tokens");
  }
  for (int32_t r : batch.logit_rows)
    if (r < 0 || std::size_t(r) >= n) throw Error("forward batch: logit row out of range");
  return segs;
}

void Gemma4Model::forward(const ForwardBatch& batch, kv::KvCache& cache, Tensor& logits) {
  const auto segs = segments_of(batch, cache);
  const int64_t T = int64_t(batch.tokens.size());
  const int64_t H = cfg_.hidden_size;
  logits = Tensor(DType::F32, {int64_t(batch.logit_rows.size()), cfg_.vocab_size});
  if (T == 0) return;

  std::vector<kv::RowId> rows;
  std::vector<int32_t> counts;
  for (const Segment& s : segs) {
    rows.push_back(s.row);
    counts.push_back(s.count);
  }
  cache.begin_step(rows, counts);  // throws OutOfBlocks with nothing changed
  try {
    std::vector<kv::AttentionQuery> queries(static_cast<std::size_t>(T));
    for (int64_t t = 0; t < T; ++t) queries[std::size_t(t)] = {batch.rows[t], batch.positions[t]};

    Tensor h(DType::F32, {T, H});
    // HF scales in the weight dtype; rowlm's activations are f32, so √H is exact.
    be_.embed(batch.tokens, w_.embed_tokens, std::sqrt(float(H)), h);
    Tensor x0;  // the scaled embedding, input of the per-layer-embedding projection
    if (cfg_.hidden_size_per_layer_input > 0) {
      x0 = Tensor(DType::F32, {T, H});
      be_.copy(h, x0);
    }

    for (int l = 0; l < cfg_.num_layers; ++l) {
      const LayerWeights& lw = w_.layers[std::size_t(l)];
      attention_block(l, batch, segs, queries, cache, h);

      Tensor ff(DType::F32, {T, H});
      if (cfg_.enable_moe_block) {
        moe_block(lw, h, ff);
      } else {
        dense_mlp(lw, norm(h, lw.pre_feedforward_norm), ff);
        be_.rms_norm(ff, &lw.post_feedforward_norm, eps(), NormKind::Plain, ff);
      }
      be_.add(h, ff);

      if (cfg_.hidden_size_per_layer_input > 0) {
        Tensor ple;
        per_layer_input(l, batch, x0, ple);
        Tensor gate = matmul(h, lw.per_layer_input_gate);
        be_.gelu_tanh_mul(gate, ple, gate);
        Tensor proj = matmul(gate, lw.per_layer_projection);
        be_.rms_norm(proj, &lw.post_per_layer_input_norm, eps(), NormKind::Plain, proj);
        be_.add(h, proj);
      }
      if (lw.layer_scalar != 1.0f) be_.scale(h, lw.layer_scalar);
    }

    if (!batch.logit_rows.empty()) {
      Tensor last(DType::F32, {int64_t(batch.logit_rows.size()), H});
      be_.gather_rows(h, batch.logit_rows, last);
      be_.rms_norm(last, &w_.final_norm, eps(), NormKind::Plain, last);
      be_.matmul(last, w_.lm_head.empty() ? w_.embed_tokens : w_.lm_head, logits);
      if (cfg_.final_logit_softcapping > 0) be_.softcap(logits, float(cfg_.final_logit_softcapping));
    }
  } catch (...) {
    cache.abort_step();
    throw;
  }
  cache.end_step();
}

void Gemma4Model::attention_block(int l, const ForwardBatch& batch,
                                  const std::vector<Segment>& segs,
                                  const std::vector<kv::AttentionQuery>& queries,
                                  kv::KvCache& cache, Tensor& h) {
  const LayerConfig& lc = cfg_.layers[std::size_t(l)];
  const LayerWeights& lw = w_.layers[std::size_t(l)];
  const int64_t T = h.dim(0);
  const int nH = cfg_.num_heads, hd = lc.head_dim, kvh = lc.kv_heads;
  const RopeFrequencies& rope = lc.type == LayerType::Full ? rope_full_ : rope_sliding_;

  Tensor a = norm(h, lw.input_norm);
  Tensor q = matmul(a, lw.q_proj);  // [T, nH·hd]
  Tensor q_heads = q.reshaped({T * nH, hd});
  be_.rms_norm(q_heads, &lw.q_norm, eps(), NormKind::Plain, q_heads);
  be_.rope(q, batch.positions, rope);

  if (lc.owns_kv()) {
    Tensor k = matmul(a, lw.k_proj);  // [T, kvh·hd], raw
    Tensor v = lc.k_eq_v ? Tensor(DType::F32, k.shape()) : matmul(a, lw.v_proj);
    if (lc.k_eq_v) be_.copy(k, v);  // V from the raw K projection
    Tensor k_heads = k.reshaped({T * kvh, hd}), v_heads = v.reshaped({T * kvh, hd});
    be_.rms_norm(k_heads, &lw.k_norm, eps(), NormKind::Plain, k_heads);
    be_.rope(k, batch.positions, rope);
    be_.rms_norm(v_heads, nullptr, eps(), NormKind::NoScale, v_heads);
    const int storage = storage_of_[std::size_t(l)];
    const int64_t width = int64_t(kvh) * hd;
    for (const Segment& s : segs)
      cache.write(storage, s.row, s.position, s.count, k.data<float>() + s.first * width,
                  v.data<float>() + s.first * width);
  }

  kv::AttentionParams params;
  params.num_heads = nH;
  params.head_dim = hd;
  params.window = lc.window;
  params.scale = 1.0f;  // q and k are normalised; Gemma 4 does not scale scores
  Tensor attn(DType::F32, {T, int64_t(nH) * hd});
  be_.attention(q, queries, cache, storage_of_[std::size_t(l)], params, attn);
  Tensor o = matmul(attn, lw.o_proj);
  be_.rms_norm(o, &lw.post_attention_norm, eps(), NormKind::Plain, o);
  be_.add(h, o);
}

void Gemma4Model::dense_mlp(const LayerWeights& lw, const Tensor& x, Tensor& out) {
  Tensor gate = matmul(x, lw.gate_proj);
  Tensor up = matmul(x, lw.up_proj);
  be_.gelu_tanh_mul(gate, up, gate);
  be_.matmul(gate, lw.down_proj, out);
}

void Gemma4Model::moe_block(const LayerWeights& lw, const Tensor& h, Tensor& out) {
  const int64_t T = h.dim(0), H = h.dim(1);
  const int E = cfg_.num_experts, K = cfg_.top_k_experts;
  // Dense "shared expert" branch.
  Tensor f1(DType::F32, {T, H});
  dense_mlp(lw, norm(h, lw.pre_feedforward_norm), f1);
  be_.rms_norm(f1, &lw.post_feedforward_norm_1, eps(), NormKind::Plain, f1);

  // Router reads the post-attention stream itself.
  Tensor z(DType::F32, {T, H});
  be_.rms_norm(h, &lw.router_scale, eps(), NormKind::Plain, z);
  be_.scale(z, 1.0f / std::sqrt(float(H)));
  Tensor router_logits = matmul(z, lw.router_proj);  // [T, E]
  std::vector<int32_t> experts(std::size_t(T * K));
  std::vector<float> weights(std::size_t(T * K));
  be_.moe_route(router_logits, K, &lw.router_per_expert_scale, experts, weights);

  // Experts, each over the tokens routed to it; contributions are added in
  // expert order, so a token's sum does not depend on the other tokens.
  Tensor x2 = norm(h, lw.pre_feedforward_norm_2);
  Tensor f2(DType::F32, {T, H});
  for (int e = 0; e < E; ++e) {
    std::vector<int32_t> tokens;
    std::vector<float> token_weights;
    for (int64_t t = 0; t < T; ++t)
      for (int j = 0; j < K; ++j)
        if (experts[std::size_t(t * K + j)] == e) {
          tokens.push_back(int32_t(t));
          token_weights.push_back(weights[std::size_t(t * K + j)]);
        }
    if (tokens.empty()) continue;
    const int64_t n = int64_t(tokens.size());
    Tensor xe(DType::F32, {n, H});
    be_.gather_rows(x2, tokens, xe);
    Tensor ye(DType::F32, {n, H});
    Tensor gate = matmul(xe, lw.expert_gate[std::size_t(e)]);
    Tensor up = matmul(xe, lw.expert_up[std::size_t(e)]);
    be_.gelu_tanh_mul(gate, up, gate);
    be_.matmul(gate, lw.expert_down[std::size_t(e)], ye);
    be_.scatter_add_rows(f2, tokens, token_weights, ye);
  }
  be_.rms_norm(f2, &lw.post_feedforward_norm_2, eps(), NormKind::Plain, f2);
  be_.add(f1, f2);
  be_.rms_norm(f1, &lw.post_feedforward_norm, eps(), NormKind::Plain, out);
}

void Gemma4Model::per_layer_input(int l, const ForwardBatch& batch, const Tensor& x0,
                                  Tensor& out) {
  const int64_t T = x0.dim(0);
  const int L = cfg_.num_layers, P = cfg_.hidden_size_per_layer_input;
  // Token part: row id of the table [V, L·P] viewed as [V·L, P] is id·L + l.
  const Tensor table = w_.embed_tokens_per_layer.reshaped(
      {w_.embed_tokens_per_layer.dim(0) * L, P});
  std::vector<int32_t> ids(static_cast<std::size_t>(T));
  for (int64_t t = 0; t < T; ++t) ids[std::size_t(t)] = batch.tokens[std::size_t(t)] * L + l;
  Tensor token_part(DType::F32, {T, P});
  be_.embed(ids, table, std::sqrt(float(P)), token_part);
  // Context part: rows l·P … l·P+P-1 of the projection, scaled, normalised.
  const Tensor proj = w_.per_layer_model_projection.rows(int64_t(l) * P, int64_t(l + 1) * P);
  out = matmul(x0, proj);
  be_.scale(out, 1.0f / std::sqrt(float(cfg_.hidden_size)));
  be_.rms_norm(out, &w_.per_layer_projection_norm, eps(), NormKind::Plain, out);
  be_.add(out, token_part);
  be_.scale(out, 1.0f / std::sqrt(2.0f));
}

std::string Gemma4Model::describe() const {
  std::ostringstream s;
  int full = 0, shared = 0;
  for (const LayerConfig& l : cfg_.layers) {
    full += l.type == LayerType::Full;
    shared += !l.owns_kv();
  }
  s << "Gemma 4 text decoder: " << cfg_.num_layers << " layers (" << cfg_.num_layers - full
    << " sliding, window " << cfg_.sliding_window << "; " << full << " full), hidden "
    << cfg_.hidden_size << ", " << cfg_.num_heads << " query heads, vocab " << cfg_.vocab_size;
  if (shared) s << ", " << shared << " KV-shared layers";
  if (cfg_.hidden_size_per_layer_input) s << ", per-layer embeddings " << cfg_.hidden_size_per_layer_input;
  if (cfg_.enable_moe_block) s << ", MoE " << cfg_.num_experts << " experts top-" << cfg_.top_k_experts;
  if (cfg_.attention_k_eq_v) s << ", k_eq_v on full layers";
  return s.str();
}

}  // namespace

std::unique_ptr<Model> make_model(Config config, Weights weights, Backend& backend,
                                  std::string directory) {
  return std::make_unique<Gemma4Model>(std::move(config), std::move(weights), backend,
                                       std::move(directory));
}

}  // namespace rowlm::gemma4
