#pragma once
// The model families rowlm runs, by config.json model_type: the one place
// that maps a checkpoint to its family's loader (load_model uses it).

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "model/model.h"

namespace rowlm {

struct ModelFamily {
  std::string_view name;                          // e.g. "Gemma 4"
  std::span<const std::string_view> model_types;  // config.json model_type values it reads
  std::unique_ptr<Model> (*load)(const std::string& dir, Backend& backend, const ModelOptions& options);
};

std::span<const ModelFamily> model_families();
// The family reading `model_type`, or null.
const ModelFamily* find_model_family(std::string_view model_type);
// "gemma4, gemma4_text, ..., qwen3": for error messages and --help.
std::string supported_model_types();

}  // namespace rowlm
