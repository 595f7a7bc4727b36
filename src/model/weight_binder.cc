#include "model/weight_binder.h"

#include <algorithm>
#include <charconv>
#include <span>
#include <vector>

#include "core/error.h"
#include "model/xorshift64.h"

namespace rowlm::decoder {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// The synthetic stream's draw: the sum of four uniforms, rescaled (cheap,
// bounded, close enough to normal), kNormalSteps steps of the state.
constexpr int64_t kNormalSteps = 4;
float normal_from(uint64_t& state) {
  float sum = 0;
  for (int k = 0; k < kNormalSteps; ++k) {
    state = xorshift64_step(state);
    sum += float(state >> 40) * (1.0f / 16777216.0f);
  }
  return (sum - 2.0f) * 1.7320508f;
}

// Elements [first, first + out.size()) of a float tensor as f32.
void widen(const Tensor& t, int64_t first, std::span<float> out) {
  const int64_t n = int64_t(out.size());
  switch (t.dtype()) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = t.data<float>()[first + i];
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = bf16_to_f32(t.data<uint16_t>()[first + i]);
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = f16_to_f32(t.data<uint16_t>()[first + i]);
      break;
    default:
      ROWLM_CHECK(false, "to_f32 of a non-float tensor");
  }
}

Tensor to_f32(const Tensor& t) {
  Tensor out(DType::F32, t.shape());
  widen(t, 0, {out.data<float>(), std::size_t(t.numel())});
  return out;
}

}  // namespace

CheckpointSource::CheckpointSource(const Checkpoint& checkpoint, std::string prefix, DecoderWeights& weights,
                                   QuantizationConfig quantization)
    : ck_(checkpoint), prefix_(std::move(prefix)), w_(weights), quant_(std::move(quantization)) {}

void CheckpointSource::fail(const std::string& name, const std::string& what) const {
  throw Error(ck_.file_of(name) + ": tensor '" + name + "' " + what);
}

const SafetensorsEntry& CheckpointSource::check(const std::string& name) const {
  // MLX stores a quantized `<p>.weight` with `<p>.scales` and `<p>.biases` beside it.
  const std::string stem = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
  if (ck_.contains(stem + ".scales"))
    fail(name, "is MLX-quantized ('" + stem + ".scales' is present) where rowlm reads a plain f32, bf16 or f16 tensor");
  const SafetensorsEntry* e = ck_.find(name);
  if (!e) throw Error(ck_.listing() + ": missing tensor '" + name + "'");
  if (!is_float(e->dtype)) fail(name, "has dtype " + std::string(dtype_name(e->dtype)) + "; expected f32, bf16 or f16");
  return *e;
}

void CheckpointSource::count(const std::string& name, const SafetensorsEntry& e, int64_t parameters) {
  if (bound_.insert(name).second) {
    w_.weight_bytes += e.end - e.begin;
    w_.parameter_count += parameters;
  }
}

Tensor CheckpointSource::bind(const std::string& name, const Shape& shape) {
  const SafetensorsEntry& e = check(name);
  if (e.shape != shape) fail(name, "has shape " + shape_str(e.shape) + "; config.json implies " + shape_str(shape));
  count(name, e, shape_numel(e.shape));
  return ck_.tensor(name);
}

Weight CheckpointSource::bind_matrix(const std::string& name, const Shape& shape) {
  ROWLM_CHECK(shape.size() == 2 || shape.size() == 3, "a matrix is [rows, cols] or [E, rows, cols]");
  const std::string stem = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
  const int64_t cols = shape.back(), rows = shape_numel(shape) / std::max<int64_t>(cols, 1);
  if (ck_.contains(stem + ".scales")) return bind_affine(name, stem, shape);
  if (quant_.present() && quant_.spec_for(stem) && ck_.contains(name) && ck_.find(name)->dtype == DType::U32)
    fail(name, "holds u32 codes but '" + stem + ".scales' is missing (config.json's quantization covers it)");
  return Weight::dense(bind(name, shape).reshaped({rows, cols}));
}

Weight CheckpointSource::bind_affine(const std::string& name, const std::string& stem, const Shape& shape) {
  const int64_t cols = shape.back(), rows = shape_numel(shape) / std::max<int64_t>(cols, 1);
  const Shape lead(shape.begin(), shape.end() - 1);
  const SafetensorsEntry* codes = ck_.find(name);
  if (!codes) throw Error(ck_.listing() + ": missing tensor '" + name + "' ('" + stem + ".scales' is present)");
  const std::string scales_name = stem + ".scales", biases_name = stem + ".biases";
  const SafetensorsEntry* scales = ck_.find(scales_name);
  const SafetensorsEntry* biases = ck_.find(biases_name);
  if (!biases)
    fail(scales_name, "has no '" + biases_name + "' beside it; rowlm reads MLX's affine quantization (scales and biases)");
  if (codes->dtype != DType::U32)
    fail(name, "is MLX-quantized ('" + scales_name + "' is present) but has dtype " +
                   std::string(dtype_name(codes->dtype)) + "; expected u32 codes");
  auto leading_ok = [&](const SafetensorsEntry& e) {
    return e.shape.size() == shape.size() && Shape(e.shape.begin(), e.shape.end() - 1) == lead && e.shape.back() > 0;
  };
  const std::string implied = "config.json implies " + shape_str(shape) + " values";
  if (!leading_ok(*codes)) fail(name, "has shape " + shape_str(codes->shape) + "; " + implied);
  for (const auto* e : {scales, biases}) {
    const std::string& n = e == scales ? scales_name : biases_name;
    if (!is_float(e->dtype)) fail(n, "has dtype " + std::string(dtype_name(e->dtype)) + "; expected f32, bf16 or f16");
    if (!leading_ok(*e)) fail(n, "has shape " + shape_str(e->shape) + "; " + implied);
  }
  if (biases->dtype != scales->dtype || biases->shape != scales->shape)
    fail(biases_name, "is " + std::string(dtype_name(biases->dtype)) + " " + shape_str(biases->shape) + " but '" +
                          scales_name + "' is " + std::string(dtype_name(scales->dtype)) + " " + shape_str(scales->shape));
  const int64_t words = codes->shape.back(), groups = scales->shape.back();
  const int bits = words * 32 % cols == 0 ? int(words * 32 / cols) : 0;
  const int group = cols % groups == 0 ? int(cols / groups) : 0;
  if (bits < 2 || bits > 8 || bits == 7)
    fail(name, "has " + std::to_string(words) + " words of codes a row for " + std::to_string(cols) +
                   " columns: not 2, 3, 4, 5, 6 or 8 bits a value");
  if (group != 16 && group != 32 && group != 64 && group != 128)
    fail(scales_name, "has " + std::to_string(groups) + " groups a row for " + std::to_string(cols) +
                          " columns: not a group size of 16, 32, 64 or 128");
  if (quant_.present()) {
    if (quant_.excluded(stem))
      fail(name, "is quantized, but " + quant_.source() + " says '" + stem + "': false (not quantized)");
    if (const auto want = quant_.spec_for(stem); want && (want->bits != bits || want->group_size != group))
      fail(name, "holds " + std::to_string(bits) + "-bit codes in groups of " + std::to_string(group) + ", but " +
                     quant_.source() + "'s quantization gives '" + stem + "' " + std::to_string(want->bits) +
                     " bits in groups of " + std::to_string(want->group_size));
  }
  count(name, *codes, rows * cols);
  count(scales_name, *scales, 0);
  count(biases_name, *biases, 0);
  Weight w;
  w.format = WeightFormat::Affine;
  w.rows = rows;
  w.cols = cols;
  w.bits = bits;
  w.group_size = group;
  w.values = ck_.tensor(name).reshaped({rows, words});
  w.scales = ck_.tensor(scales_name).reshaped({rows, groups});
  w.biases = ck_.tensor(biases_name).reshaped({rows, groups});
  return w;
}

Weight CheckpointSource::first_matrix_of(const std::vector<std::string>& candidates, const Shape& shape) {
  for (const std::string& name : candidates)
    if (ck_.contains(name)) return bind_matrix(name, shape);
  return Weight::dense(first_of(candidates, shape));  // the error naming every candidate
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

SyntheticSource::SyntheticSource(uint64_t seed, float stddev, DecoderWeights& weights,
                                 std::optional<quant::AffineSpec> quantize)
    : state_(seed * 0x9E3779B97F4A7C15ull + 1), std_(stddev), w_(weights), quantize_(quantize) {}

Weight SyntheticSource::matrix(const std::string& rel, const Shape& shape) {
  const int64_t cols = shape.back(), rows = shape_numel(shape) / std::max<int64_t>(cols, 1);
  if (!quantize_) return Weight::dense(tensor(rel, shape).reshaped({rows, cols}));
  Tensor values(DType::BF16, {rows, cols});
  fill_bf16(values.data<uint16_t>(), values.numel());
  Weight w = quantize_matrix(values, *quantize_);
  w_.weight_bytes += w.values.nbytes() + w.scales.nbytes() + w.biases.nbytes();
  w_.parameter_count += rows * cols;
  return w;
}

Weight quantize_matrix(const Tensor& t, const quant::AffineSpec& spec, DType params) {
  quant::check_spec(spec);
  ROWLM_CHECK(t.rank() == 2 && (t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16),
              "quantize_matrix of a non-float or non-matrix tensor");
  const int64_t rows = t.dim(0), cols = t.dim(1);
  if (cols % spec.group_size != 0 || cols * spec.bits % 32 != 0)
    throw Error("cannot quantize a " + shape_str(t.shape()) + " matrix to " + std::to_string(spec.bits) +
                " bits in groups of " + std::to_string(spec.group_size) + ": " + std::to_string(cols) +
                " columns are not whole groups and words");
  Weight w;
  w.format = WeightFormat::Affine;
  w.rows = rows;
  w.cols = cols;
  w.bits = spec.bits;
  w.group_size = spec.group_size;
  const int64_t words = quant::packed_words(cols, spec.bits), groups = cols / spec.group_size;
  w.values = Tensor(DType::U32, {rows, words});
  w.scales = Tensor(params, {rows, groups});
  w.biases = Tensor(params, {rows, groups});
  const std::size_t param_bytes = dtype_size(params) * std::size_t(groups);
  // Rows are independent: a large matrix is quantized by rows in parallel,
  // each row widened to f32 on its own (the same values in any order).
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      widen(t, r * cols, row);
      quant::quantize(row, spec, params, {w.values.data<uint32_t>() + r * words, std::size_t(words)},
                      static_cast<std::byte*>(w.scales.raw()) + std::size_t(r) * param_bytes,
                      static_cast<std::byte*>(w.biases.raw()) + std::size_t(r) * param_bytes);
    }
  };
  if (rows * cols < (int64_t(1) << 22)) {
    quantize_rows(0, rows);
  } else {
    ThreadPool pool;
    pool.parallel_for(rows, 16, quantize_rows);
  }
  return w;
}

Tensor SyntheticSource::tensor(const std::string&, const Shape& shape) {
  Tensor t(DType::BF16, shape);
  fill_bf16(t.data<uint16_t>(), t.numel());
  w_.weight_bytes += t.nbytes();
  w_.parameter_count += t.numel();
  return t;
}

Tensor SyntheticSource::vector(const std::string&, int64_t size) {
  Tensor t(DType::F32, {size});
  for (int64_t i = 0; i < size; ++i) t.data<float>()[i] = 1.0f + 0.1f * normal_from(state_);
  w_.parameter_count += size;
  return t;
}

void SyntheticSource::fill_bf16(uint16_t* d, int64_t n) {
  constexpr int64_t kChunk = int64_t(1) << 20;  // elements a thread draws after one jump
  if (n <= kChunk) {
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(std_ * normal_from(state_));
    return;
  }
  const uint64_t start = state_;
  pool().run((n + kChunk - 1) / kChunk, [&](int64_t c) {
    uint64_t s = xorshift64_jump(start, uint64_t(kNormalSteps * c * kChunk));
    for (int64_t i = c * kChunk, e = std::min(n, i + kChunk); i < e; ++i) d[i] = f32_to_bf16(std_ * normal_from(s));
  });
  state_ = xorshift64_jump(start, uint64_t(kNormalSteps * n));
}

ThreadPool& SyntheticSource::pool() {
  if (!pool_) pool_ = std::make_unique<ThreadPool>();
  return *pool_;
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
