#include "backend/cuda/sampling_kernels.h"

#include "backend/cuda/device_math.cuh"

namespace rowlm::cuda {
namespace {

constexpr int kThreads = 1024;             // one block per row
constexpr int64_t kMassBlock = 1024;       // sampling/logits_processor.h kMassBlock
constexpr int kHalfWarps = kThreads / 16;
constexpr int64_t kTopPBucketedMinSize = 4096;  // sampling/logits_processor.h

// Order-preserving map of a float to an unsigned key (logits_processor.cc).
__device__ __forceinline__ uint32_t sortable_key(float x) {
  const uint32_t u = float_to_bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return bits_to_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The block's reduction scratch, shared by the steps (one at a time).
struct Scratch {
  float v[kThreads];
  int64_t i[kThreads];
};

// exp_blocks' mass of one processed entry (shift 0): 0 below −87.
__device__ __forceinline__ float mass_of(float y) { return y < -87.0f ? 0.0f : exp_neg(y); }

__device__ void remove_below(float* row, int64_t V, float t) {
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    if (row[i] < t) row[i] = -INFINITY;
  __syncthreads();
}

// The row's largest value (NaN aside) and its first index, to every thread.
__device__ void block_argmax(const float* row, int64_t V, float& max, int64_t& index, Scratch& sc) {
  float* s_v = sc.v;
  int64_t* s_i = sc.i;
  float best = -INFINITY;
  int64_t best_i = V;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = row[i];
    if (v > best || (best_i == V && v == best)) best = v, best_i = i;
  }
  const int t = threadIdx.x;
  s_v[t] = best, s_i[t] = best_i;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) {
      const float b = s_v[t + half];
      const int64_t bi = s_i[t + half];
      if (b > s_v[t] || (b == s_v[t] && bi < s_i[t])) s_v[t] = b, s_i[t] = bi;
    }
    __syncthreads();
  }
  max = s_v[0], index = s_i[0];
  __syncthreads();
}

// The k-th largest value of the row (0 < k < V), counting repeats: a radix
// select over the sortable keys, 8 bits a pass. Keys order floats as `<`
// does except that −0 sorts below +0, which `<` calls equal, so the value
// compares as the sampler's heap finds it.
__device__ float kth_largest(const float* row, int64_t V, int64_t k) {
  __shared__ unsigned s_hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int64_t s_k;
  if (threadIdx.x == 0) s_prefix = 0, s_k = k;
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s_hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix;
    // A thread's entries tend to share a bin (most of a row in the first
    // passes): it counts a run of one bin in a register and adds it once.
    uint32_t run_bin = 0;
    unsigned run = 0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      const uint32_t key = sortable_key(row[i]);
      if ((key & mask) != prefix) continue;
      const uint32_t b = (key >> shift) & 255u;
      if (run > 0 && b != run_bin) atomicAdd(&s_hist[run_bin], run), run = 0;
      run_bin = b, ++run;
    }
    if (run > 0) atomicAdd(&s_hist[run_bin], run);
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t left = s_k;
      int b = 255;
      for (; b > 0 && int64_t(s_hist[b]) < left; --b) left -= s_hist[b];
      s_k = left;
      s_prefix = prefix | (uint32_t(b) << shift);
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  return key_value(s_prefix);
}

// sampling/logits_processor.h top_p_mass: mass · 2^36, truncated.
__device__ __forceinline__ uint64_t top_p_mass(float mass) { return uint64_t(mass * 0x1p36f); }

__device__ uint64_t block_sum(uint64_t v, Scratch& sc) {
  auto* s = reinterpret_cast<uint64_t*>(sc.i);
  s[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
    __syncthreads();
  }
  const uint64_t total = s[0];
  __syncthreads();
  return total;
}

// Top-p (logits_processor.cc keep_top_p) on a row whose max is 0: the
// boundary is the largest key K whose entries above the floor with keys >= K
// hold the target mass (the first token, in (value desc, index asc) order,
// at which the host's walk reaches it has that key); a weighted radix
// select, 8 bits a pass, over exact fixed-point sums.
__device__ void keep_top_p(float* row, int64_t V, float p, double log_tail, Scratch& sc) {
  uint64_t local = 0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) local += top_p_mass(mass_of(row[i]));
  const uint64_t total = block_sum(local, sc);
  float floor = -INFINITY;
  if (V >= kTopPBucketedMinSize && p <= 0.999f) {
    const int msb = 63 - __clzll((long long)total);
    floor = float(0.0 + log_tail + 0.69314718055994530942 * double(msb - 36) - 1.0);
  }
  const uint64_t target = uint64_t(double(p) * double(total));
  __shared__ unsigned s_count[256];
  __shared__ uint64_t s_mass[256];
  __shared__ uint32_t s_prefix;
  __shared__ uint64_t s_above;
  __shared__ int s_found;
  if (threadIdx.x == 0) s_prefix = 0, s_above = 0, s_found = 1;
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s_count[b] = 0, s_mass[b] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix;
    // Runs of one bin summed in registers first, as in kth_largest (the
    // sums are exact, so how they are grouped changes nothing).
    uint32_t run_bin = 0;
    unsigned run = 0;
    uint64_t run_mass = 0;
    auto flush = [&] {
      atomicAdd(&s_count[run_bin], run);
      atomicAdd(reinterpret_cast<unsigned long long*>(&s_mass[run_bin]), (unsigned long long)run_mass);
      run = 0, run_mass = 0;
    };
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      const float v = row[i];
      if (!(v > floor)) continue;
      const uint32_t key = sortable_key(v);
      if ((key & mask) != prefix) continue;
      const uint32_t b = (key >> shift) & 255u;
      if (run > 0 && b != run_bin) flush();
      run_bin = b, ++run, run_mass += top_p_mass(mass_of(v));
    }
    if (run > 0) flush();
    __syncthreads();
    if (threadIdx.x == 0) {
      int b = 255;
      for (; b >= 0; --b) {
        if (s_count[b] == 0) continue;
        if (s_above + s_mass[b] >= target) break;
        s_above += s_mass[b];
      }
      if (b < 0) s_found = 0;  // the tokens above the floor hold less: keep everything
      else s_prefix = prefix | (uint32_t(b) << shift);
    }
    mask |= 255u << shift;
    __syncthreads();
    if (!s_found) return;
  }
  remove_below(row, V, key_value(s_prefix));
}

// Each 1024-entry block's sum of exp(x − shift) (0 below −87) by a
// half-warp in the CPU kernels' canonical order (exp_blocks): lane j adds
// the entries ≡ j (mod 16) in rising order, then the tree; then, by thread
// 0, their double total in order, to every thread.
__device__ double block_masses(const float* row, int64_t V, float shift, float* sums) {
  const int64_t blocks = (V + kMassBlock - 1) / kMassBlock;
  const int lane = threadIdx.x & 15, half_warp = threadIdx.x >> 4;
  for (int64_t b = half_warp; b < blocks; b += kHalfWarps) {
    const int64_t end = min(V, (b + 1) * kMassBlock);
    float acc = 0.0f;
    for (int64_t i = b * kMassBlock + lane; i < end; i += 16) acc = acc + mass_of(row[i] - shift);
    acc = half_warp_tree(acc, half_warp_mask());
    if (lane == 0) sums[b] = acc;
  }
  __syncthreads();
  __shared__ double s_total;
  if (threadIdx.x == 0) {
    double total = 0;
    for (int64_t b = 0; b < blocks; ++b) total += double(sums[b]);
    s_total = total;
  }
  __syncthreads();
  const double total = s_total;
  __syncthreads();
  return total;
}

// logprobs.cc's inputs from a raw row: max, the total of exp(x − max), and
// the n most likely entries (value desc, index asc), one block argmax each
// over the entries after the previous one in that order.
__device__ void raw_stats(const float* row, int64_t V, int n, float* sums, RowLogprobStats& out, Scratch& sc) {
  float max;
  int64_t first;
  block_argmax(row, V, max, first, sc);
  const double total = block_masses(row, V, max, sums);
  float* s_v = sc.v;
  int64_t* s_i = sc.i;
  float prev = INFINITY;
  int64_t prev_i = -1;
  const int count = int(min(int64_t(n), V));
  for (int k = 0; k < count; ++k) {
    float best = -INFINITY;
    int64_t best_i = V;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      const float v = row[i];
      const bool after = v < prev || (v == prev && i > prev_i);  // later in (value desc, index asc)
      if (after && (v > best || (v == best && i < best_i))) best = v, best_i = i;
    }
    const int t = threadIdx.x;
    s_v[t] = best, s_i[t] = best_i;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (t < half) {
        const float b = s_v[t + half];
        const int64_t bi = s_i[t + half];
        if (b > s_v[t] || (b == s_v[t] && bi < s_i[t])) s_v[t] = b, s_i[t] = bi;
      }
      __syncthreads();
    }
    prev = s_v[0], prev_i = s_i[0];
    __syncthreads();
    if (t == 0) out.top[k] = int32_t(prev_i), out.top_logit[k] = prev;
  }
  if (threadIdx.x == 0) out.total = total, out.max = max, out.count = count;
  __syncthreads();
}

// The row's argmax code's verdict (backend/argmax_code.h): < 0 for the
// first NaN or +inf, or for no finite entry; 0 for a row fit to sample.
__device__ int32_t block_check(const float* row, int64_t V, Scratch& sc) {
  int64_t* s_bad = sc.i;
  float* s_finite = sc.v;  // 0 or 1
  int64_t bad = 2 * V;
  bool finite = false;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = row[i];
    if (isnan(v) || v == INFINITY) bad = min(bad, 2 * i + (isnan(v) ? 0 : 1));
    finite = finite || isfinite(v);
  }
  const int t = threadIdx.x;
  s_bad[t] = bad, s_finite[t] = finite ? 1.0f : 0.0f;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s_bad[t] = min(s_bad[t], s_bad[t + half]), s_finite[t] = fmaxf(s_finite[t], s_finite[t + half]);
    __syncthreads();
  }
  const int32_t code = s_bad[0] < 2 * V ? int32_t(-2 - s_bad[0]) : s_finite[0] == 0.0f ? -1 : 0;
  __syncthreads();
  return code;
}

// A verifying row's verdict on its processed, filtered row whose masses'
// double total is `total` (row_sampling.h; sampling/speculative.cc
// speculative_accept with q one-hot at the draft): p = mass · float(1 /
// total), as the host's softmax scales them; the draft is kept when p(x)
// >= 1 or u < p(x); else the residual (p with the draft's entry zeroed) is
// drawn from as draw_token does, its block sums in eight double lanes.
// `verdict(token, kept)` is called by thread 0.
template <class Verdict>
__device__ void verify_draft(const float* row, int64_t V, const RowSampling& r, double total, double* lane_sums,
                             Scratch& sc, Verdict&& verdict) {
  const float scale = float(1.0 / total);
  const int64_t x = r.draft;
  const double px = double(mass_of(row[x]) * scale);
  if (px >= 1.0 || r.u * 1.0 < px) {
    if (threadIdx.x == 0) verdict(x, true);
    return;
  }
  auto residual = [&](int64_t i) { return i == x ? 0.0f : mass_of(row[i]) * scale; };
  // draw_token's block sums: block b's lane l adds its entries ≡ l (mod 8)
  // in rising order, in double; the lanes are added in order. Eight
  // threads a block, blockDim / 8 blocks a round.
  const int64_t blocks = (V + kMassBlock - 1) / kMassBlock;
  auto* s_lane = reinterpret_cast<double*>(sc.i);
  const int lane = threadIdx.x & 7;
  for (int64_t base = 0; base < blocks; base += blockDim.x / 8) {
    const int64_t b = base + threadIdx.x / 8;
    double acc = 0.0;
    if (b < blocks) {
      const int64_t end = min(V, (b + 1) * kMassBlock);
      for (int64_t i = b * kMassBlock + lane; i < end; i += 8) acc += double(residual(i));
    }
    s_lane[threadIdx.x] = acc;
    __syncthreads();
    if (lane == 0 && b < blocks) {
      double m = 0.0;
      for (int l = 0; l < 8; ++l) m += s_lane[threadIdx.x + l];
      lane_sums[b] = m;
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  double mass = 0.0;
  for (int64_t b = 0; b < blocks; ++b) mass += lane_sums[b];
  // Nothing left beside the draft: drawn from p, whose only mass it is.
  if (mass <= 0.0) return verdict(x, false);
  // walk_masses over the residual.
  const double target = r.u_residual * mass;
  double cumulative = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    if (cumulative + lane_sums[b] <= target) {
      cumulative += lane_sums[b];
      continue;
    }
    const int64_t end = min(V, (b + 1) * kMassBlock);
    for (int64_t i = b * kMassBlock; i < end; ++i) {
      const float m = residual(i);
      if (m <= 0) continue;
      cumulative += double(m);
      if (cumulative > target) return verdict(i, false);
    }
  }
  for (int64_t i = V - 1; i >= 0; --i)
    if (residual(i) > 0) return verdict(i, false);
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(float* x, int64_t V, const RowSampling* rows, const RowSamplingEdit* edits,
                       const uint64_t* masks, float* block_sums, double* lane_sums, float* copies,
                       int32_t* tokens, RowLogprobStats* stats) {
  __shared__ Scratch sc;
  const RowSampling r = rows[blockIdx.x];
  const float* raw = x + int64_t(r.row) * V;
  float* row = x + int64_t(r.row) * V;
  const int64_t blocks = (V + kMassBlock - 1) / kMassBlock;
  float* sums = block_sums + int64_t(blockIdx.x) * blocks;
  if (r.logprobs >= 0) {
    // The raw row's statistics, then the sampling on a copy.
    raw_stats(raw, V, r.logprobs, sums, stats[blockIdx.x], sc);
    row = copies + int64_t(blockIdx.x) * V;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) row[i] = raw[i];
    __syncthreads();
  }
  // 0. The grammar's mask, then the checks (the host sampler's order).
  if (r.mask_begin >= 0) {
    const uint64_t* words = masks + r.mask_begin;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
      if (!(words[i >> 6] >> (i & 63) & 1)) row[i] = -INFINITY;
    __syncthreads();
  }
  if (const int32_t code = block_check(row, V, sc); code < 0) {
    if (threadIdx.x == 0) tokens[blockIdx.x] = code;
    return;
  }
  // The token, and for a row asking for logprobs its raw logit.
  auto choose = [&](int64_t token) {
    tokens[blockIdx.x] = int32_t(token);
    if (r.logprobs >= 0) stats[blockIdx.x].chosen_logit = raw[token];
  };
  // A verified draft's verdict (row_sampling.h).
  auto verdict = [&](int64_t token, bool kept) {
    choose(token);
    if (!kept) tokens[blockIdx.x] |= kDraftRejected;
  };

  // 1. Bias, repetition, presence and frequency, per distinct id.
  for (int e = r.edits_begin + int(threadIdx.x); e < r.edits_end; e += blockDim.x) {
    const RowSamplingEdit ed = edits[e];
    float v = row[ed.id];
    if (ed.has_bias) v = v + ed.bias;
    if (ed.repeated && r.repetition_penalty != 1.0f) v = v > 0 ? v / r.repetition_penalty : v * r.repetition_penalty;
    if (ed.count > 0 && (r.presence != 0.0f || r.frequency != 0.0f)) v -= r.presence + r.frequency * float(ed.count);
    row[ed.id] = v;
  }
  __syncthreads();

  // 2. Greedy: the first largest value.
  float max;
  int64_t first;
  block_argmax(row, V, max, first, sc);
  if (r.temperature == 0.0f) {
    // Verifying: p is one-hot at `first`, so the draft is kept iff it is
    // `first`, and the residual is one-hot there too.
    if (threadIdx.x == 0) r.draft < 0 ? choose(first) : verdict(first, first == r.draft);
    return;
  }
  // 3. Temperature (the two roundings).
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) row[i] = (row[i] - max) / r.temperature;
  __syncthreads();
  // 4. Top-k, 5. top-p and min-p.
  if (r.top_k > 0 && r.top_k < V) remove_below(row, V, kth_largest(row, V, r.top_k));
  if (r.top_p < 1.0f) keep_top_p(row, V, r.top_p, r.top_p_log_tail, sc);
  if (r.min_p_floor > -INFINITY) remove_below(row, V, r.min_p_floor);

  // 6. The masses (shift 0: the row's max is 0), and the inverse-CDF walk
  // (sampler.cc walk_masses) in double.
  const double total = block_masses(row, V, 0.0f, sums);
  if (r.draft >= 0) return verify_draft(row, V, r, total, lane_sums + int64_t(blockIdx.x) * blocks, sc, verdict);
  if (threadIdx.x != 0) return;
  const double target = r.u * total;
  double cumulative = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    if (cumulative + double(sums[b]) <= target) {
      cumulative += double(sums[b]);
      continue;
    }
    const int64_t end = min(V, (b + 1) * kMassBlock);
    for (int64_t i = b * kMassBlock; i < end; ++i) {
      const float m = mass_of(row[i]);
      if (m <= 0) continue;
      cumulative += double(m);
      if (cumulative > target) {
        choose(i);
        return;
      }
    }
  }
  // Rounding kept the sum at or below the target: the last possible token.
  for (int64_t i = V - 1; i >= 0; --i)
    if (mass_of(row[i]) > 0) {
      choose(i);
      return;
    }
  choose(0);
}

}  // namespace

void sample_rows(float* x, int64_t V, const RowSampling* rows, int64_t n, const RowSamplingEdit* edits,
                 const uint64_t* masks, float* block_sums, double* lane_sums, float* copies, int32_t* tokens,
                 RowLogprobStats* stats, cudaStream_t stream) {
  if (n == 0) return;
  sample_rows_kernel<<<unsigned(n), kThreads, 0, stream>>>(x, V, rows, edits, masks, block_sums, lane_sums, copies,
                                                           tokens, stats);
}

}  // namespace rowlm::cuda
