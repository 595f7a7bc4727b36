#include "model/gemma4_weights.h"

#include <charconv>
#include <set>

#include "core/error.h"
#include "io/checkpoint.h"

namespace rowlm::gemma4 {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

Tensor to_f32(const Tensor& t) {
  Tensor out(DType::F32, t.shape());
  float* dst = out.data<float>();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) dst[i] = t.data<float>()[i];
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(t.data<uint16_t>()[i]);
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(t.data<uint16_t>()[i]);
      break;
    default:
      ROWLM_CHECK(false, "to_f32 of a non-float tensor");
  }
  return out;
}

// Finds tensors under the text prefix, checks them against the shapes the
// config implies, and counts what it binds (each stored tensor once).
class Binder {
 public:
  Binder(const Checkpoint& ck, std::string prefix, Weights& w) : ck_(ck), prefix_(std::move(prefix)), w_(w) {}

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& rel) const { return ck_.contains(prefix_ + rel); }

  // A zero-copy view of a float matrix (or 3-D expert stack).
  Tensor matrix(const std::string& rel, const Shape& shape) { return bind(prefix_ + rel, shape); }
  // A norm weight or scale, converted to owned f32.
  Tensor vector(const std::string& rel, int64_t size) { return to_f32(bind(prefix_ + rel, {size})); }
  float scalar(const std::string& rel) {
    const std::string name = prefix_ + rel;
    const SafetensorsEntry& e = check(name);
    if (shape_numel(e.shape) != 1 || e.shape.size() > 1) {
      fail(name, "has shape " + shape_str(e.shape) + "; expected [1]");
    }
    return to_f32(bind(name, e.shape)).data<float>()[0];
  }
  // The first of `candidates` (full names) that exists, bound with `shape`.
  Tensor first_of(const std::vector<std::string>& candidates, const Shape& shape) {
    for (const std::string& name : candidates) {
      if (ck_.contains(name)) return bind(name, shape);
    }
    std::string tried;
    for (const std::string& name : candidates) tried += (tried.empty() ? "'" : ", '") + name + "'";
    throw Error(ck_.listing() + ": missing tensor " + tried + " (none of these names exists)");
  }

  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    throw Error(ck_.file_of(name) + ": tensor '" + name + "' " + what);
  }

 private:
  const SafetensorsEntry& check(const std::string& name) const {
    // MLX stores a quantized `<p>.weight` with `<p>.scales` and `<p>.biases` beside it.
    const std::string stem = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    if (ck_.contains(stem + ".scales")) {
      fail(name, "is MLX-quantized ('" + stem + ".scales' is present); quantized checkpoints are not supported yet");
    }
    const SafetensorsEntry* e = ck_.find(name);
    if (!e) throw Error(ck_.listing() + ": missing tensor '" + name + "'");
    if (!is_float(e->dtype)) {
      fail(name, "has dtype " + std::string(dtype_name(e->dtype)) + "; expected f32, bf16 or f16");
    }
    return *e;
  }

  Tensor bind(const std::string& name, const Shape& shape) {
    const SafetensorsEntry& e = check(name);
    if (e.shape != shape) fail(name, "has shape " + shape_str(e.shape) + "; config.json implies " + shape_str(shape));
    if (bound_.insert(name).second) {
      w_.weight_bytes += e.end - e.begin;
      w_.parameter_count += shape_numel(e.shape);
    }
    return ck_.tensor(name);
  }

  const Checkpoint& ck_;
  std::string prefix_;
  Weights& w_;
  std::set<std::string> bound_;
};

// Tensors that show the checkpoint was made for another config: more
// layers, or PLE / MoE weights the config turns off. Binding would
// silently ignore them and produce garbage.
void check_checkpoint_matches_config(const Checkpoint& ck, const std::string& prefix, const Config& c) {
  const std::string layers = prefix + "layers.";
  for (const std::string& name : ck.names()) {
    if (!name.starts_with(layers)) continue;
    const char* begin = name.data() + layers.size();
    const char* end = name.data() + name.size();
    int index = -1;
    const auto [stop, ec] = std::from_chars(begin, end, index);
    if (ec == std::errc() && stop != end && *stop == '.' && index >= c.num_layers) {
      throw Error(ck.file_of(name) + ": tensor '" + name + "' belongs to layer " + std::to_string(index) +
                  ", but config.json has num_hidden_layers " + std::to_string(c.num_layers));
    }
  }
  const std::string ple = prefix + "embed_tokens_per_layer.weight";
  if (c.hidden_size_per_layer_input == 0 && ck.contains(ple)) {
    throw Error(ck.file_of(ple) + ": tensor '" + ple +
                "' holds per-layer embeddings, but config.json has hidden_size_per_layer_input 0");
  }
  const std::string router = prefix + "layers.0.router.proj.weight";
  if (!c.enable_moe_block && ck.contains(router)) {
    throw Error(ck.file_of(router) + ": tensor '" + router + "' is an MoE router, but config.json has enable_moe_block false");
  }
}

template <class Source>
void bind_experts(Source& b, const std::string& p, const Config& c, LayerWeights& lw) {
  const int64_t E = c.num_experts, Ie = c.moe_intermediate_size, H = c.hidden_size;
  const std::string& pre = b.prefix();
  lw.expert_gate.resize(E);
  lw.expert_up.resize(E);
  lw.expert_down.resize(E);
  if (b.has(p + "experts.switch_glu.gate_proj.weight")) {  // MLX: split gate and up stacks
    const Tensor gate = b.matrix(p + "experts.switch_glu.gate_proj.weight", {E, Ie, H}).reshaped({E * Ie, H});
    const Tensor up = b.matrix(p + "experts.switch_glu.up_proj.weight", {E, Ie, H}).reshaped({E * Ie, H});
    for (int64_t e = 0; e < E; ++e) {
      lw.expert_gate[e] = gate.rows(e * Ie, (e + 1) * Ie);
      lw.expert_up[e] = up.rows(e * Ie, (e + 1) * Ie);
    }
  } else {  // transformers: one [E, 2·I_e, H] stack, gate rows first
    const Tensor gate_up =
        b.first_of({pre + p + "experts.gate_up_proj", pre + p + "experts.gate_up_proj.weight",
                    pre + p + "experts.switch_glu.gate_proj.weight"},
                   {E, 2 * Ie, H})
            .reshaped({E * 2 * Ie, H});
    for (int64_t e = 0; e < E; ++e) {
      lw.expert_gate[e] = gate_up.rows(2 * e * Ie, 2 * e * Ie + Ie);
      lw.expert_up[e] = gate_up.rows(2 * e * Ie + Ie, 2 * (e + 1) * Ie);
    }
  }
  const Tensor down = b.first_of({pre + p + "experts.down_proj", pre + p + "experts.down_proj.weight",
                                  pre + p + "experts.switch_glu.down_proj.weight"},
                                 {E, H, Ie})
                          .reshaped({E * H, Ie});
  for (int64_t e = 0; e < E; ++e) lw.expert_down[e] = down.rows(e * H, (e + 1) * H);
}

// Every tensor the config calls for, taken from `b` (a checkpoint Binder, or
// the SyntheticSource of make_synthetic_weights): the one place that knows
// the names and shapes of a Gemma 4 checkpoint.
template <class Source>
void bind_all(Source& b, const Config& c, Weights& w) {
  const std::string& prefix = b.prefix();
  const int64_t H = c.hidden_size, V = c.vocab_size, nH = c.num_heads, L = c.num_layers;
  const int64_t P = c.hidden_size_per_layer_input;

  w.embed_tokens = b.matrix("embed_tokens.weight", {V, H});
  w.final_norm = b.vector("norm.weight", H);
  if (!c.tie_word_embeddings) {
    const std::string mlx_head = prefix == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight";
    w.lm_head = b.first_of({mlx_head, prefix + "lm_head.weight"}, {V, H});
  }
  if (P > 0) {
    w.embed_tokens_per_layer = b.matrix("embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P});
    w.per_layer_model_projection = b.matrix("per_layer_model_projection.weight", {L * P, H});
    w.per_layer_projection_norm = b.vector("per_layer_projection_norm.weight", P);
  }

  w.layers.resize(c.num_layers);
  for (const LayerConfig& lc : c.layers) {
    LayerWeights& lw = w.layers[lc.index];
    const std::string p = "layers." + std::to_string(lc.index) + ".";
    const int64_t hd = lc.head_dim, kv = int64_t(lc.kv_heads) * lc.head_dim, I = lc.intermediate;

    lw.input_norm = b.vector(p + "input_layernorm.weight", H);
    lw.post_attention_norm = b.vector(p + "post_attention_layernorm.weight", H);
    lw.pre_feedforward_norm = b.vector(p + "pre_feedforward_layernorm.weight", H);
    lw.post_feedforward_norm = b.vector(p + "post_feedforward_layernorm.weight", H);

    lw.q_proj = b.matrix(p + "self_attn.q_proj.weight", {nH * hd, H});
    lw.q_norm = b.vector(p + "self_attn.q_norm.weight", hd);
    lw.o_proj = b.matrix(p + "self_attn.o_proj.weight", {H, nH * hd});
    if (lc.owns_kv()) {  // KV-shared layers' k/v (if a converter kept them) go unread
      lw.k_proj = b.matrix(p + "self_attn.k_proj.weight", {kv, H});
      lw.k_norm = b.vector(p + "self_attn.k_norm.weight", hd);
      if (!lc.k_eq_v) lw.v_proj = b.matrix(p + "self_attn.v_proj.weight", {kv, H});
    }

    lw.gate_proj = b.matrix(p + "mlp.gate_proj.weight", {I, H});
    lw.up_proj = b.matrix(p + "mlp.up_proj.weight", {I, H});
    lw.down_proj = b.matrix(p + "mlp.down_proj.weight", {H, I});
    lw.layer_scalar = b.scalar(p + "layer_scalar");

    if (P > 0) {
      lw.per_layer_input_gate = b.matrix(p + "per_layer_input_gate.weight", {P, H});
      lw.per_layer_projection = b.matrix(p + "per_layer_projection.weight", {H, P});
      lw.post_per_layer_input_norm = b.vector(p + "post_per_layer_input_norm.weight", H);
    }
    if (c.enable_moe_block) {
      lw.router_proj = b.matrix(p + "router.proj.weight", {c.num_experts, H});
      lw.router_scale = b.vector(p + "router.scale", H);
      lw.router_per_expert_scale = b.vector(p + "router.per_expert_scale", c.num_experts);
      bind_experts(b, p, c, lw);
      lw.pre_feedforward_norm_2 = b.vector(p + "pre_feedforward_layernorm_2.weight", H);
      lw.post_feedforward_norm_1 = b.vector(p + "post_feedforward_layernorm_1.weight", H);
      lw.post_feedforward_norm_2 = b.vector(p + "post_feedforward_layernorm_2.weight", H);
    }
  }
}

// Random weights of the right shapes, for benchmarks and tests: bf16
// matrices ~ N(0, std), norm weights near 1, scalars 1.
class SyntheticSource {
 public:
  SyntheticSource(uint64_t seed, float stddev, Weights& w) : state_(seed * 0x9E3779B97F4A7C15ull + 1), std_(stddev), w_(w) {}
  const std::string& prefix() const { return prefix_; }
  bool has(const std::string&) const { return false; }
  Tensor matrix(const std::string&, const Shape& shape) {
    Tensor t(DType::BF16, shape);
    uint16_t* d = t.data<uint16_t>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = f32_to_bf16(std_ * normal());
    w_.weight_bytes += t.nbytes();
    w_.parameter_count += t.numel();
    return t;
  }
  Tensor first_of(const std::vector<std::string>& names, const Shape& shape) { return matrix(names.front(), shape); }
  Tensor vector(const std::string&, int64_t size) {
    Tensor t(DType::F32, {size});
    for (int64_t i = 0; i < size; ++i) t.data<float>()[i] = 1.0f + 0.1f * normal();
    w_.parameter_count += size;
    return t;
  }
  float scalar(const std::string&) { return 1.0f; }

 private:
  // Sum of four uniforms, rescaled: cheap, bounded, close enough to normal.
  float normal() {
    float sum = 0;
    for (int k = 0; k < 4; ++k) {
      state_ ^= state_ << 13;
      state_ ^= state_ >> 7;
      state_ ^= state_ << 17;
      sum += float(state_ >> 40) * (1.0f / 16777216.0f);
    }
    return (sum - 2.0f) * 1.7320508f;
  }
  uint64_t state_;
  float std_;
  Weights& w_;
  std::string prefix_;
};

}  // namespace

Weights load_weights(const std::string& model_dir, const Config& c) {
  ROWLM_CHECK(int(c.layers.size()) == c.num_layers, "config is not resolved (use load_config)");
  const Checkpoint ck = Checkpoint::open(model_dir);
  const std::string prefix = detect_text_prefix(ck);
  check_checkpoint_matches_config(ck, prefix, c);
  Weights w;
  w.storage = ck.storage();
  Binder b(ck, prefix, w);
  bind_all(b, c, w);
  return w;
}

Weights make_synthetic_weights(const Config& c, uint64_t seed, float stddev) {
  ROWLM_CHECK(int(c.layers.size()) == c.num_layers, "config is not resolved (use parse_config)");
  Weights w;
  SyntheticSource source(seed, stddev, w);
  bind_all(source, c, w);
  return w;
}

}  // namespace rowlm::gemma4
