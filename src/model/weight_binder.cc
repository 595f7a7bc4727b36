#include "model/weight_binder.h"

#include <charconv>

#include "core/error.h"

namespace rowlm::decoder {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

Tensor to_f32(const Tensor& t) {
  Tensor out(DType::F32, t.shape());
  float* dst = out.data<float>();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) dst[i] = t.data<float>()[i];
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(t.data<uint16_t>()[i]);
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(t.data<uint16_t>()[i]);
      break;
    default:
      ROWLM_CHECK(false, "to_f32 of a non-float tensor");
  }
  return out;
}

}  // namespace

CheckpointSource::CheckpointSource(const Checkpoint& checkpoint, std::string prefix, DecoderWeights& weights)
    : ck_(checkpoint), prefix_(std::move(prefix)), w_(weights) {}

void CheckpointSource::fail(const std::string& name, const std::string& what) const {
  throw Error(ck_.file_of(name) + ": tensor '" + name + "' " + what);
}

const SafetensorsEntry& CheckpointSource::check(const std::string& name) const {
  // MLX stores a quantized `<p>.weight` with `<p>.scales` and `<p>.biases` beside it.
  const std::string stem = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
  if (ck_.contains(stem + ".scales"))
    fail(name, "is MLX-quantized ('" + stem + ".scales' is present); quantized checkpoints are not supported yet");
  const SafetensorsEntry* e = ck_.find(name);
  if (!e) throw Error(ck_.listing() + ": missing tensor '" + name + "'");
  if (!is_float(e->dtype)) fail(name, "has dtype " + std::string(dtype_name(e->dtype)) + "; expected f32, bf16 or f16");
  return *e;
}

Tensor CheckpointSource::bind(const std::string& name, const Shape& shape) {
  const SafetensorsEntry& e = check(name);
  if (e.shape != shape) fail(name, "has shape " + shape_str(e.shape) + "; config.json implies " + shape_str(shape));
  if (bound_.insert(name).second) {
    w_.weight_bytes += e.end - e.begin;
    w_.parameter_count += shape_numel(e.shape);
  }
  return ck_.tensor(name);
}

Tensor CheckpointSource::vector(const std::string& rel, int64_t size) { return to_f32(bind(prefix_ + rel, {size})); }

float CheckpointSource::scalar(const std::string& rel) {
  const std::string name = prefix_ + rel;
  const SafetensorsEntry& e = check(name);
  if (shape_numel(e.shape) != 1 || e.shape.size() > 1) fail(name, "has shape " + shape_str(e.shape) + "; expected [1]");
  return to_f32(bind(name, e.shape)).data<float>()[0];
}

Tensor CheckpointSource::first_of(const std::vector<std::string>& candidates, const Shape& shape) {
  for (const std::string& name : candidates)
    if (ck_.contains(name)) return bind(name, shape);
  std::string tried;
  for (const std::string& name : candidates) tried += (tried.empty() ? "'" : ", '") + name + "'";
  throw Error(ck_.listing() + ": missing tensor " + tried + " (none of these names exists)");
}

SyntheticSource::SyntheticSource(uint64_t seed, float stddev, DecoderWeights& weights)
    : state_(seed * 0x9E3779B97F4A7C15ull + 1), std_(stddev), w_(weights) {}

Tensor SyntheticSource::tensor(const std::string&, const Shape& shape) {
  Tensor t(DType::BF16, shape);
  uint16_t* d = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = f32_to_bf16(std_ * normal());
  w_.weight_bytes += t.nbytes();
  w_.parameter_count += t.numel();
  return t;
}

Tensor SyntheticSource::vector(const std::string&, int64_t size) {
  Tensor t(DType::F32, {size});
  for (int64_t i = 0; i < size; ++i) t.data<float>()[i] = 1.0f + 0.1f * normal();
  w_.parameter_count += size;
  return t;
}

// Sum of four uniforms, rescaled: cheap, bounded, close enough to normal.
float SyntheticSource::normal() {
  float sum = 0;
  for (int k = 0; k < 4; ++k) {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    sum += float(state_ >> 40) * (1.0f / 16777216.0f);
  }
  return (sum - 2.0f) * 1.7320508f;
}

namespace {

// Expert e's down projection: row block e of the [E·H, I] stack.
void split_down(const Weight& down, int64_t E, ExpertBank& bank) {
  const int64_t H = down.rows / E;
  bank.down.resize(std::size_t(E));
  for (int64_t e = 0; e < E; ++e) bank.down[std::size_t(e)] = down.row_range(e * H, (e + 1) * H);
}

}  // namespace

ExpertBank experts_from_stacks(const Weight& gate, const Weight& up, const Weight& down, int64_t E) {
  ROWLM_CHECK(E > 0 && gate.rows % E == 0 && up.rows == gate.rows && down.rows % E == 0,
              "expert stacks do not hold E equal blocks");
  const int64_t I = gate.rows / E;
  ExpertBank bank;
  for (int64_t e = 0; e < E; ++e) {
    bank.gate.push_back(gate.row_range(e * I, (e + 1) * I));
    bank.up.push_back(up.row_range(e * I, (e + 1) * I));
  }
  split_down(down, E, bank);
  return bank;
}

ExpertBank experts_from_gate_up_stack(const Weight& gate_up, const Weight& down, int64_t E) {
  ROWLM_CHECK(E > 0 && gate_up.rows % (2 * E) == 0 && down.rows % E == 0, "expert stacks do not hold E equal blocks");
  const int64_t I = gate_up.rows / (2 * E);
  ExpertBank bank;
  for (int64_t e = 0; e < E; ++e) {
    bank.gate.push_back(gate_up.row_range(2 * e * I, 2 * e * I + I));
    bank.up.push_back(gate_up.row_range(2 * e * I + I, 2 * (e + 1) * I));
  }
  split_down(down, E, bank);
  return bank;
}

void check_layer_count(const Checkpoint& ck, const std::string& prefix, int num_layers) {
  const std::string layers = prefix + "layers.";
  for (const std::string& name : ck.names()) {
    if (!name.starts_with(layers)) continue;
    const char* begin = name.data() + layers.size();
    const char* end = name.data() + name.size();
    int index = -1;
    const auto [stop, ec] = std::from_chars(begin, end, index);
    if (ec == std::errc() && stop != end && *stop == '.' && index >= num_layers)
      throw Error(ck.file_of(name) + ": tensor '" + name + "' belongs to layer " + std::to_string(index) +
                  ", but config.json has num_hidden_layers " + std::to_string(num_layers));
  }
}

}  // namespace rowlm::decoder
