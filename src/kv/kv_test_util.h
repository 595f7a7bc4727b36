#pragma once
// Helpers shared by the kv module's tests: deterministic K/V, a dense
// single-row oracle, and a double-precision reference attention.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "kvcodec/codec.h"
#include "kv/kv_cache.h"
#include "kv/row_cache.h"

namespace rowlm::kv::testing {

// The CPU backend the kv tests run on (two threads). Shared by the tests of a
// binary: it keeps no state between operations that a test could leave for
// another (each cache has its own arenas).
inline Backend& backend() {
  static const std::unique_ptr<Backend> cpu = make_cpu_backend(2);
  return *cpu;
}

// Host data as a tensor of the CPU backend (whose device is the host).
inline Tensor host_view(const float* data, Shape shape) { return Tensor::view(DType::F32, std::move(shape), data, nullptr); }

// Writes `count` tokens of host K/V ([count, kv_heads, head_dim] each) to one
// row of `layer` in the open step.
inline void write_host(KvCache& cache, int layer, RowId row, int64_t first, int count, const float* k, const float* v) {
  const LayerSpec& spec = cache.layer(layer);
  const Shape shape = {int64_t(count), int64_t(spec.kv_heads) * spec.head_dim};
  const TokenRun run{row, first, count};
  cache.write(layer, {&run, 1}, host_view(k, shape), host_view(v, shape));
}

// Attention of host queries ([n, heads, head_dim]) into host `out`.
inline void attend_host(const KvCache& cache, int layer, std::span<const AttentionQuery> queries, const float* q,
                        const AttentionParams& p, float* out) {
  const Shape shape = {int64_t(queries.size()), int64_t(p.num_heads) * p.head_dim};
  Tensor o = host_view(out, shape);
  cache.attend(layer, queries, host_view(q, shape), p, o);
}

// Deterministic pseudo-random floats from a seed (splitmix64).
inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline float unit_float(uint64_t& s) { return float(int64_t(splitmix(s) >> 40) - (int64_t(1) << 23)) / float(1 << 23); }

// K and V of `count` tokens for one layer: [count, kv_heads, head_dim] each,
// a function of (seed, layer, position) only.
inline void make_kv(const LayerSpec& spec, uint64_t seed, int layer, int64_t first, int count, std::vector<float>& k,
                    std::vector<float>& v) {
  const std::size_t per = std::size_t(spec.kv_heads) * std::size_t(spec.head_dim);
  k.resize(per * std::size_t(count));
  v.resize(per * std::size_t(count));
  for (int t = 0; t < count; ++t) {
    uint64_t s = seed * 0x100000001b3ull + uint64_t(layer) * 7919 + uint64_t(first + t) * 104729;
    for (std::size_t i = 0; i < per; ++i) {
      k[std::size_t(t) * per + i] = 2.0f * unit_float(s) + 0.25f * float(i % 7);
      v[std::size_t(t) * per + i] = 3.0f * unit_float(s);
    }
  }
}

// Appends `count` tokens to `row` in every layer with make_kv(seed).
inline void append(KvCache& cache, RowId row, int count, uint64_t seed) {
  const int32_t c = count;
  cache.begin_step({&row, 1}, {&c, 1});
  const int64_t first = cache.length(row);
  std::vector<float> k, v;
  for (int l = 0; l < cache.num_layers(); ++l) {
    make_kv(cache.layer(l), seed, l, first, count, k, v);
    write_host(cache, l, row, first, count, k.data(), v.data());
  }
  cache.end_step();
}

// The canonical record of a token built directly from f32 K/V.
inline std::vector<std::byte> encode_record(const LayerSpec& spec, const float* k, const float* v) {
  const HeadFormat f = head_format(spec);
  std::vector<std::byte> rec(token_record_bytes(spec));
  for (int h = 0; h < spec.kv_heads; ++h) {
    encode_head(f, k + std::size_t(h) * spec.head_dim, rec.data() + std::size_t(h) * f.head_bytes);
    encode_head(f, v + std::size_t(h) * spec.head_dim, rec.data() + std::size_t(spec.kv_heads + h) * f.head_bytes);
  }
  return rec;
}

// The record as the row stores it (in the switch codec once it switched precision).
inline std::vector<std::byte> read_record(const KvCache& cache, int layer, RowId row, int64_t pos) {
  std::vector<std::byte> rec(token_record_bytes(cache.row_layer(row, layer)));
  cache.read_token(layer, row, pos, rec);
  return rec;
}

// Decoded (dequantized) K and V of one stored token: [kv_heads][head_dim] each.
inline void decode_record(const LayerSpec& spec, const std::byte* rec, std::vector<float>& k, std::vector<float>& v) {
  const HeadFormat f = head_format(spec);
  k.resize(std::size_t(spec.kv_heads) * spec.head_dim);
  v.resize(k.size());
  for (int h = 0; h < spec.kv_heads; ++h) {
    decode_head(f, rec + std::size_t(h) * f.head_bytes, k.data() + std::size_t(h) * spec.head_dim);
    decode_head(f, rec + std::size_t(spec.kv_heads + h) * f.head_bytes, v.data() + std::size_t(h) * spec.head_dim);
  }
}

// Dense double-precision attention over the stored (decoded) K/V, read back
// token by token: the reference the block kernel must match.
inline std::vector<double> reference_attention(const KvCache& cache, int layer, const AttentionQuery& aq,
                                               const float* q, const AttentionParams& p) {
  const LayerSpec& spec = cache.row_layer(aq.row, layer);
  const int H = p.num_heads, hd = p.head_dim, G = H / spec.kv_heads;
  int64_t lo = p.window ? std::max<int64_t>(0, aq.position - p.window + 1) : 0;
  int64_t hi = aq.key_limit >= 0 ? std::min(aq.position, aq.key_limit - 1) : aq.position;
  std::vector<double> out(std::size_t(H) * hd, 0.0);
  if (hi < lo) return out;
  std::vector<std::vector<float>> ks, vs;
  for (int64_t j = lo; j <= hi; ++j) {
    std::vector<float> k, v;
    const auto rec = read_record(cache, layer, aq.row, j);
    decode_record(spec, rec.data(), k, v);
    ks.push_back(k);
    vs.push_back(v);
  }
  for (int h = 0; h < H; ++h) {
    const int g = h / G;
    std::vector<double> s(ks.size());
    double mx = -INFINITY;
    for (std::size_t j = 0; j < ks.size(); ++j) {
      double dot = 0;
      for (int d = 0; d < hd; ++d) dot += double(q[h * hd + d]) * double(ks[j][std::size_t(g * hd + d)]);
      dot *= double(p.scale);
      if (p.softcap > 0) dot = double(p.softcap) * std::tanh(dot / double(p.softcap));
      s[j] = dot;
      mx = std::max(mx, dot);
    }
    double l = 0;
    for (double& x : s) l += (x = std::exp(x - mx));
    for (std::size_t j = 0; j < ks.size(); ++j)
      for (int d = 0; d < hd; ++d) out[std::size_t(h * hd + d)] += s[j] / l * double(vs[j][std::size_t(g * hd + d)]);
  }
  return out;
}

inline CacheOptions options_for(std::vector<LayerSpec> layers, int block_size = 16, std::size_t capacity = 0,
                                std::size_t prefix_bytes = 0) {
  CacheOptions o;
  o.layers = std::move(layers);
  o.block_size = block_size;
  o.capacity_bytes = capacity;
  o.prefix_cache_bytes = prefix_bytes;
  return o;
}

// A record of `from` as `to` would store the same values: decoded, then
// encoded again (what a precision switch does to a stored position).
inline std::vector<std::byte> reencode_record(const LayerSpec& from, const LayerSpec& to, const std::byte* rec) {
  std::vector<float> k, v;
  decode_record(from, rec, k, v);
  return encode_record(to, k.data(), v.data());
}

inline LayerSpec layer_spec(int kv_heads, int head_dim, int window, const char* codec) {
  LayerSpec s;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.window = window;
  s.codec = parse_codec(codec);
  return s;
}

// The first f32 of the K record at (layer, row, pos): the tag the tests write there.
inline float stored(const KvCache& c, int layer, RowId row, int64_t pos) {
  const auto rec = read_record(c, layer, row, pos);
  float k;
  std::memcpy(&k, rec.data(), 4);
  return k;
}

// Retires every row and empties the prefix cache; then nothing may be held.
inline void expect_drained(KvCache& c) {
  for (RowId r : c.row_ids()) c.retire(r);
  c.clear_prefix_cache();
  EXPECT_EQ(c.used_bytes(), 0u);
  EXPECT_EQ(c.prefix_cache_blocks(), 0);
  for (int l = 0; l < c.num_layers(); ++l) EXPECT_EQ(c.blocks_in_use(l), 0);
  c.check_consistency();
}

}  // namespace rowlm::kv::testing
