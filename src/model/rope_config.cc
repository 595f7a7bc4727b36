#include "model/rope_config.h"

#include <cmath>
#include <numbers>
#include <sstream>

namespace rowlm::rope {

RopeSpec parse_entry(const config::Fields& f, double fallback_theta, int max_position, const std::string& family) {
  RopeSpec s;
  const std::string type = f.has("rope_type") ? f.string("rope_type", "") : f.string("type", "default");
  s.theta = f.number("rope_theta", fallback_theta);
  if (!(s.theta > 1.0) || !std::isfinite(s.theta)) f.fail("rope_theta", "must be greater than 1");
  auto positive = [&](const char* key) {
    if (!f.has_value(key)) f.fail(key, "is required for rope_type '" + type + "'");
    const double x = f.number(key, 0.0);
    if (!(x > 0.0) || !std::isfinite(x)) f.fail(key, "must be positive");
    return x;
  };
  if (type == "default") {
    s.type = RopeType::Default;
  } else if (type == "linear") {
    s.type = RopeType::Linear;
    s.factor = positive("factor");
  } else if (type == "dynamic") {
    s.type = RopeType::Dynamic;
    s.factor = positive("factor");
  } else if (type == "llama3") {
    s.type = RopeType::Llama3;
    s.factor = positive("factor");
    s.low_freq_factor = positive("low_freq_factor");
    s.high_freq_factor = positive("high_freq_factor");
    // The smoothing divides by their difference.
    if (!(s.high_freq_factor > s.low_freq_factor))
      f.fail("high_freq_factor", "must be greater than low_freq_factor");
    s.original_max_position = f.integer("original_max_position_embeddings", max_position);
  } else {
    f.fail(f.has("rope_type") ? "rope_type" : "type",
           "'" + type + "' is not supported for " + family + " (supported: default, linear, dynamic, llama3)");
  }
  return s;
}

decoder::RopeFrequencies frequencies(const RopeSpec& s, int head_dim) {
  switch (s.type) {
    case RopeType::Default:
    case RopeType::Dynamic:
      return decoder::default_rope(head_dim, s.theta);
    case RopeType::Linear:
      return decoder::default_rope(head_dim, s.theta, s.factor);
    case RopeType::Llama3:
      break;
  }
  // _compute_llama3_parameters, in f32 as torch evaluates it: tensor ops
  // with Python scalars cast the scalar to f32, and `scalar / tensor` is
  // tensor.reciprocal() * scalar.
  decoder::RopeFrequencies r = decoder::default_rope(head_dim, s.theta);
  const float factor = float(s.factor), low = float(s.low_freq_factor);
  const float old_context = float(s.original_max_position);
  const float low_freq_wavelen = float(double(s.original_max_position) / s.low_freq_factor);
  const float high_freq_wavelen = float(double(s.original_max_position) / s.high_freq_factor);
  const float band = float(s.high_freq_factor - s.low_freq_factor);
  const float two_pi = float(2.0 * std::numbers::pi);
  for (float& inv : r.inv_freq) {
    const float wavelen = (1.0f / inv) * two_pi;
    const float scaled = wavelen > low_freq_wavelen ? inv / factor : inv;
    const float smooth = ((1.0f / wavelen) * old_context - low) / band;
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    inv = medium ? smoothed : scaled;
  }
  return r;
}

std::string describe(const RopeSpec& s) {
  std::ostringstream o;
  switch (s.type) {
    case RopeType::Default: o << "default"; break;
    case RopeType::Linear: o << "linear"; break;
    case RopeType::Dynamic: o << "dynamic"; break;
    case RopeType::Llama3: o << "llama3"; break;
  }
  o << " theta " << s.theta;
  if (s.type != RopeType::Default) o << " x" << s.factor;
  if (s.type == RopeType::Llama3)
    o << " (" << s.low_freq_factor << ", " << s.high_freq_factor << ", " << s.original_max_position << ")";
  return o.str();
}

}  // namespace rowlm::rope
