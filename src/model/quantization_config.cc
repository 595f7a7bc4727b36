#include "model/quantization_config.h"

#include "core/error.h"
#include "model/config_fields.h"

namespace rowlm::decoder {
namespace {

using config::json;

quant::AffineSpec read_spec(const config::Fields& f, const quant::AffineSpec& fallback) {
  quant::AffineSpec spec;
  spec.bits = f.integer("bits", fallback.bits);
  spec.group_size = f.integer("group_size", fallback.group_size);
  const std::string mode = f.string("mode", "affine");
  if (mode != "affine")
    f.fail("mode", "is '" + mode + "'; rowlm reads MLX's affine quantization only");
  if (spec.bits < 2 || spec.bits > 8 || spec.bits == 7)
    f.fail("bits", "is " + std::to_string(spec.bits) + "; rowlm reads 2, 3, 4, 5, 6 or 8");
  if (spec.group_size != 16 && spec.group_size != 32 && spec.group_size != 64 && spec.group_size != 128)
    f.fail("group_size", "is " + std::to_string(spec.group_size) + "; rowlm reads 16, 32, 64 or 128");
  quant::check_spec(spec);  // the codec's own rule, which the checks above spell out per field
  return spec;
}

}  // namespace

QuantizationConfig QuantizationConfig::parse(const json& top, const std::string& source) {
  QuantizationConfig q;
  q.source_ = source;
  const char* key = top.contains("quantization") ? "quantization"
                    : top.contains("quantization_config") ? "quantization_config"
                                                          : nullptr;
  if (key == nullptr || top[key].is_null()) return q;
  const json& entry = top[key];
  if (!entry.is_object()) throw Error(source + ": field '" + key + "' must be an object (got " + entry.dump() + ")");
  const config::Fields f(entry, std::string(key) + ".", source);
  // mlx-lm writes both; without them MLX's defaults (64, 4) apply.
  q.defaults_ = read_spec(f, quant::AffineSpec{4, 64});
  for (const auto& [name, value] : entry.items()) {
    if (name == "bits" || name == "group_size" || name == "mode" || name == "quant_method") continue;
    if (value.is_boolean()) {
      if (value.get<bool>()) q.modules_[name] = q.defaults_;
      else q.modules_[name] = std::nullopt;
    } else if (value.is_object()) {
      q.modules_[name] = read_spec(config::Fields(value, std::string(key) + "." + name + ".", source), *q.defaults_);
    } else {
      f.fail(name, "must be an object with bits and group_size, or a boolean (got " + value.dump() + ")");
    }
  }
  return q;
}

std::optional<quant::AffineSpec> QuantizationConfig::spec_for(const std::string& module) const {
  const auto it = modules_.find(module);
  if (it != modules_.end()) return it->second;
  return defaults_;
}

bool QuantizationConfig::excluded(const std::string& module) const {
  const auto it = modules_.find(module);
  return it != modules_.end() && !it->second;
}

}  // namespace rowlm::decoder
