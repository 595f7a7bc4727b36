// The Llama lineage's GGUF metadata (llama.cpp's llama, qwen2, qwen3 and
// qwen3moe loaders) as the config.json llama_style.h reads.

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "model/decoder.h"
#include "model/gguf_config.h"

namespace rowlm::gguf_config {
namespace {

// The llama3 factors convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors
// writes for (θ, head_dim, factor, low 1, high 4, original context), computed
// in f32 as torch does there (a Python scalar in a tensor op is an f32; a
// scalar divided by a tensor is the tensor's reciprocal times the scalar).
std::vector<float> llama3_factors(const std::vector<float>& inv_freq, float factor, double original) {
  const float two_pi = float(2.0 * std::numbers::pi);
  const float high_wavelen = float(original / 4.0), low_wavelen = float(original / 1.0);
  std::vector<float> out;
  for (float inv : inv_freq) {
    const float wavelen = (1.0f / inv) * two_pi;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = ((1.0f / wavelen) * float(original) - 1.0f) / 3.0f;
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

// rope_freqs.weight, llama.cpp's per-frequency divisors, as the llama3
// rope_parameters they were computed from. The file keeps only the factors,
// so the parameters are recovered (factor: the lowest band's; original
// context: from a smoothed band; low and high frequency factors: 1 and 4,
// those of every Llama 3.x release and the converter's defaults) and
// accepted only if they give the file's factors again: the model then runs
// with transformers' llama3 frequencies, the model the file was made from.
json llama3_rope(const gguf::File& f, const gguf::TensorInfo& t, double theta, int64_t head_dim) {
  const std::string name = "GGUF tensor 'rope_freqs.weight'";
  if (t.type != gguf::GgmlType::F32 || t.ne.size() != 1 || t.ne[0] != head_dim / 2)
    f.fail(name + " must be an F32 vector of head_dim / 2 (" + std::to_string(head_dim / 2) + ") factors");
  std::vector<float> file(std::size_t(t.ne[0]));
  std::memcpy(file.data(), t.bytes.data(), file.size() * sizeof(float));
  json rope = {{"rope_type", "default"}, {"rope_theta", theta}};
  bool ones = true;
  for (float x : file) ones = ones && x == 1.0f;
  if (ones) return rope;
  const std::vector<float> inv = decoder::default_rope(int(head_dim), theta).inv_freq;
  const float factor = file.back();
  double original = 0;
  for (std::size_t i = 0; i < file.size() && original == 0; ++i)
    if (file[i] > 1.0f && file[i] < factor) {
      const double wavelen = 2.0 * std::numbers::pi / double(inv[i]);
      const double smooth = (1.0 / double(file[i]) - 1.0 / double(factor)) / (1.0 - 1.0 / double(factor));
      original = std::round((3.0 * smooth + 1.0) * wavelen);
    }
  if (original == 0) {
    // No smoothed band: any context between the bands gives these factors;
    // take the one just below the lowest low-band wavelength.
    for (std::size_t i = 0; i < file.size(); ++i)
      if (file[i] == factor) {
        original = std::ceil(2.0 * std::numbers::pi / double(inv[i])) - 1.0;
        break;
      }
  }
  bool same = factor > 1.0f && original > 0;
  if (same) {
    const std::vector<float> again = llama3_factors(inv, factor, original);
    for (std::size_t i = 0; i < file.size(); ++i)
      same = same && std::fabs(again[i] - file[i]) <= 1e-5f * file[i];
  }
  if (!same)
    f.fail(name + " is not the llama3 RoPE convert_hf_to_gguf.py writes (low/high frequency factors 1 and 4); "
                  "rowlm runs no other per-frequency factors");
  return {{"rope_type", "llama3"},          {"rope_theta", theta},
          {"factor", double(factor)},       {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},        {"original_max_position_embeddings", int64_t(original)}};
}

}  // namespace

// What each loader reads (src/models/<arch>.cpp in llama.cpp): the shared
// geometry and RoPE (llama: linear scaling or llama3's rope_freqs), biases
// where the tensors are (qwen2 always has q/k/v biases), and for qwen3moe
// the experts: every layer routed, top-k weights renormalised (llama.cpp's
// qwen3moe graph always normalises them, as norm_topk_prob does).
// sliding_window is not read by these loaders, so a window in the file is
// ignored as llama.cpp ignores it.
json llama_lineage_config(const gguf::File& f, const std::string& arch) {
  const Keys k{f, arch};
  const int layers = int(k.integer("block_count"));
  const int64_t vocab = vocab_size(f);
  if (k.has("vocab_size") && k.integer("vocab_size") != vocab)
    k.fail("vocab_size", "(" + std::to_string(k.integer("vocab_size")) + ") differs from token_embd.weight's rows (" +
                             std::to_string(vocab) + ")");
  const int64_t hidden = k.integer("embedding_length");
  const int64_t heads = k.integer("attention.head_count");
  if (heads <= 0) k.fail("attention.head_count", "must be positive");
  const int64_t kv_heads = k.has("attention.head_count_kv") ? uniform_value(k, "attention.head_count_kv", layers) : heads;
  if (kv_heads <= 0 || heads % kv_heads != 0)
    k.fail("attention.head_count_kv", "(" + std::to_string(kv_heads) + ") does not divide " + k.key("attention.head_count") +
                                          " (" + std::to_string(heads) + ")");
  if (!k.has("attention.key_length") && hidden % heads != 0)
    k.fail("attention.head_count", "(" + std::to_string(heads) + ") does not divide embedding_length (" +
                                       std::to_string(hidden) + ") and attention.key_length is missing");
  const int64_t head_dim = k.integer("attention.key_length", hidden / heads);
  if (k.integer("attention.value_length", head_dim) != head_dim)
    k.fail("attention.value_length", "differs from attention.key_length");
  if (k.integer("rope.dimension_count", head_dim) != head_dim)
    k.fail("rope.dimension_count", "is not the head size: partial RoPE is not supported for " + arch);

  const double theta = k.number("rope.freq_base", 10000.0);  // llama.cpp's default base
  const double factor = linear_rope_factor(k);
  json rope = {{"rope_type", "default"}, {"rope_theta", theta}};
  if (factor != 1.0) rope = {{"rope_type", "linear"}, {"rope_theta", theta}, {"factor", factor}};
  if (const gguf::TensorInfo* freqs = f.find_tensor("rope_freqs.weight")) {
    if (factor != 1.0) k.fail("rope.scaling.factor", "and tensor 'rope_freqs.weight' both scale RoPE");
    rope = llama3_rope(f, *freqs, theta, head_dim);
  }

  const bool moe = arch == "qwen3moe";
  if (!moe && k.integer("expert_count", 0) > 0)
    k.fail("expert_count", "is not supported: " + arch + " files with experts (MoE) are not supported");
  json c = {
      {"model_type", moe ? "qwen3_moe" : arch},
      {"vocab_size", vocab},
      {"hidden_size", hidden},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", k.integer("context_length")},
      {"rms_norm_eps", k.number("attention.layer_norm_rms_epsilon", 1e-6)},
      {"rope_parameters", rope},
      {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr},
      {"attention_bias", f.find_tensor("blk.0.attn_q.bias") != nullptr},
      {"eos_token_id", stop_ids(f)},
  };
  if (k.has("feed_forward_length") || !moe) c["intermediate_size"] = uniform_value(k, "feed_forward_length", layers);
  if (moe) {
    const int64_t experts = k.integer("expert_count"), used = k.integer("expert_used_count");
    if (experts <= 0) k.fail("expert_count", "must be positive for qwen3moe");
    if (used <= 0) k.fail("expert_used_count", "must be positive for qwen3moe");
    if (k.integer("expert_shared_count", 0) != 0) k.fail("expert_shared_count", "is not supported (no shared experts)");
    if (k.integer("expert_gating_func", 1) != 1)
      k.fail("expert_gating_func", "is not supported (softmax routing only)");
    if (const double scale = k.number("expert_weights_scale", 1.0); scale != 1.0 && scale != 0.0)
      k.fail("expert_weights_scale", "is not supported (unscaled expert weights only)");
    // llama.cpp's fallback when the expert width is absent.
    const int64_t width = k.has("expert_feed_forward_length") ? k.integer("expert_feed_forward_length")
                                                              : k.integer("feed_forward_length") / used;
    c["num_experts"] = experts;
    c["num_experts_per_tok"] = used;
    c["moe_intermediate_size"] = width;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
  }
  add_special_ids(f, c);
  c.erase("pad_token_id");
  return c;
}

}  // namespace rowlm::gguf_config
