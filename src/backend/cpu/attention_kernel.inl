// The attention kernel, included once per instruction set inside its own
// namespace (attention_kernel_{portable,avx2,avx512}.cc). Written with GCC
// vector extensions over 16 float lanes; every operation is elementwise IEEE
// arithmetic with the rounding written out (the module builds with
// -ffp-contract=off), so each compilation gives the same bits. Nothing from
// the standard library is instantiated here: an inline function compiled
// for AVX-512 must never be shared with the portable copy.
//
// Per block (one split of the online softmax):
//   1. dequantize the block's keys into a feature-major tile kt[d][slot]
//      (16 slots per vector) and its values into vt[slot][d];
//   2. per query head: score lanes s[slot] = Σ_d q[d]·kt[d][slot], summed in
//      four interleaved partial sums (d mod 4) combined as (a0+a1)+(a2+a3),
//      times scale, optional softcap, slots outside [lo, hi] masked;
//   3. m' = max(m, max s), α = exp(m − m'), p = exp(s − m'),
//      l = l·α + Σ p (slot order), acc = acc·α + Σ p·v (slot order).
// Output = acc / l.
// run_kernel does step 1 and then steps 2-3 block by block in one scratch
// tile; run_tile (step 1 into a tile of its own) and run_fold (steps 2-3
// over tiles already made) split the same operations over the thread pool
// when few (query token, kv head) pairs would otherwise repeat step 1 per
// group of heads. The values folded and the operations are the same.

// 64-byte vectors in files built without AVX-512 only change the ABI of
// these internal (file-local) functions, which nothing outside calls.
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef uint32_t vu __attribute__((vector_size(64)));
typedef uint16_t vh __attribute__((vector_size(32)));
typedef uint8_t vb __attribute__((vector_size(16)));

static inline vf splat(float x) {
  vf v = {};
  return v + x;
}
static inline vu splatu(uint32_t x) {
  vu v = {};
  return v + x;
}
static inline vf loadf(const float* p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void storef(float* p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf as_float(vu u) {
  vf f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline vu as_uint(vf f) {
  vu u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float bf16_scalar(const std::byte* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  const uint32_t u = uint32_t(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// n (<= 16) consecutive 16-bit / 8-bit / 32-bit lanes, zero beyond n. The
// full-width case is a fixed-size copy (one vector load); a partial one goes
// through a zeroed buffer.
static inline vu load_u16(const std::byte* p, int n) {
  vh h = {};
  if (n == 16) memcpy(&h, p, sizeof h);
  else for (int i = 0; i < n; ++i) memcpy(reinterpret_cast<uint16_t*>(&h) + i, p + 2 * i, 2);
  return __builtin_convertvector(h, vu);
}
static inline vu load_u8(const std::byte* p, int n) {
  vb b = {};
  if (n == 16) memcpy(&b, p, sizeof b);
  else for (int i = 0; i < n; ++i) memcpy(reinterpret_cast<uint8_t*>(&b) + i, p + i, 1);
  // Through 16 bits: GCC 12 widens u8 -> u16 -> u32 with vector moves, but
  // u8 -> u32 directly lane by lane.
  return __builtin_convertvector(__builtin_convertvector(b, vh), vu);
}
static inline vf load_f32(const std::byte* p, int n) {
  vf f = {};
  if (n == 16) memcpy(&f, p, sizeof f);
  else for (int i = 0; i < n; ++i) memcpy(reinterpret_cast<float*>(&f) + i, p + 4 * i, 4);
  return f;
}

static inline vf from_bf16(vu h) { return as_float(h << 16); }

// Exact binary16 -> binary32, as rowlm::f16_to_f32.
static inline vf from_f16(vu h) {
  const vu sign = (h & 0x8000u) << 16;
  const vu em = h & 0x7fffu;
  vu normal = (em << 13) + splatu((127u - 15u) << 23);
  normal = (em >= 0x7c00u) ? normal + splatu((128u - 16u) << 23) : normal;
  const vf sub = __builtin_convertvector((vi)em, vf) * splat(5.9604644775390625e-08f);  // em · 2^-24, exact
  const vu mag = (em < 0x0400u) ? as_uint(sub) : normal;
  return as_float(mag | sign);
}

static inline vf codes_to_float(vu c) { return __builtin_convertvector((vi)c, vf); }

// exp for x <= 0 (Cody-Waite reduction, Cephes' degree-6 polynomial); 0
// below -87.3. Every step is an elementwise mul/add/sub/convert.
static inline vf vexp(vf x) {
  const vf lo = splat(-87.3365447f);
  const vf hi = splat(88.3762626f);
  vf xc = (x < lo) ? lo : x;
  xc = (xc > hi) ? hi : xc;
  const vf magic = splat(12582912.0f);  // 1.5 · 2^23: adding it rounds to an integer
  vf n = xc * splat(1.44269504088896341f) + magic;
  n = n - magic;
  vf r = xc - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  vf p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  vf y = p * (r * r) + r;
  y = y + splat(1.0f);
  const vi e = __builtin_convertvector(n, vi) + 127;
  y = y * as_float((vu)(e << 23));
  return (x < lo) ? splat(0.0f) : y;
}

static inline float lane(vf v, int i) {
  float a[16];
  memcpy(a, &v, sizeof a);
  return a[i];
}

// Keys of chunk c (slots 16c .. 16c+15) of one kv head, feature-major.
template <Codec C>
static void key_tile(const AttentionLayer& L, const std::byte* kh, int c, float* kt) {
  const int bs = L.block_size;
  const int n = bs - 16 * c < 16 ? bs - 16 * c : 16;
  const std::size_t base = std::size_t(16 * c);
  const int stride = L.chunks * 16;  // floats between feature rows of the tile
  float* dst = kt + 16 * c;
  if constexpr (C == Codec::F32) {
    for (int d = 0; d < L.head_dim; ++d) storef(dst + d * stride, load_f32(kh + (std::size_t(d) * bs + base) * 4, n));
  } else if constexpr (C == Codec::BF16) {
    for (int d = 0; d < L.head_dim; ++d)
      storef(dst + d * stride, from_bf16(load_u16(kh + (std::size_t(d) * bs + base) * 2, n)));
  } else if constexpr (C == Codec::F16) {
    for (int d = 0; d < L.head_dim; ++d)
      storef(dst + d * stride, from_f16(load_u16(kh + (std::size_t(d) * bs + base) * 2, n)));
  } else {
    for (int g = 0; g < L.groups; ++g) {
      const vf s = from_bf16(load_u16(kh + L.k_scales_offset + (std::size_t(g) * bs + base) * 2, n));
      const vf b = from_bf16(load_u16(kh + L.k_biases_offset + (std::size_t(g) * bs + base) * 2, n));
      const int d0 = g * L.group_size;
      if constexpr (C == Codec::Q8) {
        for (int d = d0; d < d0 + L.group_size; ++d) {
          const vf q = codes_to_float(load_u8(kh + std::size_t(d) * bs + base, n));
          storef(dst + d * stride, s * q + b);
        }
      } else {
        for (int d = d0; d < d0 + L.group_size; d += 2) {
          const vu pair = load_u8(kh + std::size_t(d / 2) * bs + base, n);
          storef(dst + d * stride, s * codes_to_float(pair & 15u) + b);
          storef(dst + (d + 1) * stride, s * codes_to_float(pair >> 4) + b);
        }
      }
    }
  }
}

// The value record of one slot, as hd16 floats (zero beyond head_dim).
template <Codec C>
static void value_row(const AttentionLayer& L, const std::byte* rec, float* dst) {
  const int hd = L.head_dim;
  if constexpr (C == Codec::F32) {
    for (int d = 0; d < hd; d += 16) storef(dst + d, load_f32(rec + std::size_t(d) * 4, hd - d < 16 ? hd - d : 16));
  } else if constexpr (C == Codec::BF16) {
    for (int d = 0; d < hd; d += 16)
      storef(dst + d, from_bf16(load_u16(rec + std::size_t(d) * 2, hd - d < 16 ? hd - d : 16)));
  } else if constexpr (C == Codec::F16) {
    for (int d = 0; d < hd; d += 16)
      storef(dst + d, from_f16(load_u16(rec + std::size_t(d) * 2, hd - d < 16 ? hd - d : 16)));
  } else {
    for (int g = 0; g < L.groups; ++g) {
      const vf s = splat(bf16_scalar(rec + L.value_bytes + std::size_t(g) * 2));
      const vf b = splat(bf16_scalar(rec + L.value_bytes + std::size_t(L.groups + g) * 2));
      for (int d = g * L.group_size; d < (g + 1) * L.group_size; d += 16) {
        vu c;
        if constexpr (C == Codec::Q8) {
          c = load_u8(rec + d, 16);
        } else {
          // Two packed words hold features d..d+7 and d+8..d+15, code j of
          // a word in bits [4j, 4j+4).
          uint32_t w[2];
          memcpy(w, rec + d / 2, 8);
          const vi low_half = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
          const vu words = low_half ? splatu(w[0]) : splatu(w[1]);
          const vu shift = {0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28};
          c = (words >> shift) & 15u;
        }
        storef(dst + d, s * codes_to_float(c) + b);
      }
    }
  }
}

static float* align16(float* p) {
  const std::uintptr_t u = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<float*>((u + 63) & ~std::uintptr_t(63));
}

// Score lanes of one 16-slot chunk for `nh` (1 or 2) heads at once; each
// head's sum is its own: four partial sums over d mod 4, (a0+a1)+(a2+a3).
template <int NH>
__attribute__((noinline)) static void chunk_scores(const float* q, int hd4, const float* k, int stride, vf* out) {
  vf a[NH][4] = {};
  for (int d = 0; d < hd4; d += 4) {
    const vf k0 = loadf(k + d * stride), k1 = loadf(k + (d + 1) * stride);
    const vf k2 = loadf(k + (d + 2) * stride), k3 = loadf(k + (d + 3) * stride);
    for (int h = 0; h < NH; ++h) {
      const float* qh = q + h * hd4;
      a[h][0] = a[h][0] + splat(qh[d]) * k0;
      a[h][1] = a[h][1] + splat(qh[d + 1]) * k1;
      a[h][2] = a[h][2] + splat(qh[d + 2]) * k2;
      a[h][3] = a[h][3] + splat(qh[d + 3]) * k3;
    }
  }
  for (int h = 0; h < NH; ++h) out[h] = (a[h][0] + a[h][1]) + (a[h][2] + a[h][3]);
}

// acc = acc * alpha + Σ_{i = s0..s1} p[i] · v[i], in slot order per lane.
__attribute__((noinline)) static void accumulate(float* acc, int hd16, float alpha, const float* p, int s0, int s1,
                                                 const float* vt) {
  int d = 0;
  for (; d + 64 <= hd16; d += 64) {
    vf x0 = loadf(acc + d) * alpha, x1 = loadf(acc + d + 16) * alpha;
    vf x2 = loadf(acc + d + 32) * alpha, x3 = loadf(acc + d + 48) * alpha;
    for (int i = s0; i <= s1; ++i) {
      const float* v = vt + std::size_t(i) * hd16 + d;
      const vf w = splat(p[i]);
      x0 = x0 + w * loadf(v);
      x1 = x1 + w * loadf(v + 16);
      x2 = x2 + w * loadf(v + 32);
      x3 = x3 + w * loadf(v + 48);
    }
    storef(acc + d, x0);
    storef(acc + d + 16, x1);
    storef(acc + d + 32, x2);
    storef(acc + d + 48, x3);
  }
  for (; d < hd16; d += 16) {
    vf x = loadf(acc + d) * alpha;
    for (int i = s0; i <= s1; ++i) x = x + splat(p[i]) * loadf(vt + std::size_t(i) * hd16 + d);
    storef(acc + d, x);
  }
}

// Folds one head's block scores (chunks c0..c1 in sc) into its running max m,
// sum l and accumulator.
static void softmax_update(float* sc, int c0, int c1, int s0, int s1, float& m, float& l, float* acc, int hd16,
                           const float* vt) {
  float mx = -__builtin_inff();
  for (int i = s0; i <= s1; ++i) mx = mx < sc[i] ? sc[i] : mx;
  const float m_new = m < mx ? mx : m;
  const float alpha = m == -__builtin_inff() ? 0.0f : lane(vexp(splat(m - m_new)), 0);
  for (int c = c0; c <= c1; ++c) storef(sc + 16 * c, vexp(loadf(sc + 16 * c) - m_new));
  l = l * alpha;
  for (int i = s0; i <= s1; ++i) l = l + sc[i];
  m = m_new;
  accumulate(acc, hd16, alpha, sc, s0, s1, vt);
}

// Step 1 for one block: keys of chunks c0..c1 into kt (feature rows
// head_dim..hd4-1 zero, so the padded query lanes multiply zeros) and the
// value records of slots s0..s1 into vt. Slots of those chunks outside
// [s0, s1] hold whatever the block holds there; their scores are masked.
template <Codec C>
static void block_tile(const AttentionLayer& L, const std::byte* blk, int kv_head, int s0, int s1, float* kt,
                       float* vt) {
  const int stride = L.chunks * 16;
  for (int d = L.head_dim; d < L.hd4; ++d)
    for (int i = 0; i < stride; ++i) kt[d * stride + i] = 0.0f;
  const std::byte* kh = blk + std::size_t(kv_head) * L.k_head_bytes;
  const std::byte* vhd = blk + L.k_bytes + std::size_t(kv_head) * L.v_head_bytes;
  for (int c = s0 / 16; c <= s1 / 16; ++c) key_tile<C>(L, kh, c, kt);
  for (int s = s0; s <= s1; ++s) value_row<C>(L, vhd + std::size_t(s) * L.head_bytes, vt + std::size_t(s) * L.hd16);
}

// The running state of `heads` query heads: padded queries, accumulators,
// two heads' score lanes, and m, l per head (attention_fold_state_floats).
struct FoldState {
  float* qp;
  float* acc;
  float* sc;
  float* ml;
};

static FoldState fold_state(const AttentionLayer& L, int heads, float* state) {
  FoldState f;
  f.qp = state;
  f.acc = f.qp + std::size_t(heads) * L.hd4;
  f.sc = f.acc + std::size_t(heads) * L.hd16;
  f.ml = f.sc + 2 * std::size_t(L.chunks) * 16;
  return f;
}

static void fold_init(const AttentionLayer& L, const float* q, int heads, const FoldState& f) {
  const int hd = L.head_dim, hd4 = L.hd4, hd16 = L.hd16;
  for (int h = 0; h < heads; ++h) {
    for (int d = 0; d < hd4; ++d) f.qp[h * hd4 + d] = d < hd ? q[h * hd + d] : 0.0f;
    for (int d = 0; d < hd16; ++d) f.acc[h * hd16 + d] = 0.0f;
    f.ml[2 * h] = -__builtin_inff();
    f.ml[2 * h + 1] = 0.0f;
  }
}

// Steps 2 and 3 for one block's tile (slots s0..s1), every head.
static void fold_block(const AttentionLayer& L, int heads, float scale, float softcap, const float* kt,
                       const float* vt, int s0, int s1, const FoldState& f) {
  const int hd4 = L.hd4, hd16 = L.hd16, H = heads;
  const int stride = L.chunks * 16;
  const int c0 = s0 / 16, c1 = s1 / 16;
  const vi slot_of_lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (int h = 0; h < H; h += 2) {
    const int nh = H - h >= 2 ? 2 : 1;
    for (int c = c0; c <= c1; ++c) {
      vf s[2];
      if (nh == 2) chunk_scores<2>(f.qp + h * hd4, hd4, kt + 16 * c, stride, s);
      else chunk_scores<1>(f.qp + h * hd4, hd4, kt + 16 * c, stride, s);
      const vi slot = slot_of_lane + 16 * c;
      for (int j = 0; j < nh; ++j) {
        vf x = s[j] * scale;
        if (softcap > 0.0f) {
          float t[16];
          memcpy(t, &x, sizeof t);
          for (int i = 0; i < 16; ++i) t[i] = softcap * ::tanhf(t[i] / softcap);
          memcpy(&x, t, sizeof t);
        }
        x = ((slot < s0) | (slot > s1)) ? splat(-__builtin_inff()) : x;
        storef(f.sc + j * stride + 16 * c, x);
      }
    }
    for (int j = 0; j < nh; ++j)
      softmax_update(f.sc + j * stride, c0, c1, s0, s1, f.ml[2 * (h + j)], f.ml[2 * (h + j) + 1],
                     f.acc + std::size_t(h + j) * hd16, hd16, vt);
  }
}

static void fold_finish(const AttentionLayer& L, int heads, const FoldState& f, float* out) {
  const int hd = L.head_dim, hd16 = L.hd16;
  for (int h = 0; h < heads; ++h) {
    const float l = f.ml[2 * h + 1];
    for (int d = 0; d < hd; ++d) out[h * hd + d] = f.acc[h * hd16 + d] / l;
  }
}

// Slots of block b that [lo, hi] covers.
static void block_slots(int64_t b, int64_t lo, int64_t hi, int bs, int& s0, int& s1) {
  s0 = b == lo / bs ? int(lo % bs) : 0;
  s1 = b == hi / bs ? int(hi % bs) : bs - 1;
}

// One phase: each block converted into the scratch tile, then folded.
template <Codec C>
static void run_codec(const AttentionLayer& L, const AttentionWork& W, float* scratch) {
  const int bs = L.block_size;
  const int stride = L.chunks * 16;
  float* kt = align16(scratch);
  float* vt = kt + std::size_t(L.hd4) * stride;
  const FoldState f = fold_state(L, W.heads, vt + std::size_t(bs) * L.hd16);
  fold_init(L, W.q, W.heads, f);
  for (int64_t b = W.lo / bs; b <= W.hi / bs; ++b) {
    int s0, s1;
    block_slots(b, W.lo, W.hi, bs, s0, s1);
    block_tile<C>(L, W.blocks[W.table[b]], W.kv_head, s0, s1, kt, vt);
    fold_block(L, W.heads, W.scale, W.softcap, kt, vt, s0, s1, f);
  }
  fold_finish(L, W.heads, f, W.out);
}

static void run_kernel(const AttentionLayer& L, const AttentionWork& W, float* scratch) {
  switch (L.codec) {
    case Codec::F32: return run_codec<Codec::F32>(L, W, scratch);
    case Codec::BF16: return run_codec<Codec::BF16>(L, W, scratch);
    case Codec::F16: return run_codec<Codec::F16>(L, W, scratch);
    case Codec::Q8: return run_codec<Codec::Q8>(L, W, scratch);
    case Codec::Q4: return run_codec<Codec::Q4>(L, W, scratch);
  }
}

// Two phases, step 1: one block's tile (attention_tile_floats) at W.tile.
template <Codec C>
static void tile_codec(const AttentionLayer& L, const AttentionTileWork& W) {
  int s0, s1;
  block_slots(W.block, W.lo, W.hi, L.block_size, s0, s1);
  float* kt = W.tile;
  block_tile<C>(L, W.bytes, W.kv_head, s0, s1, kt, kt + std::size_t(L.hd4) * L.chunks * 16);
}

static void run_tile(const AttentionLayer& L, const AttentionTileWork& W) {
  switch (L.codec) {
    case Codec::F32: return tile_codec<Codec::F32>(L, W);
    case Codec::BF16: return tile_codec<Codec::BF16>(L, W);
    case Codec::F16: return tile_codec<Codec::F16>(L, W);
    case Codec::Q8: return tile_codec<Codec::Q8>(L, W);
    case Codec::Q4: return tile_codec<Codec::Q4>(L, W);
  }
}

// Two phases, steps 2-3: blocks first_block..last_block of [lo, hi] folded
// from their tiles, into the state that persists between windows.
static void run_fold(const AttentionLayer& L, const AttentionFoldWork& W) {
  const int bs = L.block_size;
  const FoldState f = fold_state(L, W.heads, W.state);
  if (W.first_block == W.lo / bs) fold_init(L, W.q, W.heads, f);
  const std::size_t vt_offset = std::size_t(L.hd4) * L.chunks * 16;
  for (int64_t b = W.first_block; b <= W.last_block; ++b) {
    int s0, s1;
    block_slots(b, W.lo, W.hi, bs, s0, s1);
    const float* kt = W.tiles + std::size_t(b - W.first_block) * W.tile_stride;
    fold_block(L, W.heads, W.scale, W.softcap, kt, kt + vt_offset, s0, s1, f);
  }
  if (W.last_block == W.hi / bs) fold_finish(L, W.heads, f, W.out);
}
