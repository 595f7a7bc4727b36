#include "model/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/gguf_affine.h"
#include "model/gemma3.h"
#include "model/gemma4.h"
#include "model/gguf_config.h"
#include "model/llama_style.h"

namespace rowlm {

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

std::string supported_gguf_architectures() { return "gemma3, gemma4, llama, qwen2, qwen3, qwen3moe"; }

config::json gguf_hf_config(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture");
  if (arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe")
    return gguf_config::llama_lineage_config(f, arch);
  if (arch == "gemma3") return gguf_config::gemma3_config(f);
  if (arch == "gemma4") return gguf_config::gemma4_config(f);
  f.fail("GGUF architecture '" + arch + "' is not supported (supported: " + supported_gguf_architectures() + ")");
}

std::vector<TensorFormat> gguf_tensor_formats(const std::string& path) {
  const gguf::File file = gguf::File::open(path);
  std::vector<TensorFormat> out;
  for (const gguf::TensorInfo& t : file.tensors()) {
    std::string format = gguf::ggml_type_name(t.type_code);
    if (const auto layout = gguf::affine_layout(t.type))
      format += " -> q" + std::to_string(layout->bits) + "/" + std::to_string(layout->group_size);
    out.push_back({t.name, format, t.shape(), t.bytes.size()});
  }
  std::sort(out.begin(), out.end(), [](const TensorFormat& a, const TensorFormat& b) { return a.name < b.name; });
  return out;
}

std::unique_ptr<Model> load_gguf_model(const std::string& path, Backend& backend, const ModelOptions& options) {
  const gguf::File file = gguf::File::open(path);
  const config::json hf = gguf_hf_config(file);
  const std::string source = path + " (metadata as config.json)";
  if (hf["model_type"] == "gemma4_text") {
    const gemma4::Config config = gemma4::parse_config(hf.dump(), source);
    return gemma4::make_model(config, gemma4::load_gguf_weights(file, config), backend, path, options);
  }
  if (hf["model_type"] == "gemma3_text") {
    gemma3::Config config = gemma3::parse_config(hf.dump(), source);
    config.from_gguf = true;  // 1 + w norms (Gemma3Model.norm_shift), llama.cpp's f32 embedding scale
    return gemma3::make_model(config, gemma3::load_gguf_weights(file, config), backend, path, options);
  }
  const llama_style::Config config = llama_style::parse_config(hf.dump(), source);
  return llama_style::make_model(config, llama_style::load_gguf_weights(file, config), backend, path, options);
}

}  // namespace rowlm
