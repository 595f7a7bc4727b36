#include "model/families.h"

#include <array>

#include "core/error.h"
#include "model/config_fields.h"
#include "model/gemma4.h"
#include "model/gemma3.h"
#include "model/gguf_model.h"
#include "model/llama_style.h"

namespace rowlm {
namespace {

constexpr std::array<std::string_view, 3> kGemma4Types = {"gemma4", "gemma4_text", "gemma4_unified"};
constexpr std::array<std::string_view, 2> kGemma3Types = {"gemma3", "gemma3_text"};
constexpr std::array<std::string_view, 1> kLlamaTypes = {"llama"};
constexpr std::array<std::string_view, 1> kMistralTypes = {"mistral"};
constexpr std::array<std::string_view, 1> kQwen2Types = {"qwen2"};
constexpr std::array<std::string_view, 1> kQwen3Types = {"qwen3"};
constexpr std::array<std::string_view, 1> kQwen3MoeTypes = {"qwen3_moe"};

// The Llama-style families share one loader (llama_style.h), which reads
// model_type again to pick the family's defaults and features.
const std::array<ModelFamily, 7> kFamilies = {{
    {"Gemma 4", kGemma4Types, &gemma4::load},
    {"Gemma 3", kGemma3Types, &gemma3::load},
    {"Llama", kLlamaTypes, &llama_style::load},
    {"Mistral", kMistralTypes, &llama_style::load},
    {"Qwen 2", kQwen2Types, &llama_style::load},
    {"Qwen 3", kQwen3Types, &llama_style::load},
    {"Qwen 3 MoE", kQwen3MoeTypes, &llama_style::load},
}};

}  // namespace

std::span<const ModelFamily> model_families() { return kFamilies; }

const ModelFamily* find_model_family(std::string_view model_type) {
  for (const ModelFamily& f : kFamilies)
    for (std::string_view t : f.model_types)
      if (t == model_type) return &f;
  return nullptr;
}

std::string supported_model_types() {
  std::string out;
  for (const ModelFamily& f : kFamilies)
    for (std::string_view t : f.model_types) out += (out.empty() ? "" : ", ") + std::string(t);
  return out;
}

std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const ModelOptions& options) {
  if (is_gguf_file(dir)) return load_gguf_model(dir, backend, options);
  const config::json j = config::read_config(dir);
  const std::string source = dir + "/config.json";
  std::string model_type;
  if (j.is_object() && j.contains("model_type") && j["model_type"].is_string()) model_type = j["model_type"];
  const ModelFamily* family = find_model_family(model_type);
  if (model_type == "gemma4_assistant")
    throw Error(source + ": a Gemma 4 assistant drafts for a Gemma 4 model, reading its KV; it does not run alone "
                         "(pass it as --draft DIR with its model)");
  if (!family)
    throw Error(source + ": model_type '" + model_type + "' is not supported (supported: " + supported_model_types() +
                ")");
  return family->load(dir, backend, options);
}

}  // namespace rowlm
