#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "core/error.h"

namespace rowlm {
namespace {

// Elementwise work below this many floats stays on the calling thread.
constexpr int64_t kElementGrain = 16 * 1024;

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape());
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

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, cpu::Isa isa, MatmulPrecision precision)
      : kernels_(cpu::kernels_for(isa)), pool_(threads), precision_(precision) {}

  std::string name() const override {
    std::string name = "cpu (" + std::string(cpu::isa_name(kernels_.isa)) + ", " +
                       std::to_string(pool_.size()) + " threads";
    if (precision_ == MatmulPrecision::Bf16)
      name += kernels_.native_bf16 ? ", bf16 matmul" : ", bf16 matmul emulated";
    return name + ")";
  }
  ThreadPool& pool() override { return pool_; }
  MatmulPrecision matmul_precision() const override { return precision_; }

  Tensor prepare_weight(const Tensor& w) override {
    ROWLM_REQUIRE(!w.empty() || w.numel() == 0, "prepare_weight: tensor has no data");
    ROWLM_REQUIRE(is_float_storage(w.dtype()),
            "prepare_weight: weights must be f32, bf16 or f16, got " + describe(w));
    return w;
  }

  void matmul(const Tensor& x, const Tensor& w, Tensor& y) override {
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() == 2, "matmul: x must be f32 [M, K], got " + describe(x));
    ROWLM_REQUIRE(w.rank() == 2 && is_float_storage(w.dtype()),
            "matmul: w must be f32, bf16 or f16 [N, K], got " + describe(w));
    const int64_t M = x.dim(0), K = x.dim(1), N = w.dim(0);
    ROWLM_REQUIRE(w.dim(1) == K, "matmul: w " + describe(w) + " does not match x " + describe(x) + " in K");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.rank() == 2 && y.dim(0) == M && y.dim(1) == N,
            "matmul: y must be f32 [" + std::to_string(M) + ", " + std::to_string(N) + "], got " + describe(y));
    ROWLM_REQUIRE(!overlaps(y, x) && !overlaps(y, w), "matmul: y must not overlap x or w");
    cpu::matmul(kernels_, pool_, x.data<float>(), M, K, cpu::WeightRows{w.dtype(), w.raw(), K}, N,
                y.data<float>(), precision_);
  }

  void embed(std::span<const int32_t> ids, const Tensor& table, float scale, Tensor& out) override {
    ROWLM_REQUIRE(table.rank() == 2 && is_float_storage(table.dtype()),
            "embed: table must be f32, bf16 or f16 [V, D], got " + describe(table));
    const int64_t V = table.dim(0), D = table.dim(1), T = int64_t(ids.size());
    ROWLM_REQUIRE(out.dtype() == DType::F32 && out.rank() == 2 && out.dim(0) == T && out.dim(1) == D,
            "embed: out must be f32 [" + std::to_string(T) + ", " + std::to_string(D) + "], got " + describe(out));
    for (int64_t t = 0; t < T; ++t)
      ROWLM_REQUIRE(ids[t] >= 0 && ids[t] < V, "embed: token id " + std::to_string(ids[t]) + " at index " +
                                             std::to_string(t) + " is outside the table's " +
                                             std::to_string(V) + " rows");
    const std::size_t row_bytes = std::size_t(D) * dtype_size(table.dtype());
    const auto* base = static_cast<const std::byte*>(table.raw());
    float* o = out.data<float>();
    pool_.parallel_for(T, rows_grain(D), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        kernels_.convert_scale(table.dtype(), base + std::size_t(ids[t]) * row_bytes, D, scale, o + t * D);
    });
  }

  void rms_norm(const Tensor& x, const Tensor* w, float eps, NormKind kind, Tensor& y) override {
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() >= 1 && x.dim(-1) > 0,
            "rms_norm: x must be f32 [..., D] with D > 0, got " + describe(x));
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.shape() == x.shape(),
            "rms_norm: y must be f32 " + shape_str(x.shape()) + ", got " + describe(y));
    ROWLM_REQUIRE(y.raw() == x.raw() || !overlaps(x, y), "rms_norm: y must be x itself or not overlap it");
    const int64_t D = x.dim(-1), rows = x.numel() / D;
    std::vector<float> widened;
    const float* g = nullptr;
    if (kind != NormKind::NoScale) {
      ROWLM_REQUIRE(w != nullptr, "rms_norm: this norm kind needs a weight");
      ROWLM_REQUIRE(w->numel() == D && is_float_storage(w->dtype()),
              "rms_norm: weight must be f32, bf16 or f16 with " + std::to_string(D) + " entries, got " +
                  describe(*w));
      g = as_f32(kernels_, *w, widened);
    }
    const float* xs = x.data<float>();
    float* ys = y.data<float>();
    pool_.parallel_for(rows, rows_grain(D), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        // HF Gemma4RMSNorm in f32: x · pow(mean(x²) + eps, −0.5) · w, where
        // PyTorch evaluates pow(·, −0.5) as 1 / sqrt(·).
        const float mean = kernels_.sum_squares(xs + r * D, D) / float(D);
        const float inv = 1.0f / std::sqrt(mean + eps);
        kernels_.norm_apply(xs + r * D, g, kind == NormKind::OnePlus, D, inv, ys + r * D);
      }
    });
  }

  void rope(Tensor& x, std::span<const int64_t> positions, const RopeFrequencies& freqs) override {
    const int64_t hd = freqs.head_dim, half = hd / 2, T = int64_t(positions.size());
    ROWLM_REQUIRE(hd > 0 && hd % 2 == 0, "rope: head_dim must be even and positive, got " + std::to_string(hd));
    ROWLM_REQUIRE(int64_t(freqs.inv_freq.size()) == half,
            "rope: inv_freq has " + std::to_string(freqs.inv_freq.size()) + " entries, head_dim " +
                std::to_string(hd) + " needs " + std::to_string(half));
    const bool shape_ok = x.rank() == 3 ? x.dim(2) == hd : x.rank() == 2 && x.dim(1) % hd == 0;
    ROWLM_REQUIRE(x.dtype() == DType::F32 && shape_ok && x.dim(0) == T,
            "rope: x must be f32 [" + std::to_string(T) + ", heads, " + std::to_string(hd) +
                "] (or [T, heads·head_dim]), got " + describe(x));
    for (int64_t t = 0; t < T; ++t)
      ROWLM_REQUIRE(positions[t] >= 0, "rope: position " + std::to_string(positions[t]) + " at index " +
                                     std::to_string(t) + " is negative");
    const int64_t heads = T == 0 ? 0 : x.numel() / (T * hd);
    float* xs = x.data<float>();
    const float* inv_freq = freqs.inv_freq.data();
    pool_.parallel_for(T, rows_grain(heads * hd), [&](int64_t t0, int64_t t1) {
      std::vector<float> cs(std::size_t(2 * half));
      float* cos = cs.data();
      float* sin = cs.data() + half;
      for (int64_t t = t0; t < t1; ++t) {
        // As HF: angle = float(position) · inv_freq in f32, then cos and sin in f32.
        const float p = float(positions[t]);
        for (int64_t i = 0; i < half; ++i) {
          const float angle = p * inv_freq[i];
          cos[i] = std::cos(angle);
          sin[i] = std::sin(angle);
        }
        for (int64_t h = 0; h < heads; ++h) kernels_.rope_head(xs + (t * heads + h) * hd, cos, sin, half);
      }
    });
  }

  void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) override {
    ROWLM_REQUIRE(gate.dtype() == DType::F32 && up.dtype() == DType::F32 && out.dtype() == DType::F32 &&
                gate.shape() == up.shape() && out.shape() == gate.shape(),
            "gelu_tanh_mul: gate, up and out must be f32 of one shape, got " + describe(gate) + ", " +
                describe(up) + ", " + describe(out));
    ROWLM_REQUIRE((out.raw() == gate.raw() || !overlaps(out, gate)) && (out.raw() == up.raw() || !overlaps(out, up)),
            "gelu_tanh_mul: out must be gate, up, or separate from both");
    const float* g = gate.data<float>();
    const float* u = up.data<float>();
    float* o = out.data<float>();
    elementwise(out.numel(), [&](int64_t i, int64_t n) { kernels_.gelu_tanh_mul(g + i, u + i, n, o + i); });
  }

  void copy(const Tensor& src, Tensor& dst) override {
    ROWLM_REQUIRE(src.dtype() == dst.dtype() && src.numel() == dst.numel(),
            "copy: src and dst must have one dtype and size, got " + describe(src) + " and " + describe(dst));
    ROWLM_REQUIRE(!overlaps(src, dst), "copy: src and dst must not overlap");
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }

  void add(Tensor& y, const Tensor& x) override {
    ROWLM_REQUIRE(y.dtype() == DType::F32 && x.dtype() == DType::F32 && y.shape() == x.shape(),
            "add: y and x must be f32 of one shape, got " + describe(y) + " and " + describe(x));
    ROWLM_REQUIRE(y.raw() == x.raw() || !overlaps(x, y), "add: x must be y itself or not overlap it");
    float* ys = y.data<float>();
    const float* xs = x.data<float>();
    elementwise(y.numel(), [&](int64_t i, int64_t n) { kernels_.add(ys + i, xs + i, n); });
  }

  void scale(Tensor& y, float s) override {
    ROWLM_REQUIRE(y.dtype() == DType::F32, "scale: y must be f32, got " + describe(y));
    float* ys = y.data<float>();
    elementwise(y.numel(), [&](int64_t i, int64_t n) { kernels_.scale(ys + i, s, n); });
  }

  void softcap(Tensor& y, float cap) override {
    ROWLM_REQUIRE(y.dtype() == DType::F32, "softcap: y must be f32, got " + describe(y));
    ROWLM_REQUIRE(cap > 0.0f && std::isfinite(cap), "softcap: cap must be positive and finite, got " + std::to_string(cap));
    float* ys = y.data<float>();
    elementwise(y.numel(), [&](int64_t i, int64_t n) { kernels_.softcap(ys + i, cap, n); });
  }

  void attention(const Tensor& q, std::span<const AttentionQuery> queries, const kv::KvCache& cache,
                 int layer, const AttentionParams& params, Tensor& out) override {
    ROWLM_REQUIRE(params.num_heads > 0 && params.head_dim > 0,
            "attention: num_heads and head_dim must be positive");
    const int64_t expect = int64_t(queries.size()) * params.num_heads * params.head_dim;
    ROWLM_REQUIRE(q.dtype() == DType::F32 && q.numel() == expect,
            "attention: q must be f32 [" + std::to_string(queries.size()) + ", " + std::to_string(params.num_heads) +
                ", " + std::to_string(params.head_dim) + "], got " + describe(q));
    ROWLM_REQUIRE(out.dtype() == DType::F32 && out.numel() == expect && !overlaps(out, q),
            "attention: out must be f32 with q's shape and separate from q, got " + describe(out));
    kv::attend(cache, layer, queries, q.data<float>(), params, out.data<float>(), pool_);
  }

  void moe_route(const Tensor& logits, int top_k, const Tensor* per_expert_scale,
                 std::span<int32_t> experts, std::span<float> weights) override {
    ROWLM_REQUIRE(logits.dtype() == DType::F32 && logits.rank() == 2 && logits.dim(1) > 0,
            "moe_route: logits must be f32 [T, E], got " + describe(logits));
    const int64_t T = logits.dim(0), E = logits.dim(1);
    ROWLM_REQUIRE(top_k >= 1 && top_k <= E, "moe_route: top_k " + std::to_string(top_k) + " must be in [1, " +
                                          std::to_string(E) + "]");
    ROWLM_REQUIRE(int64_t(experts.size()) == T * top_k && int64_t(weights.size()) == T * top_k,
            "moe_route: experts and weights need T·top_k = " + std::to_string(T * top_k) + " entries, got " +
                std::to_string(experts.size()) + " and " + std::to_string(weights.size()));
    std::vector<float> widened;
    const float* scale = nullptr;
    if (per_expert_scale != nullptr) {
      ROWLM_REQUIRE(per_expert_scale->numel() == E && is_float_storage(per_expert_scale->dtype()),
              "moe_route: per_expert_scale must be f32, bf16 or f16 with " + std::to_string(E) +
                  " entries, got " + describe(*per_expert_scale));
      scale = as_f32(kernels_, *per_expert_scale, widened);
    }
    const float* l = logits.data<float>();
    for (int64_t i = 0; i < T * E; ++i)
      ROWLM_REQUIRE(!std::isnan(l[i]), "moe_route: logits row " + std::to_string(i / E) + " contains NaN");
    pool_.parallel_for(T, std::max<int64_t>(1, kElementGrain / E), [&](int64_t t0, int64_t t1) {
      std::vector<float> probs(static_cast<std::size_t>(E));
      for (int64_t t = t0; t < t1; ++t)
        route_row(l + t * E, E, top_k, scale, probs.data(), experts.data() + t * top_k,
                  weights.data() + t * top_k);
    });
  }

  void gather_rows(const Tensor& src, std::span<const int32_t> rows, Tensor& dst) override {
    ROWLM_REQUIRE(src.rank() >= 1, "gather_rows: src must have at least one dimension");
    const int64_t R = src.dim(0), n = int64_t(rows.size());
    const int64_t row_elems = R == 0 ? 0 : src.numel() / R;
    Shape want = src.shape();
    want[0] = n;
    ROWLM_REQUIRE(dst.dtype() == src.dtype() && dst.shape() == want,
            "gather_rows: dst must be " + std::string(dtype_name(src.dtype())) + " " + shape_str(want) +
                ", got " + describe(dst));
    ROWLM_REQUIRE(!overlaps(dst, src), "gather_rows: dst must not overlap src");
    for (int64_t i = 0; i < n; ++i)
      ROWLM_REQUIRE(rows[i] >= 0 && rows[i] < R, "gather_rows: row " + std::to_string(rows[i]) + " at index " +
                                               std::to_string(i) + " is outside src's " + std::to_string(R) +
                                               " rows");
    const std::size_t row_bytes = std::size_t(row_elems) * dtype_size(src.dtype());
    const auto* s = static_cast<const std::byte*>(src.raw());
    auto* d = static_cast<std::byte*>(dst.raw());
    pool_.parallel_for(n, rows_grain(row_elems), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) std::memcpy(d + i * row_bytes, s + rows[i] * row_bytes, row_bytes);
    });
  }

  void scatter_add_rows(Tensor& dst, std::span<const int32_t> rows, std::span<const float> weights,
                        const Tensor& src) override {
    ROWLM_REQUIRE(dst.dtype() == DType::F32 && dst.rank() >= 1, "scatter_add_rows: dst must be f32, got " + describe(dst));
    const int64_t R = dst.dim(0), n = int64_t(rows.size());
    const int64_t D = R == 0 ? 0 : dst.numel() / R;
    ROWLM_REQUIRE(int64_t(weights.size()) == n,
            "scatter_add_rows: " + std::to_string(n) + " rows but " + std::to_string(weights.size()) + " weights");
    Shape want = dst.shape();
    want[0] = n;
    ROWLM_REQUIRE(src.dtype() == DType::F32 && src.shape() == want,
            "scatter_add_rows: src must be f32 " + shape_str(want) + ", got " + describe(src));
    ROWLM_REQUIRE(!overlaps(dst, src), "scatter_add_rows: src must not overlap dst");
    for (int64_t i = 0; i < n; ++i)
      ROWLM_REQUIRE(rows[i] >= 0 && rows[i] < R, "scatter_add_rows: row " + std::to_string(rows[i]) + " at index " +
                                               std::to_string(i) + " is outside dst's " + std::to_string(R) +
                                               " rows");
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    // Split over columns, so every element still receives its updates in order of i.
    elementwise(n == 0 ? 0 : D, [&](int64_t c, int64_t len) {
      for (int64_t i = 0; i < n; ++i) kernels_.add_scaled(d + rows[i] * D + c, weights[i], s + i * D + c, len);
    }, std::max<int64_t>(16, kElementGrain / std::max<int64_t>(n, 1)));
  }

 private:
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

  // Softmax over E in f32 (max-subtracted, summed in index order), the top_k
  // by probability (ties to the lower index), renormalised over the k in
  // descending order, times the per-expert scale (HF Gemma4TextRouter).
  static void route_row(const float* logits, int64_t E, int top_k, const float* scale, float* probs,
                        int32_t* experts, float* weights) {
    float max = logits[0];
    for (int64_t e = 1; e < E; ++e) max = std::max(max, logits[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      probs[e] = std::exp(logits[e] - max);
      sum += probs[e];
    }
    for (int64_t e = 0; e < E; ++e) probs[e] /= sum;
    float chosen_sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (probs[e] < 0.0f) continue;  // already taken (marked below)
        if (best < 0 || probs[e] > probs[best]) best = e;
      }
      experts[j] = int32_t(best);
      weights[j] = probs[best];
      chosen_sum += probs[best];
      probs[best] = -1.0f;
    }
    for (int j = 0; j < top_k; ++j) {
      weights[j] /= chosen_sum;
      if (scale != nullptr) weights[j] *= scale[experts[j]];
    }
  }

  const cpu::Kernels& kernels_;
  ThreadPool pool_;
  MatmulPrecision precision_;
};

}  // namespace

std::string_view matmul_precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::Bf16 ? "bf16" : "f32";
}

MatmulPrecision parse_matmul_precision(std::string_view name) {
  for (MatmulPrecision p : {MatmulPrecision::F32, MatmulPrecision::Bf16})
    if (name == matmul_precision_name(p)) return p;
  throw Error("unknown matmul precision '" + std::string(name) + "' (expected f32 or bf16)");
}

std::unique_ptr<Backend> make_cpu_backend(int threads, cpu::Isa isa, MatmulPrecision precision) {
  return std::make_unique<CpuBackend>(threads, isa, precision);
}

std::unique_ptr<Backend> make_cpu_backend(int threads, MatmulPrecision precision) {
  return make_cpu_backend(threads, cpu::isa_from_env(), precision);
}

}  // namespace rowlm

#undef ROWLM_REQUIRE
