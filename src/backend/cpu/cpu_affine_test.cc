// Affine-quantized weights (MLX layout) on every CPU path: matmul, the
// embedding lookup and MoE experts against the canonical order on the
// values quant::dequantize gives, bit for bit, for every bit width, group
// size, parameter dtype, batch size, ISA and thread count. (4-bit codes go
// through prepare_weight, which reorders them for the kernels; the oracle
// reads the checkpoint's stream order.)

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/test_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/affine.h"

namespace rowlm {
namespace {

using testing::all_backends;
using testing::copy_of;
using testing::expect_bitwise;
using testing::oracle_matmul;
using testing::random_f32;

// A [rows, cols] weight quantized by quant::quantize row by row from random
// values, with its parameters stored as `params`.
Weight random_affine(int64_t rows, int64_t cols, int bits, int group, DType params, std::mt19937& rng) {
  const Tensor w = random_f32({rows, cols}, rng, 0.5f);
  Weight q;
  q.format = WeightFormat::Affine;
  q.rows = rows;
  q.cols = cols;
  q.bits = bits;
  q.group_size = group;
  q.values = Tensor(DType::U32, {rows, cols * bits / 32});
  q.scales = Tensor(params, {rows, cols / group});
  q.biases = Tensor(params, {rows, cols / group});
  const std::size_t words = std::size_t(cols * bits / 32), param_bytes = dtype_size(params) * std::size_t(cols / group);
  for (int64_t r = 0; r < rows; ++r)
    quant::quantize({w.data<float>() + r * cols, std::size_t(cols)}, {bits, group}, params,
                    {q.values.data<uint32_t>() + r * int64_t(words), words},
                    static_cast<std::byte*>(q.scales.raw()) + std::size_t(r) * param_bytes,
                    static_cast<std::byte*>(q.biases.raw()) + std::size_t(r) * param_bytes);
  return q;
}

// The dequantized matrix, by the shared codec (quant/affine.h), row-major.
std::vector<float> dequantized(const Weight& w) {
  std::vector<float> out(std::size_t(w.rows * w.cols));
  const int64_t words = w.cols * w.bits / 32, groups = w.cols / w.group_size;
  const std::size_t param_bytes = dtype_size(w.scales.dtype()) * std::size_t(groups);
  for (int64_t r = 0; r < w.rows; ++r)
    quant::dequantize({w.values.data<uint32_t>() + r * words, std::size_t(words)},
                      static_cast<const std::byte*>(w.scales.raw()) + std::size_t(r) * param_bytes,
                      static_cast<const std::byte*>(w.biases.raw()) + std::size_t(r) * param_bytes, w.scales.dtype(),
                      {w.bits, w.group_size}, {out.data() + r * w.cols, std::size_t(w.cols)});
  return out;
}

std::string label(const Weight& w, int64_t M) {
  return w.describe() + " " + std::string(dtype_name(w.scales.dtype())) + " params, M=" + std::to_string(M);
}

// Every width and group on every ISA and thread count; M from 1 (decode,
// codes dequantized in registers) past the tile height (batched, tiles
// dequantized once); N leaving remainders after every tile width; K of a
// few groups and of more than a tile's parameter buffer holds.
TEST(CpuAffine, MatmulIsTheCanonicalOrderOnTheDequantizedWeights) {
  std::mt19937 rng(21);
  auto backends = all_backends();
  struct Case {
    int bits, group;
    DType params;
    int64_t K, N;
  };
  const Case cases[] = {{4, 64, DType::BF16, 256, 29}, {4, 32, DType::F16, 160, 13},  {4, 128, DType::F32, 384, 7},
                        {8, 64, DType::BF16, 192, 23}, {8, 16, DType::F32, 80, 9},    {8, 128, DType::F16, 256, 5},
                        {2, 32, DType::BF16, 128, 11}, {3, 32, DType::BF16, 96, 10},  {5, 64, DType::F16, 128, 9},
                        {6, 16, DType::F32, 96, 17},   {3, 128, DType::F32, 256, 3},  {4, 16, DType::F32, 48, 31},
                        {5, 32, DType::BF16, 160, 6},  {6, 128, DType::BF16, 128, 4}, {2, 16, DType::F16, 64, 8},
                        // Rows of more groups than a tile widens at once (AffineTileParams: 64),
                        // the last batch partial: 70, 130 and 67 groups.
                        {4, 32, DType::F16, 2240, 9},  {8, 16, DType::BF16, 2080, 5}, {5, 32, DType::F32, 2144, 3}};
  for (const Case& c : cases) {
    const Weight w = random_affine(c.N, c.K, c.bits, c.group, c.params, rng);
    const auto values = dequantized(w);
    for (int64_t M : {1, 2, 3, 4, 5, 9, 33}) {
      const Tensor x = random_f32({M, c.K}, rng);
      const auto want = oracle_matmul(x, values, c.N);
      for (auto& b : backends) {
        Tensor y(DType::F32, {M, c.N});
        b.backend->matmul(x, b.backend->prepare_weight(w), y);
        expect_bitwise(y, want, b.label() + " " + label(w, M));
      }
    }
  }
}

// Large enough for the threaded schedule; small chunks force many chunks
// and splits of M, in both the decode and the batched kernel.
TEST(CpuAffine, AnyChunkingGivesTheSameBits) {
  std::mt19937 rng(22);
  const int64_t K = 512, N = 150;
  for (int bits : {4, 8, 3}) {
    const Weight source = random_affine(N, K, bits, 64, DType::BF16, rng);
    const auto values = dequantized(source);
    const Weight w = make_cpu_backend(1)->prepare_weight(source);
    const cpu::AffineRows rows{w.values.data<uint32_t>(), w.values.dim(1), w.scales.raw(), w.biases.raw(),
                               w.scales.dim(1), w.scales.dtype(), bits, 64};
    for (int64_t M : {1, 2, 37}) {
      const Tensor x = random_f32({M, K}, rng);
      const auto want = oracle_matmul(x, values, N);
      for (cpu::Isa isa : cpu::supported_isas()) {
        ThreadPool pool(2);
        for (int64_t chunk_bytes : {int64_t(1), int64_t(4096), int64_t(1) << 20}) {
          Tensor y(DType::F32, {M, N});
          cpu::matmul_affine(cpu::kernels_for(isa), pool, x.data<float>(), M, K, rows, N, y.data<float>(),
                             cpu::MatmulTuning{chunk_bytes});
          expect_bitwise(y, want, std::string(cpu::isa_name(isa)) + " " + label(w, M) +
                                      " chunk_bytes=" + std::to_string(chunk_bytes));
        }
      }
    }
  }
}

// Under the bf16 matmul precision affine weights keep f32 activations.
TEST(CpuAffine, Bf16PrecisionKeepsF32Activations) {
  std::mt19937 rng(23);
  const Weight w = random_affine(19, 128, 4, 64, DType::BF16, rng);
  const Tensor x = random_f32({3, 128}, rng);
  const auto want = oracle_matmul(x, dequantized(w), 19);
  for (cpu::Isa isa : cpu::supported_isas()) {
    auto b = make_cpu_backend(1, isa, MatmulPrecision::Bf16);
    Tensor y(DType::F32, {3, 19});
    b->matmul(x, b->prepare_weight(w), y);
    expect_bitwise(y, want, std::string(cpu::isa_name(isa)));
  }
}

TEST(CpuAffine, EmbedIsTheDequantizedRowTimesTheScale) {
  std::mt19937 rng(24);
  auto backends = all_backends();
  for (int bits : {4, 8, 6}) {
    const Weight table = random_affine(50, 96, bits, 32, DType::BF16, rng);
    const auto values = dequantized(table);
    const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
    const float scale = 9.797959f;
    for (auto& b : backends) {
      Tensor out(DType::F32, {5, 96});
      b.backend->embed(testing::i32_tensor(ids), b.backend->prepare_weight(table), scale, out);
      std::vector<float> want(5 * 96);
      for (std::size_t t = 0; t < ids.size(); ++t)
        for (int64_t d = 0; d < 96; ++d) want[t * 96 + d] = values[std::size_t(ids[t] * 96 + d)] * scale;
      expect_bitwise(out, want, b.label() + " " + table.describe());
    }
  }
}

// The weight with each group's bias set to scale · −2^(bits−1), stored as
// its parameters are (exact: a power of two times a stored scale), as GGUF's
// symmetric types convert.
Weight with_symmetric_biases(Weight w) {
  const DType t = w.scales.dtype();
  const float minus_zero = -float(1 << (w.bits - 1));
  w.biases = Tensor(t, w.scales.shape());
  for (int64_t i = 0; i < w.scales.numel(); ++i) {
    if (t == DType::F32) {
      w.biases.data<float>()[i] = w.scales.data<float>()[i] * minus_zero;
    } else {
      const uint16_t h = w.scales.data<uint16_t>()[i];
      const float scale = t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      w.biases.data<uint16_t>()[i] = t == DType::F16 ? f32_to_f16(scale * minus_zero) : f32_to_bf16(scale * minus_zero);
    }
  }
  return w;
}

// Biases that are scale · −2^(bits−1) bit for bit are dropped by
// prepare_weight (the kernels compute them) and the matmul, a row range of
// it and the embedding still give the dequantized matrix's bits. One bias
// off by its last bit, or a zero bias whose sign differs from the product's
// (scale 0: 0 · −8 = −0, stored +0), keeps the biases.
TEST(CpuAffine, ImpliedBiasesAreDroppedAndGiveTheSameBits) {
  std::mt19937 rng(29);
  auto backends = all_backends();
  struct Case {
    int bits, group;
    DType params;
  };
  for (const Case c : {Case{4, 32, DType::F16}, Case{6, 16, DType::F32}, Case{8, 32, DType::F16},
                       Case{5, 32, DType::BF16}, Case{3, 16, DType::F32}, Case{4, 64, DType::BF16},
                       Case{6, 16, DType::F16}, Case{6, 32, DType::BF16}}) {
    const int64_t N = 37, K = 256;
    const Weight symmetric = with_symmetric_biases(random_affine(N, K, c.bits, c.group, c.params, rng));
    Weight off_by_a_bit = symmetric;
    off_by_a_bit.biases = copy_of(symmetric.biases);
    static_cast<uint8_t*>(off_by_a_bit.biases.raw())[0] ^= 1;
    Weight signed_zero = symmetric;
    signed_zero.scales = copy_of(symmetric.scales);
    signed_zero.biases = copy_of(symmetric.biases);
    std::memset(signed_zero.scales.raw(), 0, dtype_size(c.params));
    std::memset(signed_zero.biases.raw(), 0, dtype_size(c.params));
    std::vector<const Weight*> cases = {&symmetric, &off_by_a_bit, &signed_zero};
    // f16 and bf16 scales at the edges, their biases implied: +0 and −0
    // (whose zero code is +0), large (bf16: products that overflow to inf,
    // values NaN) and subnormal magnitudes, +inf (NaN at code 0).
    Weight edges = symmetric;
    if (c.params != DType::F32) {
      edges.scales = copy_of(symmetric.scales);
      const bool f16 = c.params == DType::F16;
      const std::vector<uint16_t> special = f16 ? std::vector<uint16_t>{0x0000, 0x8000, 0x5bff, 0x0001, 0x7c00, 0xdbff}
                                                : std::vector<uint16_t>{0x0000, 0x8000, 0x7f7f, 0x0001, 0x7f80, 0xff7f};
      // In rows 0 and 7, which the embedding below reads too.
      const int64_t groups = edges.scales.dim(1);
      for (std::size_t i = 0; i < special.size(); ++i)
        edges.scales.data<uint16_t>()[i < 3 ? int64_t(i) : 7 * groups + int64_t(i) - 3] = special[i];
      edges = with_symmetric_biases(edges);
      cases.push_back(&edges);
    }
    for (const Weight* w : cases) {
      const bool implied = w == &symmetric || w == &edges;
      const auto values = dequantized(*w);
      for (auto& b : backends) {
        const std::string at = b.label() + " " + label(*w, 0) + (implied ? " (symmetric)" : " (kept)");
        const Weight prepared = b.backend->prepare_weight(*w);
        EXPECT_EQ(prepared.biases.empty(), implied) << at;
        EXPECT_EQ(prepared.implied_zero, implied ? 1 << (c.bits - 1) : 0) << at;
        for (int64_t M : {1, 3, 9}) {
          const Tensor x = random_f32({M, K}, rng);
          Tensor y(DType::F32, {M, N});
          b.backend->matmul(x, prepared, y);
          expect_bitwise(y, oracle_matmul(x, values, N), at + " M=" + std::to_string(M));
          const std::vector<float> tail(values.begin() + 5 * K, values.begin() + 21 * K);
          Tensor y_rows(DType::F32, {M, 16});
          b.backend->matmul(x, prepared.row_range(5, 21), y_rows);
          expect_bitwise(y_rows, oracle_matmul(x, tail, 16), at + " rows [5, 21) M=" + std::to_string(M));
        }
        const std::vector<int32_t> ids = {36, 0, 7};
        Tensor out(DType::F32, {3, K});
        b.backend->embed(testing::i32_tensor(ids), prepared, 1.0f, out);
        std::vector<float> want;
        for (int32_t id : ids) want.insert(want.end(), values.begin() + id * K, values.begin() + (id + 1) * K);
        expect_bitwise(out, want, at + " embed");
      }
    }
  }
}

// Experts as row ranges of stacked affine banks (as switch_glu stores them)
// give bitwise what the dense bank of the dequantized values gives.
TEST(CpuAffine, MoeExpertsOnAQuantizedBankEqualTheDequantizedBank) {
  std::mt19937 rng(25);
  const int E = 4, I = 48, H = 64, T = 6, top_k = 2;
  const Weight gate = random_affine(E * I, H, 4, 32, DType::BF16, rng);
  const Weight up = random_affine(E * I, H, 8, 64, DType::BF16, rng);
  const Weight down = random_affine(E * H, I, 4, 16, DType::BF16, rng);
  ExpertBank quantized, dense;
  std::vector<Tensor> dense_values;
  auto dense_of = [&](const Weight& w) {
    const auto v = dequantized(w);
    Tensor t(DType::F32, {w.rows, w.cols});
    std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
    return t;
  };
  const Tensor gd = dense_of(gate), ud = dense_of(up), dd = dense_of(down);
  for (int e = 0; e < E; ++e) {
    quantized.gate.push_back(gate.row_range(e * I, (e + 1) * I));
    quantized.up.push_back(up.row_range(e * I, (e + 1) * I));
    quantized.down.push_back(down.row_range(e * H, (e + 1) * H));
    dense.gate.push_back(Weight::dense(gd.rows(e * I, (e + 1) * I)));
    dense.up.push_back(Weight::dense(ud.rows(e * I, (e + 1) * I)));
    dense.down.push_back(Weight::dense(dd.rows(e * H, (e + 1) * H)));
  }
  const Tensor x = random_f32({T, H}, rng);
  const Tensor experts = testing::i32_tensor({0, 2, 1, 3, 2, 0, 3, 1, 0, 1, 2, 3}).reshaped({T, top_k});
  const Tensor weights =
      testing::f32_tensor({0.6f, 0.4f, 0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f, 0.2f, 0.8f, 0.55f, 0.45f}).reshaped({T, top_k});
  for (auto& b : all_backends()) {
    Tensor got(DType::F32, {T, H}), want(DType::F32, {T, H});
    ExpertBank prepared = quantized;
    for (auto* m : {&prepared.gate, &prepared.up, &prepared.down})
      for (Weight& e : *m) e = b.backend->prepare_weight(e);
    b.backend->moe_experts(x, experts, weights, prepared, Activation::GeluTanh, got);
    b.backend->moe_experts(x, experts, weights, dense, Activation::GeluTanh, want);
    expect_bitwise(got, std::vector<float>(want.data<float>(), want.data<float>() + want.numel()), b.label());
  }
}

TEST(CpuAffine, RejectsMalformedWeightsNamingTheProblem) {
  std::mt19937 rng(26);
  auto b = make_cpu_backend(1);
  const Weight good = random_affine(8, 64, 4, 32, DType::BF16, rng);
  auto message = [&](Weight w) {
    try {
      b->prepare_weight(w);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(good), "no error");
  Weight w = good;
  w.bits = 7;
  EXPECT_NE(message(w).find("bits must be"), std::string::npos);
  w = good;
  w.group_size = 48;
  EXPECT_NE(message(w).find("group size must be"), std::string::npos);
  w = good;
  w.values = Tensor(DType::I32, {8, 8});
  EXPECT_NE(message(w).find("codes must be u32 [8, 8]"), std::string::npos);
  w = good;
  w.values = Tensor(DType::U32, {8, 4});
  EXPECT_NE(message(w).find("codes must be u32"), std::string::npos);
  w = good;
  w.scales = Tensor(DType::BF16, {8, 3});
  EXPECT_NE(message(w).find("scales and biases"), std::string::npos);
  w = good;
  w.biases = Tensor(DType::F16, {8, 2});
  EXPECT_NE(message(w).find("scales and biases"), std::string::npos);
  w = good;
  w.cols = 40;
  EXPECT_NE(message(w).find("whole groups"), std::string::npos);
  Tensor x(DType::F32, {1, 32}), y(DType::F32, {1, 8});
  EXPECT_THROW(b->matmul(x, b->prepare_weight(good), y), Error);  // K mismatch
  // 4-bit codes the backend has not reordered are refused, not misread.
  Tensor x64(DType::F32, {1, 64});
  try {
    b->matmul(x64, good, y);
    ADD_FAILURE() << "an unprepared 4-bit weight was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass the weight through prepare_weight first"), std::string::npos) << e.what();
  }
  // Prepared twice: the same order, not reordered again.
  const Weight once = b->prepare_weight(good);
  const Weight twice = b->prepare_weight(once);
  EXPECT_EQ(twice.code_order, CodeOrder::Halves32);
  EXPECT_EQ(std::memcmp(once.values.raw(), twice.values.raw(), once.values.nbytes()), 0);
}

// The reorder itself against its definition (backend/weight.h): byte i of
// block b holds codes 32b + i and 32b + 16 + i; an odd multiple of 16 keeps
// its last 16 codes in stream order.
TEST(CpuAffine, Halves32HoldsEachCodeWhereItsDefinitionSays) {
  std::mt19937 rng(27);
  for (int64_t cols : {int64_t(32), int64_t(48), int64_t(96), int64_t(272)}) {
    const Weight w = random_affine(3, cols, 4, 16, DType::F32, rng);
    const Weight p = make_cpu_backend(1)->prepare_weight(w);
    ASSERT_EQ(p.values.shape(), w.values.shape());
    for (int64_t r = 0; r < 3; ++r) {
      const auto* stream = static_cast<const uint8_t*>(w.values.raw()) + r * cols / 2;
      const auto* halves = static_cast<const uint8_t*>(p.values.raw()) + r * cols / 2;
      for (int64_t c = 0; c < cols; ++c) {
        const int want = (stream[c / 2] >> (4 * (c % 2))) & 15;
        const int64_t whole = cols / 32 * 32;
        const int got = c < whole ? (halves[c / 32 * 16 + c % 16] >> (4 * ((c % 32) / 16))) & 15
                                  : (halves[c / 2] >> (4 * (c % 2))) & 15;
        ASSERT_EQ(got, want) << "cols " << cols << " row " << r << " code " << c;
      }
    }
  }
}

// 6-bit codes come out of prepare_weight one a byte (an 8-bit stream, the
// zero of an implied bias kept at 32), each byte the code the 6-bit stream
// holds by weight.h's definition; preparing again changes nothing.
TEST(CpuAffine, SixBitCodesAreWidenedToOneAByte) {
  std::mt19937 rng(31);
  auto backend = make_cpu_backend(3);
  for (const int64_t cols : {int64_t(16), int64_t(48), int64_t(272)}) {
    const Weight w = random_affine(5, cols, 6, 16, DType::F32, rng);
    const Weight p = backend->prepare_weight(w);
    ASSERT_EQ(p.bits, 8);
    ASSERT_EQ(p.values.shape(), (Shape{5, cols / 4}));
    for (int64_t r = 0; r < 5; ++r) {
      const auto* words = static_cast<const uint32_t*>(w.values.raw()) + r * cols * 6 / 32;
      const auto* bytes = static_cast<const uint8_t*>(p.values.raw()) + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        int want = 0;
        for (int b = 0; b < 6; ++b) {
          const int64_t bit = c * 6 + b;  // bit `bit` of the row's stream: bit bit % 32 of word bit / 32
          want |= int((words[bit / 32] >> (bit % 32)) & 1u) << b;
        }
        ASSERT_EQ(int(bytes[c]), want) << "cols " << cols << " row " << r << " code " << c;
      }
    }
    const Weight again = backend->prepare_weight(p);
    EXPECT_EQ(again.bits, 8);
    EXPECT_EQ(std::memcmp(again.values.raw(), p.values.raw(), p.values.nbytes()), 0);
  }
  const Weight symmetric = with_symmetric_biases(random_affine(4, 64, 6, 16, DType::F16, rng));
  const Weight p = backend->prepare_weight(symmetric);
  EXPECT_EQ(p.bits, 8);
  EXPECT_EQ(p.implied_zero, 32);
  EXPECT_EQ(backend->prepare_weight(p).implied_zero, 32);
}

}  // namespace
}  // namespace rowlm
