#pragma once
// The kernel interface. Model code calls only these operations on tensors
// the backend produced; the CPU backend implements it today and is the
// reference that a CUDA backend must agree with.
//
// Batch invariance: every operation computes each output row (token) from
// that row's inputs alone, in one fixed reduction order, so a token's result
// does not depend on how many other tokens share the call or where they sit.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kv/attention.h"

namespace rowlm {

using kv::AttentionParams;
using kv::AttentionQuery;

enum class NormKind {
  Plain,    // y = x̂ · w        (Gemma 3n/4, Llama, Qwen)
  OnePlus,  // y = x̂ · (1 + w)  (Gemma 1-3)
  NoScale,  // y = x̂            (w ignored)
};

// Rotary embedding frequencies for one layer type, in HF's rotate-half
// layout: pair k rotates dims (k, k + head_dim/2) by angle position·inv_freq[k].
// inv_freq[k] == 0 leaves the pair unchanged (proportional RoPE).
struct RopeFrequencies {
  int head_dim = 0;
  std::vector<float> inv_freq;  // head_dim / 2 entries
};

// What a matmul does with activations that meet bf16 weights.
enum class MatmulPrecision {
  // Activations stay f32 (bf16/f16 weights are widened exactly): faithful to
  // an f32 reference. The default.
  F32,
  // Activations are rounded to bf16 (nearest even) and multiplied with bf16
  // weights in pairs, accumulating in f32 (VDPBF16PS): twice the multiply-add
  // rate of f32 on CPUs with AVX512-BF16, for compute-bound batches. f32 and
  // f16 weights keep the F32 path.
  Bf16,
};
std::string_view matmul_precision_name(MatmulPrecision p);  // "f32", "bf16"
// "f32" or "bf16"; anything else is an Error naming the value.
MatmulPrecision parse_matmul_precision(std::string_view name);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual ThreadPool& pool() = 0;
  virtual MatmulPrecision matmul_precision() const = 0;

  // Makes a checkpoint tensor usable as a weight ([N, K] f32, bf16 or f16).
  // The CPU backend returns the same view; a GPU backend uploads it.
  virtual Tensor prepare_weight(const Tensor& w) = 0;

  // y[m, n] = Σ_k x[m, k] · w[n, k].  x: [M, K] f32; w: [N, K]; y: [M, N] f32;
  // with bf16 w, x is first rounded to bf16 under MatmulPrecision::Bf16.
  virtual void matmul(const Tensor& x, const Tensor& w, Tensor& y) = 0;

  // out[t, :] = table[ids[t], :] · scale (table f32/bf16/f16, out f32).
  virtual void embed(std::span<const int32_t> ids, const Tensor& table, float scale, Tensor& out) = 0;

  // Row-wise RMS norm over the last dimension of x ([M, D] f32); w has D
  // entries (ignored for NoScale). y may be x.
  virtual void rms_norm(const Tensor& x, const Tensor* w, float eps, NormKind kind, Tensor& y) = 0;

  // In-place RoPE of x viewed as [T, heads, head_dim]; positions has T entries.
  virtual void rope(Tensor& x, std::span<const int64_t> positions, const RopeFrequencies& freqs) = 0;

  // out = gelu_tanh(gate) ⊙ up, elementwise; all [M, I] f32. out may alias gate.
  virtual void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;

  // dst = src (same dtype and element count; no overlap).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // y += x (same shape).
  virtual void add(Tensor& y, const Tensor& x) = 0;
  // y *= s.
  virtual void scale(Tensor& y, float s) = 0;
  // y = cap · tanh(y / cap).
  virtual void softcap(Tensor& y, float cap) = 0;

  // out[t] = attention of q[t] ([T, num_heads, head_dim] f32, already rotated)
  // over the keys `queries[t]` may see in layer `layer` of `cache`.
  virtual void attention(const Tensor& q, std::span<const AttentionQuery> queries,
                         const kv::KvCache& cache, int layer, const AttentionParams& params,
                         Tensor& out) = 0;

  // Mixture-of-experts routing: for each row of logits ([T, E] f32) the
  // top_k experts by softmax probability (ties to the lower index), their
  // probabilities renormalised over the k, times per_expert_scale[e] if given.
  // experts and weights are [T, top_k], ordered by descending probability.
  virtual void moe_route(const Tensor& logits, int top_k, const Tensor* per_expert_scale,
                         std::span<int32_t> experts, std::span<float> weights) = 0;

  // dst[i, :] = src[rows[i], :].
  virtual void gather_rows(const Tensor& src, std::span<const int32_t> rows, Tensor& dst) = 0;
  // dst[rows[i], :] += weights[i] · src[i, :], applied in order of i.
  virtual void scatter_add_rows(Tensor& dst, std::span<const int32_t> rows,
                                std::span<const float> weights, const Tensor& src) = 0;
};

// The CPU backend with `threads` threads (0 = one per core).
std::unique_ptr<Backend> make_cpu_backend(int threads = 0, MatmulPrecision precision = MatmulPrecision::F32);

}  // namespace rowlm
