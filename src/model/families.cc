#include "model/families.h"

#include <array>

#include "core/error.h"
#include "model/config_fields.h"
#include "model/gemma4.h"
#include "model/gguf_model.h"
#include "model/qwen3.h"

namespace rowlm {
namespace {

constexpr std::array<std::string_view, 3> kGemma4Types = {"gemma4", "gemma4_text", "gemma4_unified"};
constexpr std::array<std::string_view, 1> kQwen3Types = {"qwen3"};

const std::array<ModelFamily, 2> kFamilies = {{
    {"Gemma 4", kGemma4Types, &gemma4::load},
    {"Qwen 3", kQwen3Types, &qwen3::load},
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

std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend) {
  if (is_gguf_file(dir)) return load_gguf_model(dir, backend);
  const config::json j = config::read_config(dir);
  const std::string source = dir + "/config.json";
  std::string model_type;
  if (j.is_object() && j.contains("model_type") && j["model_type"].is_string()) model_type = j["model_type"];
  const ModelFamily* family = find_model_family(model_type);
  if (!family)
    throw Error(source + ": model_type '" + model_type + "' is not supported (supported: " + supported_model_types() +
                ")");
  return family->load(dir, backend);
}

}  // namespace rowlm
