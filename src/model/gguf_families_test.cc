// The Llama lineage and Gemma 3 from GGUF files. Each test converts a
// transformers fixture (tests/fixtures/<family>/<case>) into a GGUF the way
// llama.cpp's convert_hf_to_gguf.py writes that architecture, with this
// file's own rendering of the converter's rules (the tensor names of
// gguf-py's tensor_mapping.py, LlamaModel.permute of q and k, llama3's
// rope_freqs in double precision, Gemma3Model's 1 + w norms, stacked
// experts), and checks that rowlm loads a model whose logits equal, bit for
// bit, those of the same weights from safetensors (and, where the GGUF can
// state the fixture's model, are within 1e-4 of transformers'). Then bad
// metadata: errors that name the key. Last, the same checks on the files
// llama.cpp's converter itself wrote.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/npy.h"
#include "io/checkpoint.h"
#include "io/gguf_test_util.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "kv/kv_cache.h"
#include "model/awaiting_fixtures.h"
#include "model/gemma3.h"
#include "model/gguf_model.h"
#include "model/llama_style.h"
#include "model/load_test_util.h"
#include "model/model.h"

namespace rowlm {
namespace {

using nlohmann::json;

std::string family_fixture(const std::string& name) { return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name; }

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A GGUF file under construction: metadata by key (so tests can change or
// drop one) and tensors in order, written as the format lays them out.
class GgufBuilder {
 public:
  void u32(const std::string& key, uint32_t v) { put(key, gguf::ValueType::U32, &v, 4); }
  void i32(const std::string& key, int32_t v) { put(key, gguf::ValueType::I32, &v, 4); }
  void f32(const std::string& key, float v) { put(key, gguf::ValueType::F32, &v, 4); }
  void str(const std::string& key, const std::string& v) {
    gguf::testing::Image img;
    img.str(v);
    kv_[key] = {gguf::ValueType::String, img.bytes()};
  }
  void erase(const std::string& key) { kv_.erase(key); }
  // `shape` outermost first (transformers' order); `type` a ggml type code.
  void tensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t type, std::string bytes) {
    tensors_.push_back({name, {shape.rbegin(), shape.rend()}, type, std::move(bytes)});
  }
  void erase_tensor(const std::string& name) {
    std::erase_if(tensors_, [&](const Entry& e) { return e.name == name; });
  }

  void write(const std::string& path) const {
    gguf::testing::Image img;
    img.header(tensors_.size(), kv_.size());
    for (const auto& [key, v] : kv_) img.str(key).put<uint32_t>(uint32_t(v.first)).raw(v.second);
    uint64_t offset = 0;
    for (const Entry& t : tensors_) {
      img.tensor(t.name, t.ne, t.type, offset);
      offset += (t.bytes.size() + 31) / 32 * 32;
    }
    for (const Entry& t : tensors_) img.data(0).raw(t.bytes);
    img.data(0);
    std::ofstream(path, std::ios::binary) << img.bytes();
  }

 private:
  void put(const std::string& key, gguf::ValueType t, const void* p, std::size_t n) {
    kv_[key] = {t, std::string(static_cast<const char*>(p), n)};
  }
  struct Entry {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string bytes;
  };
  std::map<std::string, std::pair<gguf::ValueType, std::string>> kv_;
  std::vector<Entry> tensors_;
};

constexpr uint32_t kF32 = 0, kBF16 = 30;

std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.raw()), t.nbytes()); }

std::vector<float> floats_of(const Tensor& t) {
  std::vector<float> v(std::size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[std::size_t(i)] = t.dtype() == DType::F32 ? t.data<float>()[i] : bf16_to_f32(t.data<uint16_t>()[i]);
  return v;
}

std::string float_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// LlamaModel.permute: rows (heads, 2, hd/2) -> (heads, hd/2, 2), by element
// size `esize` bytes and `width` elements a row.
std::string permute_rows(const std::string& bytes, int64_t heads, int64_t rows, std::size_t row_bytes) {
  std::string out(bytes.size(), '\0');
  const int64_t hd = rows / heads, half = hd / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t j = 0; j < half; ++j) {
        const int64_t from = h * hd + s * half + j, to = h * hd + 2 * j + s;
        std::memcpy(out.data() + std::size_t(to) * row_bytes, bytes.data() + std::size_t(from) * row_bytes, row_bytes);
      }
  return out;
}

// gguf-py's tensor_mapping.py for these architectures.
std::string gguf_name(const std::string& hf, const std::string& arch) {
  static const std::map<std::string, std::string> global = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  if (global.count(hf)) return global.at(hf);
  static const std::map<std::string, std::string> layer = {
      {"input_layernorm", "attn_norm"},          {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
      {"self_attn.q_proj", "attn_q"},            {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},            {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},       {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},             {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},             {"mlp.gate", "ffn_gate_inp"},
      {"mlp.experts.gate_proj", "ffn_gate_exps"}, {"mlp.experts.up_proj", "ffn_up_exps"},
      {"mlp.experts.down_proj", "ffn_down_exps"}};
  const std::string p = "model.layers.";
  EXPECT_TRUE(hf.starts_with(p)) << hf;
  const std::size_t dot = hf.find('.', p.size());
  const std::string bid = hf.substr(p.size(), dot - p.size());
  const std::size_t last = hf.rfind('.');
  const std::string module = hf.substr(dot + 1, last - dot - 1), suffix = hf.substr(last);
  std::string name = module == "post_attention_layernorm" ? (arch == "gemma3" ? "post_attention_norm" : "ffn_norm")
                                                          : layer.at(module);
  return "blk." + bid + "." + name + suffix;
}

// How a case converts: its architecture and what the converter does to it.
struct Conversion {
  std::string arch;
  bool bf16 = false;      // --outtype bf16 (matrices stay bf16; 1-D tensors are f32)
  int layers = 0;         // keep the first N layers only (0: all)
};

// convert_hf_to_gguf.py's output for the HF directory `dir`, as far as
// rowlm reads it (no tokenizer: these tests load the model only).
GgufBuilder convert(const std::string& dir, const Conversion& how) {
  const json c = read_json(dir + "/config.json");
  const std::string& a = how.arch;
  GgufBuilder g;
  g.str("general.architecture", a);
  const int64_t layers = how.layers ? how.layers : c["num_hidden_layers"].get<int64_t>();
  const int64_t hidden = c["hidden_size"], heads = c["num_attention_heads"], kv = c["num_key_value_heads"];
  const int64_t head_dim = c.contains("head_dim") && !c["head_dim"].is_null() ? c["head_dim"].get<int64_t>() : hidden / heads;
  g.u32(a + ".block_count", uint32_t(layers));
  g.u32(a + ".context_length", c["max_position_embeddings"]);
  g.u32(a + ".embedding_length", uint32_t(hidden));
  g.u32(a + ".feed_forward_length", c["intermediate_size"]);
  g.u32(a + ".attention.head_count", uint32_t(heads));
  g.u32(a + ".attention.head_count_kv", uint32_t(kv));
  g.f32(a + ".attention.layer_norm_rms_epsilon", c["rms_norm_eps"]);
  g.u32(a + ".attention.key_length", uint32_t(head_dim));
  g.u32(a + ".attention.value_length", uint32_t(head_dim));
  if (a == "llama") g.u32(a + ".rope.dimension_count", uint32_t(head_dim));
  g.u32("tokenizer.ggml.eos_token_id", 1);
  const json& rope = c["rope_parameters"].contains("full_attention") ? c["rope_parameters"]["full_attention"]
                                                                     : c["rope_parameters"];
  g.f32(a + ".rope.freq_base", rope["rope_theta"]);
  if (rope["rope_type"] == "linear") {
    g.str(a + ".rope.scaling.type", "linear");
    g.f32(a + ".rope.scaling.factor", rope["factor"]);
  }
  if (rope["rope_type"] == "llama3") {
    // generate_extra_tensors, in double.
    const double base = rope["rope_theta"], factor = rope["factor"], low = rope["low_freq_factor"],
                 high = rope["high_freq_factor"], old = rope["original_max_position_embeddings"];
    std::vector<float> factors;
    for (int64_t i = 0; i < head_dim; i += 2) {
      const double wavelen = 2 * std::numbers::pi * std::pow(base, double(i) / double(head_dim));
      const double smooth = (old / wavelen - low) / (high - low);
      factors.push_back(float(wavelen < old / high  ? 1.0
                              : wavelen > old / low ? factor
                                                    : 1 / ((1 - smooth) / factor + smooth)));
    }
    g.tensor("rope_freqs.weight", {head_dim / 2}, kF32, float_bytes(factors));
  }
  if (a == "gemma3") {
    g.f32(a + ".rope.freq_base_swa", c["rope_parameters"]["sliding_attention"]["rope_theta"]);
    g.u32(a + ".attention.sliding_window", c["sliding_window"]);
    if (!c["final_logit_softcapping"].is_null()) g.f32(a + ".final_logit_softcapping", c["final_logit_softcapping"]);
    g.u32("tokenizer.ggml.bos_token_id", 2);
  }
  if (a == "qwen3moe") {
    g.u32(a + ".expert_count", c["num_local_experts"]);
    g.u32(a + ".expert_used_count", c["num_experts_per_tok"]);
    g.u32(a + ".expert_feed_forward_length", c["moe_intermediate_size"]);
  }

  const Checkpoint ck = Checkpoint::open(dir);
  std::map<std::string, std::vector<std::string>> experts;  // stacked name -> per-expert names
  for (const std::string& name : ck.names()) {
    if (name.starts_with("model.layers.")) {
      const int64_t bid = std::stoll(name.substr(13));
      if (bid >= layers) continue;
      if (const std::size_t e = name.find(".mlp.experts."); e != std::string::npos) {
        const std::size_t w = name.find('.', e + 13);
        experts[name.substr(0, e + 12) + name.substr(w)].push_back(name);
        continue;
      }
    }
    const Tensor t = ck.tensor(name);
    const bool vector = t.shape().size() == 1;
    std::string bytes;
    uint32_t type = kF32;
    if (a == "gemma3" && name.ends_with("norm.weight")) {
      std::vector<float> v = floats_of(t);
      for (float& x : v) x = x + 1.0f;  // Gemma3Model.norm_shift, in f32
      bytes = float_bytes(v);
    } else if (vector || t.dtype() == DType::F32 || !how.bf16 || name.ends_with("mlp.gate.weight")) {
      // prepare_tensors: 1-D tensors and the router (FFN_GATE_INP) are always F32.
      bytes = float_bytes(floats_of(t));
    } else {
      bytes = bytes_of(t);
      type = kBF16;
    }
    if (a == "llama" && (name.find("q_proj.") != std::string::npos || name.find("k_proj.") != std::string::npos)) {
      const int64_t n = name.find("q_proj.") != std::string::npos ? heads : kv;
      bytes = permute_rows(bytes, n, t.shape()[0], bytes.size() / std::size_t(t.shape()[0]));
    }
    g.tensor(gguf_name(name, a), t.shape(), type, std::move(bytes));
  }
  for (auto& [stacked, names] : experts) {
    std::sort(names.begin(), names.end(), [](const std::string& x, const std::string& y) {
      const auto id = [](const std::string& s) { return std::stoll(s.substr(s.find(".experts.") + 9)); };
      return id(x) < id(y);
    });
    std::string bytes;
    Shape shape = ck.tensor(names[0]).shape();
    const bool keep_bf16 = how.bf16 && ck.tensor(names[0]).dtype() == DType::BF16;
    for (const std::string& n : names) bytes += keep_bf16 ? bytes_of(ck.tensor(n)) : float_bytes(floats_of(ck.tensor(n)));
    shape.insert(shape.begin(), int64_t(names.size()));
    g.tensor(gguf_name(stacked, a), shape, keep_bf16 ? kBF16 : kF32, std::move(bytes));
  }
  return g;
}

Tensor logits_of(Model& model, Backend& backend, const std::vector<int32_t>& ids) {
  kv::CacheOptions opt;
  opt.layers = model.kv_layers(kv::parse_codec("f32"));
  opt.block_size = 4;
  kv::KvCache cache(opt, backend);
  ForwardBatch b;
  const kv::RowId row = cache.create_row();
  for (std::size_t i = 0; i < ids.size(); ++i) b.add(row, int64_t(i), ids[i], true);
  Tensor logits;
  model.forward(b, cache, logits);
  return logits;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float m = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct LineageCase {
  const char* fixture;
  Conversion how;
};

class LineageFromGguf : public ::testing::TestWithParam<LineageCase> {};

// The GGUF states the fixture's model exactly: logits bitwise equal to the
// safetensors model's and within 1e-4 of transformers'.
TEST_P(LineageFromGguf, EqualsTheSafetensorsModelAndTransformers) {
  const std::string dir = family_fixture(GetParam().fixture);
  TempDir tmp("gguf_families_test");
  const std::string path = tmp.file("model.gguf");
  convert(dir, GetParam().how).write(path);
  const auto ids = read_json(dir + "/reference.json")["ids_a"].get<std::vector<int32_t>>();
  auto backend = make_backend({"cpu", 2, MatmulPrecision::F32});
  auto from_gguf = load_model(path, *backend);
  auto from_safetensors = load_model(dir, *backend);
  const Tensor got = logits_of(*from_gguf, *backend, ids);
  EXPECT_TRUE(bitwise_equal(got, logits_of(*from_safetensors, *backend, ids)));
  EXPECT_LE(max_abs_diff(got, read_npy(dir + "/logits_a.npy")), 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LineageFromGguf,
    ::testing::Values(LineageCase{"llama/llama3_tied", {"llama"}},         // llama3 rope_freqs, GQA permutation, tied
                      LineageCase{"llama/linear_untied_bias", {"llama"}},  // permuted biases, linear RoPE, untied
                      LineageCase{"llama/bf16", {"llama", true}},          // bf16 matrices
                      LineageCase{"mistral/no_window", {"llama"}},         // convert writes Mistral as llama
                      LineageCase{"qwen2/mqa_tied", {"qwen2"}}),           // q/k/v biases, MQA
    [](const auto& p) {
      std::string s = p.param.fixture;
      for (char& ch : s) if (ch == '/') ch = '_';
      return s;
    });

TEST(GgufFamilies, Llama3RopeParametersAreRecoveredFromRopeFreqs) {
  TempDir tmp("gguf_families_test");
  const std::string path = tmp.file("model.gguf");
  convert(family_fixture("llama/llama3_tied"), {"llama"}).write(path);
  const json got = gguf_hf_config(gguf::File::open(path));
  const json want = read_json(family_fixture("llama/llama3_tied/config.json"))["rope_parameters"];
  for (const char* key : {"rope_type", "factor", "low_freq_factor", "high_freq_factor",
                          "original_max_position_embeddings", "rope_theta"})
    EXPECT_EQ(got["rope_parameters"][key], want[key]) << key;
}

// Q8_0 blocks of a row-major f32 matrix (rows of whole blocks of 32): a
// scale per block (f16) and 32 int8 codes, value = scale · code.
std::string q8_0(const std::vector<float>& v) {
  std::string out;
  for (std::size_t b = 0; b < v.size(); b += 32) {
    float amax = 0;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b + i]));
    const uint16_t d16 = f32_to_f16(amax / 127.0f);
    const float d = f16_to_f32(d16);
    out.append(reinterpret_cast<const char*>(&d16), 2);
    for (std::size_t i = 0; i < 32; ++i) out.push_back(char(int8_t(d == 0 ? 0 : std::lround(v[b + i] / d))));
  }
  return out;
}

std::vector<float> dequantize_q8_0(const std::string& q) {
  std::vector<float> out;
  for (std::size_t b = 0; b < q.size(); b += 34) {
    uint16_t d16;
    std::memcpy(&d16, q.data() + b, 2);
    for (std::size_t i = 0; i < 32; ++i) out.push_back(f16_to_f32(d16) * float(int8_t(q[b + 2 + i])));
  }
  return out;
}

// llama's permuted q and k rows in a block type (a llama-quantize'd file):
// the rows move whole, so the file with Q8_0 q/k matrices gives bitwise the
// logits of the same file with those blocks dequantized to F32 (rowlm's
// affine matmul is the f32 matmul of the dequantized matrix).
TEST(GgufFamilies, PermutedRowsOfBlockTypesStayExact) {
  const std::string dir = family_fixture("llama/llama3_tied");
  const Checkpoint ck = Checkpoint::open(dir);
  GgufBuilder quantized = convert(dir, {"llama"}), dequantized = quantized;
  for (int l = 0; l < 3; ++l)
    for (const char* m : {"q", "k"}) {
      const std::string hf = "model.layers." + std::to_string(l) + ".self_attn." + m + "_proj.weight";
      const Tensor t = ck.tensor(hf);
      const int64_t heads = std::string(m) == "q" ? 4 : 2;
      const std::string permuted = permute_rows(float_bytes(floats_of(t)), heads, t.shape()[0], 64 * 4);
      std::vector<float> v(permuted.size() / 4);
      std::memcpy(v.data(), permuted.data(), permuted.size());
      const std::string blocks = q8_0(v);
      const std::string name = "blk." + std::to_string(l) + ".attn_" + m + ".weight";
      quantized.erase_tensor(name);
      quantized.tensor(name, t.shape(), uint32_t(gguf::GgmlType::Q8_0), blocks);
      dequantized.erase_tensor(name);
      dequantized.tensor(name, t.shape(), kF32, float_bytes(dequantize_q8_0(blocks)));
    }
  TempDir tmp("gguf_families_test");
  quantized.write(tmp.file("q.gguf"));
  dequantized.write(tmp.file("f.gguf"));
  auto backend = make_backend({"cpu", 2, MatmulPrecision::F32});
  const auto ids = read_json(dir + "/reference.json")["ids_a"].get<std::vector<int32_t>>();
  auto q = load_model(tmp.file("q.gguf"), *backend);
  auto f = load_model(tmp.file("f.gguf"), *backend);
  const Tensor got = logits_of(*q, *backend, ids);
  EXPECT_TRUE(bitwise_equal(got, logits_of(*f, *backend, ids)));
  EXPECT_LE(max_abs_diff(got, read_npy(dir + "/logits_a.npy")), 0.05f);  // near the unquantized model
}

// Gemma 3 (gemma3/text; gemma3/bf16 in bf16): norms stored as 1 + w, window
// 5 with period 3 (layers 0, 1, 3 sliding), linear RoPE ×8 on the full
// layer, final softcap (text), untied (text) or tied head. llama.cpp scales
// queries by head_dim^-½, so the GGUF states the fixture's model with
// query_pre_attn_scalar = head_dim (16, not 20): the comparison is with the
// safetensors weights under that config.
TEST(GgufFamilies, Gemma3EqualsTheSafetensorsWeights) {
  for (const auto& [name, bf16] : {std::pair{"gemma3/text", false}, std::pair{"gemma3/bf16", true}}) {
    const std::string dir = family_fixture(name);
    TempDir tmp("gguf_families_test");
    const std::string path = tmp.file("model.gguf");
    GgufBuilder g = convert(dir, {"gemma3", bf16});
    g.u32("gemma3.attention.sliding_window_pattern", 3);
    g.write(path);
    json config = read_json(dir + "/config.json");
    config["query_pre_attn_scalar"] = 16;
    auto backend = make_backend({"cpu", 2, MatmulPrecision::F32});
    const gemma3::Config c = gemma3::parse_config(config.dump(), std::string(name) + " with query_pre_attn_scalar 16");
    auto want = gemma3::make_model(c, gemma3::load_weights(dir, c), *backend, dir);
    auto got = load_model(path, *backend);
    const auto ids = read_json(dir + "/reference.json")["ids_a"].get<std::vector<int32_t>>();
    EXPECT_TRUE(bitwise_equal(logits_of(*got, *backend, ids), logits_of(*want, *backend, ids))) << name;

    const json hf = gguf_hf_config(gguf::File::open(path));
    EXPECT_EQ(hf["layer_types"], config["layer_types"]) << name;
    EXPECT_EQ(hf["query_pre_attn_scalar"], 16) << name;
    // Without the period llama.cpp takes 6: every one of these four layers slides.
    g.erase("gemma3.attention.sliding_window_pattern");
    g.write(path);
    EXPECT_EQ(gguf_hf_config(gguf::File::open(path))["layer_types"],
              json(std::vector<std::string>(4, "sliding_attention")));
  }
}

// Qwen 3 MoE (qwen3_moe/norm_topk's first two layers, both routed: llama.cpp's
// qwen3moe has no dense layers), in bf16 as make_family_gguf_fixtures.py
// converts it: stacked bf16 experts, the router in f32 (the converter keeps
// it so), renormalised top-2.
TEST(GgufFamilies, Qwen3MoeEqualsTheSafetensorsWeights) {
  const std::string src = family_fixture("qwen3_moe/norm_topk");
  TempDir tmp("gguf_families_test");
  // The first two layers in bf16, as a safetensors directory.
  const std::string dir = tmp.path() + "/hf";
  std::filesystem::create_directories(dir);
  json config = read_json(src + "/config.json");
  config["num_hidden_layers"] = 2;
  config["mlp_only_layers"] = json::array();
  std::ofstream(dir + "/config.json") << config.dump();
  const Checkpoint ck = Checkpoint::open(src);
  NamedTensors kept;
  for (const std::string& name : ck.names()) {
    if (name.starts_with("model.layers.") && std::stoll(name.substr(13)) >= 2) continue;
    const Tensor t = ck.tensor(name);
    Tensor b = Tensor::uninitialized(DType::BF16, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) b.data<uint16_t>()[i] = f32_to_bf16(t.data<float>()[i]);
    kept.push_back({name, b});
  }
  write_safetensors(dir + "/model.safetensors", kept);
  const std::string path = tmp.file("model.gguf");
  convert(dir, {"qwen3moe", true}).write(path);
  EXPECT_EQ(gguf::File::open(path).tensor("blk.1.ffn_gate_exps.weight").type, gguf::GgmlType::BF16);

  auto backend = make_backend({"cpu", 2, MatmulPrecision::F32});
  const auto ids = read_json(src + "/reference.json")["ids_a"].get<std::vector<int32_t>>();
  auto got = load_model(path, *backend);
  auto want = load_model(dir, *backend);
  EXPECT_TRUE(bitwise_equal(logits_of(*got, *backend, ids), logits_of(*want, *backend, ids)));
}

// The same weights under another config (a case the GGUF could only state
// with a changed config): the family's own safetensors loader.
std::unique_ptr<Model> load_with_config(const json& config, const std::string& weights_dir, Backend& backend) {
  const std::string source = weights_dir + " (with the fixture's changed config)";
  if (config["model_type"] == "gemma3_text") {
    const gemma3::Config c = gemma3::parse_config(config.dump(), source);
    return gemma3::make_model(c, gemma3::load_weights(weights_dir, c), backend, weights_dir);
  }
  const llama_style::Config c = llama_style::parse_config(config.dump(), source);
  return llama_style::make_model(c, llama_style::load_weights(weights_dir, c), backend, weights_dir);
}

// tests/fixtures/gguf/families/<family>: files written by llama.cpp's own
// convert_hf_to_gguf.py (tools/gguf/make_family_gguf_fixtures.py, run on
// the accelerator machine), each from a transformers fixture: logits within
// 1e-4 of transformers', bitwise those of the same weights from
// safetensors, and transformers' greedy continuation. Skipped while the
// directory is awaited (awaiting_fixtures.h); missing otherwise, it fails.
class ConvertedByLlamaCpp : public ::testing::TestWithParam<const char*> {};

TEST_P(ConvertedByLlamaCpp, MatchesTransformersAndTheSafetensorsModel) {
  const std::string name = std::string("gguf/families/") + GetParam(), d = family_fixture(name);
  if (!std::filesystem::exists(d + "/reference.json")) {
    const std::string why = d + " is missing: run tools/gguf/make_family_gguf_fixtures.py on the accelerator machine";
    if (test::awaiting_fixture(name)) GTEST_SKIP() << why;
    FAIL() << why;
  }
  const json ref = read_json(d + "/reference.json");
  auto backend = make_backend({"cpu", 2, MatmulPrecision::F32});
  auto model = load_model(d + "/model.gguf", *backend);
  const std::string weights = family_fixture(ref["weights"]);
  const json config = read_json(std::filesystem::exists(d + "/hf/config.json") ? d + "/hf/config.json"
                                                                               : weights + "/config.json");
  auto from_safetensors = load_with_config(config, weights, *backend);
  const auto ids = ref["ids_a"].get<std::vector<int32_t>>();
  const Tensor got = logits_of(*model, *backend, ids);
  EXPECT_TRUE(bitwise_equal(got, logits_of(*from_safetensors, *backend, ids)));
  const std::string want = std::filesystem::exists(d + "/logits_a.npy") ? d + "/logits_a.npy"
                                                                        : family_fixture(ref["source"]) + "/logits_a.npy";
  EXPECT_LE(max_abs_diff(got, read_npy(want)), 1e-4f);

  // Greedy, one token at a time after the prompt.
  kv::CacheOptions opt;
  opt.layers = model->kv_layers(kv::parse_codec("f32"));
  opt.block_size = 4;
  kv::KvCache cache(opt, *backend);
  const kv::RowId row = cache.create_row();
  std::vector<int32_t> seq = ref["greedy_prompt"].get<std::vector<int32_t>>(), out;
  const auto want_tokens = ref["greedy_tokens"].get<std::vector<int32_t>>();
  std::size_t pos = 0;
  while (out.size() < want_tokens.size()) {
    ForwardBatch b;
    for (std::size_t i = pos; i < seq.size(); ++i) b.add(row, int64_t(i), seq[i], i + 1 == seq.size());
    Tensor logits;
    model->forward(b, cache, logits);
    pos = seq.size();
    const float* l = logits.data<float>();
    const int32_t next = int32_t(std::max_element(l, l + logits.dim(1)) - l);
    out.push_back(next);
    seq.push_back(next);
  }
  EXPECT_EQ(out, want_tokens);
}

INSTANTIATE_TEST_SUITE_P(Families, ConvertedByLlamaCpp,
                         ::testing::Values("llama", "qwen2", "mistral", "gemma3", "qwen3_moe"),
                         [](const auto& p) { return std::string(p.param); });

std::string load_error(const GgufBuilder& g) {
  TempDir tmp("gguf_families_test");
  const std::string path = tmp.file("model.gguf");
  g.write(path);
  return model_testing::load_error_at(path);
}

::testing::AssertionResult has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << s;
}

TEST(GgufFamilies, BadMetadataNamesTheKey) {
  const GgufBuilder llama = convert(family_fixture("llama/llama3_tied"), {"llama"});
  GgufBuilder g = llama;
  g.str("general.architecture", "falcon");
  EXPECT_TRUE(has(load_error(g), "GGUF architecture 'falcon' is not supported (supported: gemma3, gemma4, llama, "
                                 "qwen2, qwen3, qwen3moe)"));
  g = llama;
  g.erase("llama.attention.head_count");
  EXPECT_TRUE(has(load_error(g), "'llama.attention.head_count' is missing"));
  g = llama;
  g.u32("llama.attention.head_count_kv", 3);
  EXPECT_TRUE(has(load_error(g), "'llama.attention.head_count_kv' (3) does not divide llama.attention.head_count (4)"));
  g = llama;
  g.u32("llama.attention.value_length", 8);
  EXPECT_TRUE(has(load_error(g), "'llama.attention.value_length' differs from attention.key_length"));
  g = llama;
  g.u32("llama.rope.dimension_count", 8);
  EXPECT_TRUE(has(load_error(g), "'llama.rope.dimension_count' is not the head size"));
  g = llama;
  g.str("llama.rope.scaling.type", "yarn");
  EXPECT_TRUE(has(load_error(g), "'llama.rope.scaling.type' = 'yarn' is not supported (supported: none, linear)"));
  g = llama;
  g.u32("llama.expert_count", 8);
  EXPECT_TRUE(has(load_error(g), "'llama.expert_count' is not supported"));
  g = llama;
  g.erase_tensor("rope_freqs.weight");
  g.tensor("rope_freqs.weight", {8}, kF32, float_bytes({1, 2, 3, 2, 5, 6, 7, 8}));
  EXPECT_TRUE(has(load_error(g), "GGUF tensor 'rope_freqs.weight' is not the llama3 RoPE"));
  g = llama;
  g.u32("llama.vocab_size", 100);
  EXPECT_TRUE(has(load_error(g), "'llama.vocab_size' (100) differs from token_embd.weight's rows (128)"));

  GgufBuilder moe = convert(family_fixture("qwen3_moe/norm_topk"), {"qwen3moe", false, 2});
  moe.u32("qwen3moe.expert_gating_func", 2);
  EXPECT_TRUE(has(load_error(moe), "'qwen3moe.expert_gating_func' is not supported (softmax routing only)"));
  moe = convert(family_fixture("qwen3_moe/norm_topk"), {"qwen3moe", false, 2});
  moe.erase("qwen3moe.expert_used_count");
  EXPECT_TRUE(has(load_error(moe), "'qwen3moe.expert_used_count' is missing"));

  GgufBuilder gemma = convert(family_fixture("gemma3/text"), {"gemma3"});
  gemma.u32("gemma3.attention.head_count_kv", 3);
  EXPECT_TRUE(has(load_error(gemma), "'gemma3.attention.head_count_kv' (3) does not divide"));
}

}  // namespace
}  // namespace rowlm
