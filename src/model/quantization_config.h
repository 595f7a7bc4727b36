#pragma once
// What config.json says about an mlx-community (MLX affine) checkpoint:
// its `quantization` (or `quantization_config`) object, as mlx-lm writes it:
//
//   "quantization": {"group_size": 64, "bits": 4, "mode": "affine",
//                    "<module path>": {"group_size": 32, "bits": 8},
//                    "<module path>": false, ...}
//
// The defaults apply to every quantized module, a module path (a tensor
// name without ".weight") overrides them or says the module is not
// quantized. Whether a module IS quantized is decided by its `.scales`
// tensor (weight_binder.h); this says what its bits and group must then be,
// so a checkpoint whose tensors disagree with its config is an error rather
// than a silent reinterpretation.

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "quant/affine.h"

namespace rowlm::decoder {

class QuantizationConfig {
 public:
  // No quantization entry: nothing to check against.
  QuantizationConfig() = default;
  // From config.json's top-level object (`source` names the file): an
  // entry that is not an object, a mode other than "affine", or bits /
  // group sizes rowlm does not run are Errors naming the field. Each
  // family's parse_config calls this.
  static QuantizationConfig parse(const nlohmann::json& top, const std::string& source);

  bool present() const { return defaults_.has_value(); }
  // The spec config.json gives `module` (a tensor name without ".weight"):
  // its own entry, else the defaults. nullopt when the config has no
  // quantization entry or says `false` for the module.
  std::optional<quant::AffineSpec> spec_for(const std::string& module) const;
  // Whether config.json names `module` with `false`.
  bool excluded(const std::string& module) const;
  const std::string& source() const { return source_; }

 private:
  std::optional<quant::AffineSpec> defaults_;
  std::map<std::string, std::optional<quant::AffineSpec>> modules_;  // nullopt: false
  std::string source_;
};

}  // namespace rowlm::decoder
