#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/argmax_code.h"
#include "backend/cpu/affine_order.h"
#include "backend/cpu/amx_bf16.h"
#include "backend/cpu/amx_bf16_rows.h"
#include "backend/cpu/int8_matmul.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/ceilings.h"
#include "backend/cpu/cpu_kv_arena.h"
#include "backend/cpu/huge_pages.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/row_argmax.h"
#include "backend/kv_checks.h"
#include "backend/moe_routing.h"
#include "backend/op_profiler.h"
#include "backend/rope_angles.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace rowlm {
namespace {

// Elementwise work below this many floats stays on the calling thread.
constexpr int64_t kElementGrain = 16 * 1024;
// Where a weight must start for the kernels to read whole cache lines.
constexpr std::uintptr_t kWeightAlignment = 64;

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) +
         (t.on_host() ? std::string() : " on " + t.device().name());
}

// Checks an argument. A macro so that the message, which formats shapes,
// is built only when the check fails: these checks run for every operation
// of every step, some per token or per element.
#define ROWLM_REQUIRE(ok, message) \
  do {                             \
    if (!(ok)) throw Error(message); \
  } while (false)

bool is_float_storage(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* a0 = static_cast<const std::byte*>(a.raw());
  const auto* b0 = static_cast<const std::byte*>(b.raw());
  if (a0 == nullptr || b0 == nullptr || a.nbytes() == 0 || b.nbytes() == 0) return false;
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// A tensor's values as f32: the tensor itself when it already is, else a
// widened copy kept in `storage`.
const float* as_f32(const cpu::Kernels& k, const Tensor& t, std::vector<float>& storage) {
  if (t.dtype() == DType::F32) return t.data<float>();
  storage.resize(std::size_t(t.numel()));
  k.convert_scale(t.dtype(), t.raw(), t.numel(), 1.0f, storage.data());
  return storage.data();
}

// An index tensor's entries, each checked to lie in [0, bound).
const int32_t* indices(const Tensor& t, int64_t count, int64_t bound, const char* op, const char* what,
                       const char* of) {
  ROWLM_REQUIRE(t.on_host() && t.dtype() == DType::I32 && t.numel() == count,
                std::string(op) + ": " + what + " must be i32 [" + std::to_string(count) + "] on the host, got " +
                    describe(t));
  const int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < count; ++i)
    ROWLM_REQUIRE(p[i] >= 0 && p[i] < bound, std::string(op) + ": " + (std::string(what) == "ids" ? "token id " : "row ") +
                                                 std::to_string(p[i]) + " at index " + std::to_string(i) +
                                                 " is outside " + of + "'s " + std::to_string(bound) + " rows");
  return p;
}

// The CPU computes cos and sin per token as it goes: a table would only
// cost memory here.
struct CpuRopeTable final : RopeTable {
  explicit CpuRopeTable(std::vector<float> f) : inv_freq(std::move(f)) {}
  int head_dim() const override { return int(2 * inv_freq.size()); }
  void reserve(int64_t) override {}
  std::vector<float> inv_freq;
};

// The CPU arena behind a KvArena handed to this backend.
cpu::CpuKvArena& own(KvArena& arena, const char* op) {
  auto* a = dynamic_cast<cpu::CpuKvArena*>(&arena);
  ROWLM_REQUIRE(a != nullptr, std::string(op) + ": the KV arena belongs to another backend");
  return *a;
}
const cpu::CpuKvArena& own(const KvArena& arena, const char* op) {
  return own(const_cast<KvArena&>(arena), op);  // the const overload only reads
}

class CpuBackend final : public Backend {
 public:
  // amx_vector_rows: rows of x up to which the AMX path computes AMX's
  // order on the vector units (cpu::MatmulTuning), when amx is on.
  CpuBackend(int threads, cpu::Isa isa, MatmulPrecision precision, bool amx, int64_t amx_vector_rows = 0,
             HostRowSampler sample_row = nullptr)
      : sample_row_(sample_row),
        kernels_(cpu::kernels_for(isa)),
        pool_(threads),
        precision_(precision == MatmulPrecision::Auto ? MatmulPrecision::F32 : precision),
        amx_(amx && precision_ == MatmulPrecision::Bf16),
        amx_tuning_{.amx_vector_rows = amx_vector_rows},
        // Huge pages: a fresh chunk is first written by every thread of a
        // forward at once, and 4 KiB faults made the first prefills of a
        // process run at half speed on 16 cores (docs/perf.md).
        workspace_(Device::host(), [](std::size_t bytes) {
          std::shared_ptr<std::byte> p = cpu::allocate_huge_pages(bytes, "workspace");
          return Workspace::Chunk{p.get(), std::move(p)};
        }, 64) {}

  std::string name() const override {
    std::string name = "cpu (" + std::string(cpu::isa_name(kernels_.isa)) + ", " +
                       std::to_string(pool_.size()) + " threads";
    if (precision_ == MatmulPrecision::Bf16)
      name += amx_ ? (amx_tuning_.amx_vector_rows > 0 ? ", bf16 matmul on AMX, few rows on AVX-512 in its order"
                                                       : ", bf16 matmul on AMX")
                   : kernels_.native_bf16 ? ", bf16 matmul"
                                          : ", bf16 matmul emulated";
    if (precision_ == MatmulPrecision::Int8)
      name += kernels_.native_int8 ? ", int8 activations on VNNI" : ", int8 activations (portable)";
    return name + ")";
  }
  Device device() const override { return Device::host(); }
  MatmulPrecision matmul_precision() const override { return precision_; }
  int host_threads() const override { return pool_.size(); }
  ThreadPool::Stats host_pool_stats() const override { return pool_.stats(); }

  double measure_read_bandwidth(std::size_t bytes, int repeats) override {
    return cpu::measure_read_bandwidth(pool_, bytes, repeats);
  }
  double measure_matmul_peak(MatmulPrecision precision, int repeats) override {
    if (precision == MatmulPrecision::Bf16)
      return amx_ ? cpu::measure_amx_bf16_peak(pool_, repeats) : cpu::measure_bf16_dot_peak(pool_, repeats);
    // Int8: VPDPBUSD's peak, or 0 where the CPU runs the portable kernels.
    if (precision == MatmulPrecision::Int8)
      return kernels_.native_int8 && kernels_.isa == cpu::best_isa() ? cpu::measure_int8_dot_peak(pool_, repeats) : 0;
    return cpu::measure_fma_peak(pool_, repeats);
  }

  // --- Memory

  std::size_t available_memory() const override {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    std::size_t kb = 0;
    while (in >> key >> kb >> unit)
      if (key == "MemAvailable:") return kb * 1024;
    return 0;
  }

  Workspace& workspace() override { return workspace_; }

  // --- Profiling: each operation's wall time, its worker threads' included
  // (they finish before it returns).

  void set_profiling(bool on) override { profiler_.set_on(on); }
  std::vector<OpProfile> profile() const override { return profiler_.list(); }
  void clear_profile() override { profiler_.clear(); }

  Tensor upload(const Tensor& host) override {
    ROWLM_REQUIRE(host.on_host(), "upload: the source must be a host tensor, got " + describe(host));
    return host;
  }
  void copy_from_host(const void* src, Tensor& dst) override {
    const auto timed = profiler_.scope("copy_from_host");
    ROWLM_REQUIRE(dst.on_host(), "copy_from_host: dst must be a host tensor, got " + describe(dst));
    if (dst.nbytes()) std::memcpy(dst.raw(), src, dst.nbytes());
  }
  void copy_to_host(const Tensor& src, void* dst) override {
    const auto timed = profiler_.scope("copy_to_host");
    ROWLM_REQUIRE(src.on_host(), "copy_to_host: src must be a host tensor, got " + describe(src));
    if (src.nbytes()) std::memcpy(dst, src.raw(), src.nbytes());
  }

  Weight prepare_weight(const Weight& w) override {
    if (w.format == WeightFormat::Affine) {
      check_affine(w, "prepare_weight", /*prepared=*/false);
      // Biases that are −2^(bits−1)·scale (GGUF's symmetric types) are
      // computed from the scales instead of read: a bandwidth-bound decode
      // streams 0.5 bits a weight less at Q4_0, 2 at Q6_K.
      Weight out = without_implied_biases(w);
      if (w.bits == 6) {
        // One code a byte (affine_order.h): the 8-bit kernels, the same values.
        out.values = cpu::bytes_from_6bit_stream(w.values, w.rows, w.cols, pool_);
        out.bits = 8;
        return out;
      }
      if (w.bits != 4 || w.code_order == CodeOrder::Halves32) return out;
      // 4-bit codes in the decode kernel's order (weight.h): a copy, so the
      // checkpoint's mapping is no longer read.
      out.values = cpu::halves32_from_stream(w.values, w.rows, w.cols);
      out.code_order = CodeOrder::Halves32;
      return out;
    }
    ROWLM_REQUIRE(!w.values.empty() || w.rows * w.cols == 0, "prepare_weight: tensor has no data");
    ROWLM_REQUIRE(w.values.on_host(), "prepare_weight: the source must be in host memory, got " + describe(w.values));
    ROWLM_REQUIRE(is_float_storage(w.values.dtype()) && w.values.rank() == 2 && w.values.dim(0) == w.rows &&
                      w.values.dim(1) == w.cols,
                  "prepare_weight: weights must be f32, bf16 or f16 [rows, cols], got " + describe(w.values));
    // A view of a checkpoint stays a view where it starts on a cache line.
    // Safetensors packs tensors back to back, so most start anywhere (2-byte
    // alignment for bf16): then many 64-byte loads of the kernels split
    // across two lines; copied once (into huge pages where the system has
    // them) they decoded 10-21% faster (docs/perf.md).
    if (reinterpret_cast<std::uintptr_t>(w.values.raw()) % kWeightAlignment == 0) return w;
    Weight out = w;
    out.values = cpu::copy_to_huge_pages(w.values, pool_);
    return out;
  }

  std::unique_ptr<KvArena> make_kv_arena(const kv::LayerSpec& spec, int block_size) override {
    kv::check_layer_spec(spec, -1);
    ROWLM_REQUIRE(block_size > 0, "make_kv_arena: block_size must be positive");
    return std::make_unique<cpu::CpuKvArena>(spec, block_size);
  }

  // --- Dense operations

  void matmul(const Tensor& x, const Weight& w, Tensor& y) override {
    const auto timed = profiler_.scope("matmul");
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() == 2 && x.on_host(),
                  "matmul: x must be f32 [M, K], got " + describe(x));
    const bool affine = w.format == WeightFormat::Affine;
    if (affine)
      check_affine(w, "matmul");
    else
      ROWLM_REQUIRE(w.format == WeightFormat::Dense && w.values.on_host() && is_float_storage(w.values.dtype()),
                    "matmul: w must be a dense f32, bf16 or f16 weight of this backend, got " + w.describe());
    const int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
    ROWLM_REQUIRE(w.cols == K, "matmul: w " + w.describe() + " does not match x " + describe(x) + " in K");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.rank() == 2 && y.dim(0) == M && y.dim(1) == N && y.on_host(),
                  "matmul: y must be f32 [" + std::to_string(M) + ", " + std::to_string(N) + "], got " + describe(y));
    ROWLM_REQUIRE(!overlaps(y, x) && !overlaps(y, w.values) && !overlaps(y, w.scales) && !overlaps(y, w.biases),
                  "matmul: y must not overlap x or w");
    // Affine weights run with f32 activations under f32 and bf16 precision:
    // their dequantized values are f32, not bf16 (as for dense f32 and f16
    // weights). Under int8, 4- and 8-bit codes meet 8-bit activations.
    if (affine) {
      const cpu::AffineRows rows = affine_rows(w);
      if (precision_ == MatmulPrecision::Int8 && cpu::int8_supported(rows, K))
        cpu::matmul_affine_int8(kernels_, pool_, x.data<float>(), M, K, rows, N, y.data<float>());
      else
        cpu::matmul_affine(kernels_, pool_, x.data<float>(), M, K, rows, N, y.data<float>());
    } else if (amx_ && w.values.dtype() == DType::BF16)
      cpu::matmul_amx_bf16(pool_, x.data<float>(), M, K, w.values.data<uint16_t>(), K, N, y.data<float>(),
                           amx_tuning_);
    else
      cpu::matmul(kernels_, pool_, x.data<float>(), M, K, cpu::WeightRows{w.values.dtype(), w.values.raw(), K}, N,
                  y.data<float>(), precision_);
  }

  void add_bias(Tensor& y, const Tensor& bias) override {
    const auto timed = profiler_.scope("add_bias");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.rank() == 2 && y.on_host(), "add_bias: y must be f32 [M, N], got " + describe(y));
    ROWLM_REQUIRE(bias.dtype() == DType::F32 && bias.numel() == y.dim(1) && bias.on_host(),
                  "add_bias: bias must be f32 [" + std::to_string(y.dim(1)) + "], got " + describe(bias));
    const int64_t M = y.dim(0), N = y.dim(1);
    float* ys = y.data<float>();
    const float* b = bias.data<float>();
    pool_.parallel_for(M, rows_grain(N), [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) kernels_.add(ys + m * N, b, N);
    });
  }

  void embed(const Tensor& ids, const Weight& table, float scale, Tensor& out) override {
    const auto timed = profiler_.scope("embed");
    const bool affine = table.format == WeightFormat::Affine;
    if (affine)
      check_affine(table, "embed");
    else
      ROWLM_REQUIRE(table.format == WeightFormat::Dense && table.values.on_host() &&
                        is_float_storage(table.values.dtype()),
                    "embed: table must be a dense f32, bf16 or f16 [V, D] weight, got " + table.describe());
    const int64_t V = table.rows, D = table.cols, T = ids.numel();
    ROWLM_REQUIRE(out.dtype() == DType::F32 && out.rank() == 2 && out.dim(0) == T && out.dim(1) == D && out.on_host(),
                  "embed: out must be f32 [" + std::to_string(T) + ", " + std::to_string(D) + "], got " + describe(out));
    const int32_t* id = indices(ids, T, V, "embed", "ids", "the table");
    if (affine) {
      // The dequantized row, then · scale: the dense lookup's rounding of
      // the dequantized table.
      const cpu::AffineRows rows = affine_rows(table);
      float* o = out.data<float>();
      pool_.parallel_for(T, rows_grain(D), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          kernels_.dequantize_affine(cpu::affine_rows_from(rows, id[t]), 1, D, o + t * D, D);
          kernels_.scale(o + t * D, scale, D);
        }
      });
      return;
    }
    const std::size_t row_bytes = std::size_t(D) * dtype_size(table.values.dtype());
    const auto* base = static_cast<const std::byte*>(table.values.raw());
    float* o = out.data<float>();
    pool_.parallel_for(T, rows_grain(D), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        kernels_.convert_scale(table.values.dtype(), base + std::size_t(id[t]) * row_bytes, D, scale, o + t * D);
    });
  }

  void rms_norm(const Tensor& x, const Tensor* w, float eps, NormKind kind, Tensor& y) override {
    const auto timed = profiler_.scope("rms_norm");
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() >= 1 && x.dim(-1) > 0 && x.on_host(),
                  "rms_norm: x must be f32 [..., D] with D > 0, got " + describe(x));
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.shape() == x.shape() && y.on_host(),
                  "rms_norm: y must be f32 " + shape_str(x.shape()) + ", got " + describe(y));
    ROWLM_REQUIRE(y.raw() == x.raw() || !overlaps(x, y), "rms_norm: y must be x itself or not overlap it");
    const int64_t D = x.dim(-1), rows = x.numel() / D;
    std::vector<float> widened;
    const float* g = nullptr;
    if (kind != NormKind::NoScale) {
      ROWLM_REQUIRE(w != nullptr, "rms_norm: this norm kind needs a weight");
      ROWLM_REQUIRE(w->numel() == D && is_float_storage(w->dtype()) && w->on_host(),
                    "rms_norm: weight must be f32, bf16 or f16 with " + std::to_string(D) + " entries, got " +
                        describe(*w));
      g = as_f32(kernels_, *w, widened);
    }
    const float* xs = x.data<float>();
    float* ys = y.data<float>();
    pool_.parallel_for(rows, rows_grain(D), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        // HF's RMS norms in f32: x · pow(mean(x²) + eps, −0.5) · w, where
        // PyTorch evaluates pow(·, −0.5) (and rsqrt) as 1 / sqrt(·).
        const float mean = kernels_.sum_squares(xs + r * D, D) / float(D);
        const float inv = 1.0f / std::sqrt(mean + eps);
        kernels_.norm_apply(xs + r * D, g, kind == NormKind::OnePlus, D, inv, ys + r * D);
      }
    });
  }

  std::unique_ptr<RopeTable> make_rope_table(std::span<const float> inv_freq) override {
    ROWLM_REQUIRE(!inv_freq.empty(), "make_rope_table: no frequencies");
    return std::make_unique<CpuRopeTable>(std::vector<float>(inv_freq.begin(), inv_freq.end()));
  }

  void rope(Tensor& x, const Tensor& positions, RopeTable& rope_table) override {
    const auto timed = profiler_.scope("rope");
    auto* table = dynamic_cast<CpuRopeTable*>(&rope_table);
    ROWLM_REQUIRE(table != nullptr, "rope: the table belongs to another backend");
    const int64_t half = int64_t(table->inv_freq.size()), hd = 2 * half, T = positions.numel();
    ROWLM_REQUIRE(positions.dtype() == DType::I32 && positions.rank() == 1 && positions.on_host(),
                  "rope: positions must be i32 [T], got " + describe(positions));
    const bool shape_ok = x.rank() == 3 ? x.dim(2) == hd : x.rank() == 2 && x.dim(1) % hd == 0;
    ROWLM_REQUIRE(x.dtype() == DType::F32 && shape_ok && x.dim(0) == T && x.on_host(),
                  "rope: x must be f32 [" + std::to_string(T) + ", heads, " + std::to_string(hd) +
                      "] (or [T, heads·head_dim]), got " + describe(x));
    const int32_t* pos = positions.data<int32_t>();
    for (int64_t t = 0; t < T; ++t)
      ROWLM_REQUIRE(pos[t] >= 0, "rope: position " + std::to_string(pos[t]) + " at index " + std::to_string(t) +
                                     " is negative");
    const int64_t heads = T == 0 ? 0 : x.numel() / (T * hd);
    float* xs = x.data<float>();
    const float* freq = table->inv_freq.data();
    pool_.parallel_for(T, rows_grain(heads * hd), [&](int64_t t0, int64_t t1) {
      std::vector<float> cs(std::size_t(2 * half));
      float* cos = cs.data();
      float* sin = cs.data() + half;
      for (int64_t t = t0; t < t1; ++t) {
        rope_angles(freq, half, pos[t], cos, sin);
        for (int64_t h = 0; h < heads; ++h) kernels_.rope_head(xs + (t * heads + h) * hd, cos, sin, half);
      }
    });
  }

  void gated_activation(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) override {
    const auto timed = profiler_.scope("gated_activation");
    ROWLM_REQUIRE(gate.dtype() == DType::F32 && up.dtype() == DType::F32 && out.dtype() == DType::F32 &&
                      gate.shape() == up.shape() && out.shape() == gate.shape() && gate.on_host() && up.on_host() &&
                      out.on_host(),
                  "gated_activation: gate, up and out must be f32 of one shape, got " + describe(gate) + ", " +
                      describe(up) + ", " + describe(out));
    ROWLM_REQUIRE((out.raw() == gate.raw() || !overlaps(out, gate)) && (out.raw() == up.raw() || !overlaps(out, up)),
                  "gated_activation: out must be gate, up, or separate from both");
    const float* g = gate.data<float>();
    const float* u = up.data<float>();
    float* o = out.data<float>();
    const auto fn = act == Activation::Silu ? kernels_.silu_mul : kernels_.gelu_tanh_mul;
    elementwise(out.numel(), [&](int64_t i, int64_t n) { fn(g + i, u + i, n, o + i); });
  }

  void copy(const Tensor& src, Tensor& dst) override {
    const auto timed = profiler_.scope("copy");
    ROWLM_REQUIRE(src.dtype() == dst.dtype() && src.numel() == dst.numel() && src.on_host() && dst.on_host(),
                  "copy: src and dst must have one dtype and size, got " + describe(src) + " and " + describe(dst));
    ROWLM_REQUIRE(!overlaps(src, dst), "copy: src and dst must not overlap");
    if (src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }

  void add(Tensor& y, const Tensor& x) override {
    const auto timed = profiler_.scope("add");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && x.dtype() == DType::F32 && y.shape() == x.shape() && x.on_host() &&
                      y.on_host(),
                  "add: y and x must be f32 of one shape, got " + describe(y) + " and " + describe(x));
    ROWLM_REQUIRE(y.raw() == x.raw() || !overlaps(x, y), "add: x must be y itself or not overlap it");
    float* ys = y.data<float>();
    const float* xs = x.data<float>();
    elementwise(y.numel(), [&](int64_t i, int64_t n) { kernels_.add(ys + i, xs + i, n); });
  }

  void scale(Tensor& y, float s) override {
    const auto timed = profiler_.scope("scale");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.on_host(), "scale: y must be f32, got " + describe(y));
    float* ys = y.data<float>();
    elementwise(y.numel(), [&](int64_t i, int64_t n) { kernels_.scale(ys + i, s, n); });
  }

  void softcap(Tensor& y, float cap) override {
    const auto timed = profiler_.scope("softcap");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.on_host(), "softcap: y must be f32, got " + describe(y));
    ROWLM_REQUIRE(cap > 0.0f && std::isfinite(cap), "softcap: cap must be positive and finite, got " + std::to_string(cap));
    float* ys = y.data<float>();
    elementwise(y.numel(), [&](int64_t i, int64_t n) { kernels_.softcap(ys + i, cap, n); });
  }

  void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) override {
    const auto timed = profiler_.scope("gather_rows");
    ROWLM_REQUIRE(src.rank() >= 1 && src.on_host(), "gather_rows: src must have at least one dimension");
    const int64_t R = src.dim(0), n = rows.numel();
    const int64_t row_elems = R == 0 ? 0 : src.numel() / R;
    Shape want = src.shape();
    want[0] = n;
    ROWLM_REQUIRE(dst.dtype() == src.dtype() && dst.shape() == want && dst.on_host(),
                  "gather_rows: dst must be " + std::string(dtype_name(src.dtype())) + " " + shape_str(want) +
                      ", got " + describe(dst));
    ROWLM_REQUIRE(!overlaps(dst, src), "gather_rows: dst must not overlap src");
    const int32_t* r = indices(rows, n, R, "gather_rows", "rows", "src");
    const std::size_t row_bytes = std::size_t(row_elems) * dtype_size(src.dtype());
    const auto* s = static_cast<const std::byte*>(src.raw());
    auto* d = static_cast<std::byte*>(dst.raw());
    pool_.parallel_for(n, rows_grain(row_elems), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) std::memcpy(d + i * row_bytes, s + r[i] * row_bytes, row_bytes);
    });
  }

  void argmax_rows(const Tensor& x, Tensor& codes) override {
    const auto timed = profiler_.scope("argmax_rows");
    check_argmax_rows(x, codes);
    ROWLM_REQUIRE(x.on_host() && codes.on_host(), "argmax_rows: x and codes must be host tensors");
    const int64_t n = x.dim(0), V = x.dim(1);
    const float* xs = x.data<float>();
    int32_t* out = codes.data<int32_t>();
    pool_.parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) out[i] = cpu::argmax_code(kernels_, {xs + i * V, std::size_t(V)});
    });
  }

  bool samples_rows() const override { return sample_row_ != nullptr; }

  // The host sampler's code on each row in place, rows in parallel (each
  // row's token depends on its own row and description alone).
  void sample_rows(Tensor& x, std::span<const RowSampling> rows, std::span<const RowSamplingEdit> edits,
                   std::span<const uint64_t> masks, Tensor& tokens, Tensor* stats) override {
    if (!sample_row_) Backend::sample_rows(x, rows, edits, masks, tokens, stats);
    const auto timed = profiler_.scope("sample_rows");
    ROWLM_REQUIRE(x.on_host() && x.dtype() == DType::F32 && x.rank() == 2 && x.dim(1) > 0,
                  "sample_rows: x must be f32 [n, V], got " + describe(x));
    ROWLM_REQUIRE(tokens.on_host() && tokens.dtype() == DType::I32 && tokens.shape() == Shape{int64_t(rows.size())},
                  "sample_rows: tokens must be i32 [" + std::to_string(rows.size()) + "], got " + describe(tokens));
    const int64_t V = x.dim(1);
    const bool logprobs = std::any_of(rows.begin(), rows.end(), [](const RowSampling& r) { return r.logprobs >= 0; });
    for (const RowSampling& r : rows) {
      ROWLM_REQUIRE(r.row >= 0 && r.row < x.dim(0) && r.edits_begin >= 0 && r.edits_begin <= r.edits_end &&
                        std::size_t(r.edits_end) <= edits.size() && r.temperature >= 0.0f && r.u >= 0.0 &&
                        r.u < 1.0 && r.u_residual >= 0.0 && r.u_residual < 1.0 && r.draft < V,
                    "sample_rows: a row's description is out of range (row " + std::to_string(r.row) + ")");
      ROWLM_REQUIRE(r.logprobs <= kMaxRowLogprobs, "sample_rows: more than 20 logprobs asked for");
      ROWLM_REQUIRE(r.mask_begin < 0 || int64_t(r.mask_begin) + (V + 63) / 64 <= int64_t(masks.size()),
                    "sample_rows: a row's mask lies outside the mask words");
    }
    for (const RowSamplingEdit& e : edits)
      ROWLM_REQUIRE(e.id >= 0 && e.id < V, "sample_rows: edit of token " + std::to_string(e.id) +
                                               " outside the row of " + std::to_string(V));
    if (logprobs) {
      ROWLM_REQUIRE(stats != nullptr && stats->on_host() &&
                        std::size_t(stats->nbytes()) == rows.size() * sizeof(RowLogprobStats),
                    "sample_rows: rows ask for logprobs: stats must hold " + std::to_string(rows.size()) +
                        " RowLogprobStats");
    }
    float* xs = x.data<float>();
    int32_t* out = tokens.data<int32_t>();
    auto* st = logprobs ? static_cast<RowLogprobStats*>(stats->raw()) : nullptr;
    pool_.parallel_for(int64_t(rows.size()), 1, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const RowSampling& r = rows[std::size_t(j)];
        out[j] = sample_row_({xs + int64_t(r.row) * V, std::size_t(V)}, r, edits, masks,
                             r.logprobs >= 0 ? st + j : nullptr);
      }
    });
  }

  void scatter_add_rows(Tensor& dst, const Tensor& rows, const Tensor& weights, const Tensor& src) override {
    const auto timed = profiler_.scope("scatter_add_rows");
    ROWLM_REQUIRE(dst.dtype() == DType::F32 && dst.rank() >= 1 && dst.on_host(),
                  "scatter_add_rows: dst must be f32, got " + describe(dst));
    const int64_t R = dst.dim(0), n = rows.numel();
    const int64_t D = R == 0 ? 0 : dst.numel() / R;
    ROWLM_REQUIRE(weights.dtype() == DType::F32 && weights.numel() == n && weights.on_host(),
                  "scatter_add_rows: " + std::to_string(n) + " rows but weights " + describe(weights));
    Shape want = dst.shape();
    want[0] = n;
    ROWLM_REQUIRE(src.dtype() == DType::F32 && src.shape() == want && src.on_host(),
                  "scatter_add_rows: src must be f32 " + shape_str(want) + ", got " + describe(src));
    ROWLM_REQUIRE(!overlaps(dst, src), "scatter_add_rows: src must not overlap dst");
    const int32_t* r = indices(rows, n, R, "scatter_add_rows", "rows", "dst");
    scatter_add(dst.data<float>(), D, r, weights.data<float>(), n, src.data<float>());
  }

  // --- Mixture of experts

  void moe_route(const Tensor& logits, int top_k, bool renormalize, const Tensor* per_expert_scale, Tensor& experts,
                 Tensor& weights) override {
    const auto timed = profiler_.scope("moe_route");
    ROWLM_REQUIRE(logits.dtype() == DType::F32 && logits.rank() == 2 && logits.dim(1) > 0 && logits.on_host(),
                  "moe_route: logits must be f32 [T, E], got " + describe(logits));
    const int64_t T = logits.dim(0), E = logits.dim(1);
    ROWLM_REQUIRE(top_k >= 1 && top_k <= E, "moe_route: top_k " + std::to_string(top_k) + " must be in [1, " +
                                                std::to_string(E) + "]");
    ROWLM_REQUIRE(experts.dtype() == DType::I32 && experts.numel() == T * top_k && experts.on_host() &&
                      weights.dtype() == DType::F32 && weights.numel() == T * top_k && weights.on_host(),
                  "moe_route: experts (i32) and weights (f32) need T·top_k = " + std::to_string(T * top_k) +
                      " entries, got " + describe(experts) + " and " + describe(weights));
    std::vector<float> widened;
    const float* scale = nullptr;
    if (per_expert_scale != nullptr) {
      ROWLM_REQUIRE(per_expert_scale->numel() == E && is_float_storage(per_expert_scale->dtype()) &&
                        per_expert_scale->on_host(),
                    "moe_route: per_expert_scale must be f32, bf16 or f16 with " + std::to_string(E) +
                        " entries, got " + describe(*per_expert_scale));
      scale = as_f32(kernels_, *per_expert_scale, widened);
    }
    const float* l = logits.data<float>();
    for (int64_t i = 0; i < T * E; ++i)
      ROWLM_REQUIRE(!std::isnan(l[i]), "moe_route: logits row " + std::to_string(i / E) + " contains NaN");
    int32_t* ex = experts.data<int32_t>();
    float* wt = weights.data<float>();
    pool_.parallel_for(T, std::max<int64_t>(1, kElementGrain / E), [&](int64_t t0, int64_t t1) {
      std::vector<float> probs(static_cast<std::size_t>(E));
      for (int64_t t = t0; t < t1; ++t)
        route_token(l + t * E, E, top_k, renormalize, scale, probs.data(), ex + t * top_k, wt + t * top_k);
    });
  }

  void moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights, const ExpertBank& bank,
                   Activation act, Tensor& out) override {
    const auto timed = profiler_.scope("moe_experts");
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() == 2 && x.on_host(), "moe_experts: x must be f32 [T, H], got " + describe(x));
    const int64_t T = x.dim(0), H = x.dim(1);
    ROWLM_REQUIRE(out.dtype() == DType::F32 && out.shape() == x.shape() && out.on_host() && !overlaps(out, x),
                  "moe_experts: out must be f32 " + shape_str(x.shape()) + " apart from x, got " + describe(out));
    const int E = bank.size();
    ROWLM_REQUIRE(E > 0 && int(bank.up.size()) == E && int(bank.down.size()) == E,
                  "moe_experts: the bank needs gate, up and down for every expert");
    ROWLM_REQUIRE(experts.dtype() == DType::I32 && experts.rank() == 2 && experts.dim(0) == T && experts.on_host() &&
                      weights.dtype() == DType::F32 && weights.shape() == experts.shape() && weights.on_host(),
                  "moe_experts: experts (i32) and weights (f32) must be [T, top_k], got " + describe(experts) +
                      " and " + describe(weights));
    const int64_t K = experts.dim(1);
    const int32_t* ex = indices(experts.reshaped({T * K}), T * K, E, "moe_experts", "rows", "the bank");
    const float* wt = weights.data<float>();
    std::fill(out.data<float>(), out.data<float>() + out.numel(), 0.0f);
    // Each expert over the tokens routed to it (in token order); expert
    // contributions are added in expert order.
    std::vector<int32_t> tokens;
    std::vector<float> token_weights;
    // Scratch for the largest expert call (each token meets an expert at
    // most once), allocated once per call and not zeroed: every element is
    // written before it is read.
    int64_t I = 0;
    for (const Weight& g : bank.gate) I = std::max(I, g.rows);
    Tensor xe_all = Tensor::uninitialized(DType::F32, {T, H}), ye_all = Tensor::uninitialized(DType::F32, {T, H});
    Tensor gate_all = Tensor::uninitialized(DType::F32, {T * I}), up_all = Tensor::uninitialized(DType::F32, {T * I});
    for (int e = 0; e < E; ++e) {
      tokens.clear();
      token_weights.clear();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < K; ++j)
          if (ex[t * K + j] == e) {
            tokens.push_back(int32_t(t));
            token_weights.push_back(wt[t * K + j]);
          }
      if (tokens.empty()) continue;
      const int64_t n = int64_t(tokens.size()), Ie = bank.gate[std::size_t(e)].rows;
      Tensor xt = xe_all.rows(0, n), yt = ye_all.rows(0, n);
      Tensor gt = gate_all.rows(0, n * Ie).reshaped({n, Ie}), ut = up_all.rows(0, n * Ie).reshaped({n, Ie});
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(xt.data<float>() + i * H, x.data<float>() + int64_t(tokens[std::size_t(i)]) * H,
                    std::size_t(H) * sizeof(float));
      matmul(xt, bank.gate[std::size_t(e)], gt);
      matmul(xt, bank.up[std::size_t(e)], ut);
      gated_activation(gt, ut, act, gt);
      matmul(gt, bank.down[std::size_t(e)], yt);
      scatter_add(out.data<float>(), H, tokens.data(), token_weights.data(), n, yt.data<float>());
    }
  }

  // --- KV bytes

  void kv_write(KvArena& arena, std::span<const int64_t> slots, const Tensor& k, const Tensor& v) override {
    const auto timed = profiler_.scope("kv_write");
    cpu::CpuKvArena& a = own(arena, "kv_write");
    const kv::LayerSpec& spec = a.spec();
    const int64_t T = int64_t(slots.size()), width = int64_t(spec.kv_heads) * spec.head_dim;
    for (const Tensor* t : {&k, &v})
      ROWLM_REQUIRE(t->dtype() == DType::F32 && t->numel() == T * width && t->on_host(),
                    "kv_write: K and V must be f32 [" + std::to_string(T) + ", " + std::to_string(width) + "], got " +
                        describe(*t));
    check_kv_slots(a, slots, "kv_write");
    const KvBlockLayout& bl = a.layout();
    const int bs = bl.block_size, kvh = bl.kv_heads, hd = bl.head.head_dim;
    const std::size_t hb = bl.head.head_bytes;
    const float* ks = k.data<float>();
    const float* vs = v.data<float>();
    pool_.parallel_for(T, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, width)), [&](int64_t t0, int64_t t1) {
      std::vector<std::byte> record(2 * std::size_t(kvh) * hb);
      for (int64_t t = t0; t < t1; ++t) {
        for (int h = 0; h < kvh; ++h) {
          kv::encode_head(bl.head, ks + (t * kvh + h) * hd, record.data() + std::size_t(h) * hb);
          kv::encode_head(bl.head, vs + (t * kvh + h) * hd, record.data() + std::size_t(kvh + h) * hb);
        }
        const int64_t slot = slots[std::size_t(t)];
        bl.store_token(a.block(int32_t(slot / bs)), int(slot % bs), record.data());
      }
    });
  }

  void kv_copy_blocks(KvArena& arena, std::span<const KvBlockCopy> copies) override {
    const auto timed = profiler_.scope("kv_copy_blocks");
    cpu::CpuKvArena& a = own(arena, "kv_copy_blocks");
    check_kv_copies(a, copies);
    for (const KvBlockCopy& c : copies) std::memcpy(a.block(c.dst), a.block(c.src), a.block_bytes());
  }

  void kv_read(const KvArena& arena, std::span<const int64_t> slots, std::span<std::byte> records) override {
    const auto timed = profiler_.scope("kv_read");
    const cpu::CpuKvArena& a = own(arena, "kv_read");
    const std::size_t rec = kv::token_record_bytes(a.spec());
    ROWLM_REQUIRE(records.size() == slots.size() * rec, "kv_read: " + std::to_string(slots.size()) +
                                                             " slots need " + std::to_string(slots.size() * rec) +
                                                             " bytes, got " + std::to_string(records.size()));
    check_kv_slots(a, slots, "kv_read");
    const int bs = a.block_size();
    for (std::size_t i = 0; i < slots.size(); ++i)
      a.layout().load_token(a.block(int32_t(slots[i] / bs)), int(slots[i] % bs), records.data() + i * rec);
  }

  void kv_store(KvArena& arena, std::span<const int64_t> slots, std::span<const std::byte> records) override {
    const auto timed = profiler_.scope("kv_store");
    cpu::CpuKvArena& a = own(arena, "kv_store");
    const std::size_t rec = kv::token_record_bytes(a.spec());
    ROWLM_REQUIRE(records.size() == slots.size() * rec, "kv_store: " + std::to_string(slots.size()) +
                                                             " slots need " + std::to_string(slots.size() * rec) +
                                                             " bytes, got " + std::to_string(records.size()));
    check_kv_slots(a, slots, "kv_store");
    const int bs = a.block_size();
    for (std::size_t i = 0; i < slots.size(); ++i)
      a.layout().store_token(a.block(int32_t(slots[i] / bs)), int(slots[i] % bs), records.data() + i * rec);
  }

  void attention(const Tensor& q, const KvArena& arena, const AttentionBatch& batch, const AttentionParams& params,
                 Tensor& out) override {
    const auto timed = profiler_.scope("attention");
    const cpu::CpuKvArena& a = own(arena, "attention");
    const kv::LayerSpec& spec = a.spec();
    ROWLM_REQUIRE(params.num_heads > 0 && params.head_dim == spec.head_dim && params.num_heads % spec.kv_heads == 0,
                  "attention: " + std::to_string(params.num_heads) + " heads of " + std::to_string(params.head_dim) +
                      " do not fit a layer of " + std::to_string(spec.kv_heads) + " kv heads of " +
                      std::to_string(spec.head_dim));
    const int64_t T = int64_t(batch.queries.size());
    const int64_t expect = T * params.num_heads * params.head_dim;
    ROWLM_REQUIRE(q.dtype() == DType::F32 && q.numel() == expect && q.on_host(),
                  "attention: q must be f32 [" + std::to_string(T) + ", " + std::to_string(params.num_heads) + ", " +
                      std::to_string(params.head_dim) + "], got " + describe(q));
    ROWLM_REQUIRE(out.dtype() == DType::F32 && out.numel() == expect && out.on_host() && !overlaps(out, q),
                  "attention: out must be f32 with q's shape and separate from q, got " + describe(out));
    check_attention_batch(a, batch);
    cpu::attend(kernels_, pool_, attention_scratch_, a.layout(), a.addresses(), batch, q.data<float>(), params, out.data<float>());
  }

 private:
  // An affine weight this backend can run (weight.h's layout), or an Error
  // naming `op` and what is wrong.
  // `prepared`: the weight must have come from prepare_weight (4-bit codes
  // in the order the kernels read).
  static void check_affine(const Weight& w, const char* op, bool prepared = true) {
    const std::string at = std::string(op) + ": affine weight " + w.describe();
    ROWLM_REQUIRE(w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8,
                  at + ": bits must be 2, 3, 4, 5, 6 or 8");
    ROWLM_REQUIRE(w.group_size == 16 || w.group_size == 32 || w.group_size == 64 || w.group_size == 128,
                  at + ": group size must be 16, 32, 64 or 128");
    ROWLM_REQUIRE(w.rows >= 0 && w.cols >= 0 && w.cols % w.group_size == 0 && w.cols * w.bits % 32 == 0,
                  at + ": columns must be whole groups and whole 32-bit words of codes");
    ROWLM_REQUIRE(w.values.on_host() && w.scales.on_host() && w.biases.on_host(),
                  at + ": codes, scales and biases must be in host memory");
    ROWLM_REQUIRE(w.values.dtype() == DType::U32 && w.values.rank() == 2 && w.values.dim(0) == w.rows &&
                      w.values.dim(1) == w.cols * w.bits / 32,
                  at + ": codes must be u32 [" + std::to_string(w.rows) + ", " + std::to_string(w.cols * w.bits / 32) +
                      "], got " + describe(w.values));
    ROWLM_REQUIRE(!prepared || w.bits != 4 || w.code_order == CodeOrder::Halves32,
                  at + ": 4-bit codes must be in this backend's order: pass the weight through prepare_weight first");
    ROWLM_REQUIRE(w.code_order == CodeOrder::Stream || (w.bits == 4 && w.code_order == CodeOrder::Halves32),
                  at + ": codes must be in the checkpoint's stream order (or this backend's 4-bit order)");
    const Shape params{w.rows, w.cols / w.group_size};
    // (A power of two up to 2^(bits-1): 6-bit codes that prepare_weight
    // widened to bytes keep their zero of 32.)
    const bool zero_ok = w.implied_zero > 0 && w.implied_zero <= 1 << (w.bits - 1) &&
                         (w.implied_zero & (w.implied_zero - 1)) == 0;
    ROWLM_REQUIRE(w.implied_zero == 0 || (zero_ok && w.biases.empty()),
                  at + ": implied biases need no biases tensor and a zero that is a power of two up to 2^(bits-1)");
    for (const Tensor* t : {&w.scales, &w.biases})
      ROWLM_REQUIRE((t == &w.biases && w.implied_zero) ||
                        (is_float_storage(t->dtype()) && t->shape() == params && t->dtype() == w.scales.dtype()),
                    at + ": scales and biases must both be f32, bf16 or f16 " + shape_str(params) + ", got " +
                        describe(w.scales) + " and " + describe(w.biases));
  }
  static cpu::AffineRows affine_rows(const Weight& w) {
    return cpu::AffineRows{static_cast<const uint32_t*>(w.values.raw()),
                           w.values.dim(1),
                           w.scales.raw(),
                           w.implied_zero ? nullptr : w.biases.raw(),
                           w.scales.dim(1),
                           w.scales.dtype(),
                           w.bits,
                           w.group_size,
                           -float(w.implied_zero)};
  }

  // Rows of `width` floats per parallel chunk so a chunk has enough work.
  static int64_t rows_grain(int64_t width) { return std::max<int64_t>(1, kElementGrain / std::max<int64_t>(width, 1)); }

  // fn(begin, count) over [0, n) in chunks that start at multiples of 16.
  template <class F>
  void elementwise(int64_t n, const F& fn, int64_t grain = kElementGrain) {
    if (n <= 0) return;
    const int64_t blocks = (n + 15) / 16;
    pool_.parallel_for(blocks, std::max<int64_t>(1, grain / 16), [&](int64_t b0, int64_t b1) {
      const int64_t i0 = b0 * 16, i1 = std::min(n, b1 * 16);
      fn(i0, i1 - i0);
    });
  }

  // d[rows[i], :] += w[i] · s[i, :] over D columns, applied in order of i.
  void scatter_add(float* d, int64_t D, const int32_t* rows, const float* w, int64_t n, const float* s) {
    // Split over columns, so every element still receives its updates in order of i.
    elementwise(n == 0 ? 0 : D, [&](int64_t c, int64_t len) {
      for (int64_t i = 0; i < n; ++i) kernels_.add_scaled(d + rows[i] * D + c, w[i], s + i * D + c, len);
    }, std::max<int64_t>(16, kElementGrain / std::max<int64_t>(n, 1)));
  }


  const HostRowSampler sample_row_;  // null: sample_rows is an Error
  const cpu::Kernels& kernels_;
  ThreadPool pool_;
  MatmulPrecision precision_;
  bool amx_;  // bf16 matmuls with bf16 weights on AMX tiles (amx_bf16.h)
  cpu::MatmulTuning amx_tuning_;  // and which of them run AMX's order on the vector units
  cpu::AttentionScratch attention_scratch_;  // tiles and per-task scratch, kept between calls
  Workspace workspace_;
  OpProfiler profiler_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads, cpu::Isa isa, MatmulPrecision precision) {
  return std::make_unique<CpuBackend>(threads, isa, precision, false);
}

std::unique_ptr<Backend> make_cpu_backend_amx(int threads, int64_t vector_rows) {
  if (vector_rows < 0 || vector_rows > cpu::kAmxRowsMax)
    throw Error("make_cpu_backend_amx: vector_rows must be 0 to " + std::to_string(cpu::kAmxRowsMax) + ", got " +
                std::to_string(vector_rows));
  if (!cpu::amx_bf16_usable()) throw Error("make_cpu_backend_amx: this CPU has no AMX-BF16 tiles (or the kernel refused them)");
  return std::make_unique<CpuBackend>(threads, cpu::Isa::Avx512, MatmulPrecision::Bf16, true, vector_rows);
}

std::unique_ptr<Backend> make_cpu_backend(int threads, MatmulPrecision precision, HostRowSampler sample_row) {
  const cpu::Isa isa = cpu::isa_from_env();
  // ROWLM_CPU_AMX: unset or rows, the tiles and, for calls of up to 4 rows,
  // the same order on the vector units (decode: 1.28x the tiles alone on
  // the 16-core host, docs/perf.md); 1, the tiles for every bf16 matmul; 0,
  // no AMX.
  const std::string_view amx_env = std::getenv("ROWLM_CPU_AMX") ? std::getenv("ROWLM_CPU_AMX") : "rows";
  if (amx_env != "0" && amx_env != "1" && amx_env != "rows")
    throw Error("ROWLM_CPU_AMX must be 0, 1 or rows, got '" + std::string(amx_env) + "'");
  const bool amx =
      precision == MatmulPrecision::Bf16 && isa == cpu::Isa::Avx512 && amx_env != "0" && cpu::amx_bf16_usable();
  return std::make_unique<CpuBackend>(threads, isa, precision, amx, amx_env == "rows" ? cpu::kAmxRowsMax : 0,
                                      sample_row);
}

}  // namespace rowlm

#undef ROWLM_REQUIRE
