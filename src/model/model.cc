#include "model/model.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/gemma4.h"

namespace rowlm {

std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw Error("model directory " + dir + " does not exist");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::ifstream in(config_path);
  if (!in) throw Error(config_path + ": cannot open (is " + dir + " a Hugging Face model directory?)");
  std::string model_type;
  try {
    const auto j = nlohmann::json::parse(in);
    if (j.contains("model_type") && j["model_type"].is_string()) model_type = j["model_type"];
  } catch (const nlohmann::json::exception& e) {
    throw Error(config_path + ": invalid JSON: " + e.what());
  }
  if (model_type == "gemma4" || model_type == "gemma4_text" || model_type == "gemma4_unified") {
    gemma4::Config config = gemma4::load_config(dir);
    gemma4::Weights weights = gemma4::load_weights(dir, config);
    return gemma4::make_model(std::move(config), std::move(weights), backend, dir);
  }
  throw Error(config_path + ": model_type '" + model_type +
              "' is not supported (supported: gemma4, gemma4_text, gemma4_unified)");
}

}  // namespace rowlm
