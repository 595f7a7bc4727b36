#include "model/mlx_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/config_fields.h"
#include "model/gguf_model.h"
#include "model/quantization_config.h"
#include "model/weight_binder.h"

namespace rowlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

std::string stem_of(const std::string& name) {
  return name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
}

std::string spec_name(const quant::AffineSpec& s) {
  return "q" + std::to_string(s.bits) + "/" + std::to_string(s.group_size);
}

// Rows [begin, end) of every expert of a stack [E, R, C], as an owned [E, end - begin, C] tensor.
Tensor expert_rows(const Tensor& stack, int64_t begin, int64_t end) {
  const int64_t E = stack.dim(0), R = stack.dim(1), C = stack.dim(2);
  Tensor out(stack.dtype(), {E, end - begin, C});
  const std::size_t row = std::size_t(C) * dtype_size(stack.dtype());
  for (int64_t e = 0; e < E; ++e)
    std::memcpy(static_cast<std::byte*>(out.raw()) + std::size_t(e * (end - begin)) * row,
                static_cast<const std::byte*>(stack.raw()) + std::size_t(e * R + begin) * row,
                std::size_t(end - begin) * row);
  return out;
}

// The tensors to write, under MLX's names: transformers' fused expert
// stacks become switch_glu's three.
NamedTensors mlx_named(const Checkpoint& ck) {
  NamedTensors out;
  for (const std::string& name : ck.names()) {
    const Tensor t = ck.tensor(name);
    const std::string bare = stem_of(name);
    if (t.rank() == 3 && bare.ends_with("experts.gate_up_proj")) {
      const std::string base = bare.substr(0, bare.size() - std::string("gate_up_proj").size());
      const int64_t I = t.dim(1) / 2;
      out.emplace_back(base + "switch_glu.gate_proj.weight", expert_rows(t, 0, I));
      out.emplace_back(base + "switch_glu.up_proj.weight", expert_rows(t, I, 2 * I));
    } else if (t.rank() == 3 && bare.ends_with("experts.down_proj")) {
      out.emplace_back(bare.substr(0, bare.size() - std::string("down_proj").size()) + "switch_glu.down_proj.weight", t);
    } else {
      out.emplace_back(name, t);
    }
  }
  return out;
}

std::optional<quant::AffineSpec> spec_for(const std::string& name, const QuantizeOptions& options) {
  std::optional<quant::AffineSpec> spec = options.spec;
  if (stem_of(name).ends_with("router.proj")) spec = quant::AffineSpec{8, 64};  // mlx-lm's Gemma 4 predicate
  for (const QuantizeOverride& o : options.overrides)
    if (name.find(o.pattern) != std::string::npos) spec = o.spec;
  return spec;
}

json spec_json(const quant::AffineSpec& s) { return {{"group_size", s.group_size}, {"bits", s.bits}}; }

}  // namespace

quant::AffineSpec parse_quantize_spec(const std::string& text) {
  quant::AffineSpec spec{0, 64};
  const auto slash = text.find('/');
  auto number = [&](const std::string& part) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size()) throw Error("'" + text + "' is not BITS or BITS/GROUP (e.g. 4/64)");
    return v;
  };
  spec.bits = number(text.substr(0, slash));
  if (slash != std::string::npos) spec.group_size = number(text.substr(slash + 1));
  quant::check_spec(spec);
  return spec;
}

QuantizeOverride parse_quantize_override(const std::string& text) {
  const auto eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error("override '" + text + "': expected PATTERN=BITS, PATTERN=BITS/GROUP or PATTERN=none");
  QuantizeOverride o{text.substr(0, eq), std::nullopt};
  if (text.substr(eq + 1) == "none") return o;
  try {
    o.spec = parse_quantize_spec(text.substr(eq + 1));
  } catch (const Error& e) {
    throw Error("override '" + text + "': " + e.what());
  }
  return o;
}

QuantizeReport quantize_checkpoint(const std::string& src, const std::string& dst, const QuantizeOptions& options) {
  quant::check_spec(options.spec);
  const std::string config_path = src + "/config.json";
  json config = config::parse_object(config::read_text(config_path), config_path);
  if (decoder::QuantizationConfig::parse(config, config_path).present())
    throw Error(src + " is already quantized (config.json has a quantization entry)");
  const Checkpoint ck = Checkpoint::open(src);
  std::error_code ec;
  if (fs::exists(dst, ec) && !fs::is_empty(dst, ec)) throw Error("quantize: " + dst + " exists and is not empty");
  fs::create_directories(dst, ec);
  if (ec) throw Error("quantize: cannot create " + dst + ": " + ec.message());

  const json& text = config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
  const int64_t per_layer_width =
      text.contains("hidden_size_per_layer_input") && text["hidden_size_per_layer_input"].is_number_integer()
          ? text["hidden_size_per_layer_input"].get<int64_t>()
          : 0;
  QuantizeReport report;
  NamedTensors out;
  json modules = json::object();
  for (auto& [name, t] : mlx_named(ck)) {
    if (t.dtype() == DType::U32 || name.ends_with(".scales"))
      throw Error(ck.file_of(name) + ": tensor '" + name + "' is already quantized");
    report.bytes_in += t.nbytes();
    const bool matrix = name.ends_with(".weight") && (t.rank() == 2 || t.rank() == 3) && is_float(t.dtype());
    const std::optional<quant::AffineSpec> spec = matrix ? spec_for(name, options) : std::nullopt;
    const std::string stem = stem_of(name);
    const int64_t cols = t.rank() > 0 ? t.dim(-1) : 0;
    // Gemma's per-layer embedding table [V, L·P] is read as [V·L, P]: each
    // layer's part must itself be whole groups and words.
    const int64_t part = stem.ends_with("embed_tokens_per_layer") ? per_layer_width : cols;
    if (!spec || cols % spec->group_size != 0 || cols * spec->bits % 32 != 0 || part <= 0 ||
        part % spec->group_size != 0 || part * spec->bits % 32 != 0) {
      if (matrix) modules[stem] = false;  // as mlx-lm: a matrix it cannot (or is told not to) quantize
      report.bytes_out += t.nbytes();
      ++report.kept;
      out.emplace_back(name, t);
      continue;
    }
    const int64_t rows = t.numel() / cols;
    const Weight q = decoder::quantize_matrix(t.reshaped({rows, cols}), *spec, t.dtype());
    Shape codes = t.shape(), params = t.shape();
    codes.back() = q.values.dim(1);
    params.back() = q.scales.dim(1);
    out.emplace_back(name, q.values.reshaped(codes));
    out.emplace_back(stem + ".scales", q.scales.reshaped(params));
    out.emplace_back(stem + ".biases", q.biases.reshaped(params));
    report.bytes_out += q.values.nbytes() + q.scales.nbytes() + q.biases.nbytes();
    ++report.quantized;
    if (!(*spec == options.spec)) modules[stem] = spec_json(*spec);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  write_safetensors(dst + "/model.safetensors", out, {{"format", "mlx"}});

  json q = spec_json(options.spec);
  q["mode"] = "affine";
  for (const auto& [k, v] : modules.items()) q[k] = v;
  config["quantization"] = q;
  config["quantization_config"] = q;
  {
    std::ofstream f(dst + "/config.json");
    f << config.dump(2) << "\n";
    if (!f) throw Error("quantize: cannot write " + dst + "/config.json");
  }
  // The tokenizer, chat template, generation config and the rest.
  for (const auto& entry : fs::directory_iterator(src)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || file == "config.json" || file.ends_with(".safetensors") ||
        file == "model.safetensors.index.json")
      continue;
    fs::copy_file(entry.path(), fs::path(dst) / file, fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error("quantize: cannot copy " + entry.path().string() + ": " + ec.message());
  }
  return report;
}

std::vector<TensorFormat> tensor_formats(const std::string& dir) {
  if (is_gguf_file(dir)) return gguf_tensor_formats(dir);
  const Checkpoint ck = Checkpoint::open(dir);
  const std::string config_path = dir + "/config.json";
  decoder::QuantizationConfig quantization;
  if (fs::exists(config_path)) quantization = decoder::QuantizationConfig::parse(json::parse(config::read_text(config_path)), config_path);
  std::vector<TensorFormat> out;
  for (const std::string& name : ck.names()) {
    const SafetensorsEntry& e = *ck.find(name);
    const std::string stem = stem_of(name);
    if ((name.ends_with(".scales") || name.ends_with(".biases")) && ck.contains(name.substr(0, name.size() - 7) + ".weight"))
      continue;  // counted with its matrix
    TensorFormat f{name, std::string(dtype_name(e.dtype)), e.shape, std::size_t(e.end - e.begin)};
    const SafetensorsEntry* scales = ck.find(stem + ".scales");
    const SafetensorsEntry* biases = ck.find(stem + ".biases");
    if (scales && e.dtype == DType::U32 && !e.shape.empty() && !scales->shape.empty()) {
      f.bytes += std::size_t(scales->end - scales->begin) + (biases ? std::size_t(biases->end - biases->begin) : 0);
      const int64_t words = e.shape.back(), groups = scales->shape.back();
      // Bits and group from the config when it has them; else from the
      // shapes under the config's (or MLX's) group size.
      const quant::AffineSpec spec = quantization.spec_for(stem).value_or(quant::AffineSpec{4, 64});
      const int64_t cols = groups * spec.group_size;
      const int bits = cols > 0 && words * 32 % cols == 0 ? int(words * 32 / cols) : 0;
      f.format = spec_name({bits, spec.group_size}) + " (" + std::string(dtype_name(scales->dtype)) + " scales)";
      f.shape.back() = cols;
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace rowlm
