// The portable statement of the 8-bit-activation matmul (int8_matmul.h):
// plain loops in the header's order, which the scalar and AVX2 tables run
// and the AVX512-VNNI kernels match bit for bit.

#include "backend/cpu/int8_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"

namespace rowlm::cpu {
namespace {

constexpr int64_t kXBlock = 32;

int64_t whole_steps(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Code k of a weight row: 4-bit in Halves32 order (K a multiple of 32), or
// 8-bit in stream order.
int code_at(const uint32_t* row, int bits, int64_t k) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(row);
  if (bits == 8) return bytes[k];
  const uint8_t b = bytes[k / 32 * 16 + k % 16];
  return k % 32 < 16 ? b & 0xf : b >> 4;
}

// Where element e (0 to U - 1) of unit L (0-3) of a step sits among the
// step's 4·U code bytes.
int64_t code_slot(int unit, int L, int e) {
  if (unit == 16) return L * 16 + e;
  return (e < 16 ? 0 : 64) + L * 16 + e % 16;
}

}  // namespace

float widened_param(const void* p, DType t, int64_t i) {
  if (t == DType::F32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

bool int8_supported(const AffineRows& w, int64_t K) {
  if (w.bits != 4 && w.bits != 8) return false;
  const int unit = int8_unit(w.bits);
  if (w.group_size <= 0 || w.group_size % unit != 0 || K % unit != 0) return false;
  // 16 units' parameters come from one load and one permutation: their
  // groups' pattern must not depend on where the 16 start.
  const int per_group = w.group_size / unit;
  return 16 % per_group == 0 || per_group % 16 == 0;
}

int int8_unit(int bits) { return bits == 4 ? 32 : 16; }

int64_t int8_steps(int64_t K, int unit) { return whole_steps(K, 4 * int64_t(unit)); }

int64_t int8_x_row_bytes(int64_t K, int unit) { return int8_steps(K, unit) * (4 * unit + kInt8StepFloatBytes); }

// Four steps' parameters for the decode tiles; for the prefill tiles 16
// rows' codes unpacked to bytes and their parameters (32 floats a unit).
int64_t int8_scratch_floats(int64_t K, int unit, int64_t M) {
  return M < kInt8WideMinRows ? kInt8SmallScratchFloats : std::max<int64_t>(128, K * 16 / 4 + K / unit * 32);
}

void quantize_int8_portable(const float* x, int64_t K, int unit, uint8_t* out) {
  const int64_t step_bytes = 4 * unit + kInt8StepFloatBytes;
  std::memset(out, 0, std::size_t(int8_x_row_bytes(K, unit)));
  for (int64_t b0 = 0; b0 < K; b0 += kXBlock) {
    const int64_t n = std::min(kXBlock, K - b0);
    float amax = 0.0f;
    bool finite = true;
    for (int64_t k = b0; k < b0 + n; ++k) {
      finite = finite && std::fabs(x[k]) <= std::numeric_limits<float>::max();
      amax = std::max(amax, std::fabs(x[k]));
    }
    int8_t q[kXBlock] = {};
    float dx = 0.0f;
    if (!finite) {
      dx = std::numeric_limits<float>::quiet_NaN();
    } else if (amax >= kInt8TinyAmax) {
      dx = amax / 127.0f;
      const float id = 127.0f / amax;
      for (int64_t i = 0; i < n; ++i) q[i] = int8_t(std::nearbyint(x[b0 + i] * id));
    }
    // The block's units (one of 32, or two of 16).
    for (int64_t u0 = b0; u0 < b0 + n; u0 += unit) {
      const int64_t u = u0 / unit, s = u / 4;
      const int L = int(u % 4);
      uint8_t* step = out + s * step_bytes;
      int xs = 0;
      for (int e = 0; e < unit && u0 + e < b0 + n; ++e) {
        const int8_t c = q[u0 - b0 + e];
        xs += c;
        step[code_slot(unit, L, e)] = uint8_t(c);
      }
      const float xsd = float(xs) * dx;
      float* fields = reinterpret_cast<float*>(step + 4 * unit);
      for (int j = 0; j < 4; ++j) {
        fields[4 * L + j] = dx;
        fields[16 + 4 * L + j] = xsd;
      }
    }
  }
}

void dot_rows_int8_portable(const uint8_t* xq, int64_t ldxq, int64_t M, const AffineRows& w, int64_t N, int64_t K,
                            float* y, int64_t ldy, float* /*scratch*/) {
  const int unit = int8_unit(w.bits);
  const int64_t steps = int8_steps(K, unit), units = K / unit, step_bytes = 4 * unit + kInt8StepFloatBytes;
  for (int64_t n = 0; n < N; ++n) {
    const uint32_t* row = w.codes + n * w.code_ld;
    const int64_t params = n * w.param_ld;
    for (int64_t m = 0; m < M; ++m) {
      const uint8_t* xrow = xq + m * ldxq;
      float lane[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t s = 0; s < steps; ++s) {
        const uint8_t* step = xrow + s * step_bytes;
        const float* fields = reinterpret_cast<const float*>(step + 4 * unit);
        for (int L = 0; L < 4; ++L) {
          const int64_t u = 4 * s + L;
          float scale = 0.0f, bias = 0.0f;
          int32_t isum = 0;
          if (u < units) {
            const int64_t g = u * unit / w.group_size;
            scale = widened_param(w.scales, w.param_dtype, params + g);
            bias = w.biases ? widened_param(w.biases, w.param_dtype, params + g) : scale * w.bias_per_scale;
            for (int e = 0; e < unit; ++e)
              isum += code_at(row, w.bits, u * unit + e) * int32_t(int8_t(step[code_slot(unit, L, e)]));
          }
          const float t = float(isum) * fields[4 * L];
          const float b = bias * fields[16 + 4 * L];
          lane[L] = lane[L] + std::fma(scale, t, b);
        }
      }
      y[m * ldy + n] = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    }
  }
}

}  // namespace rowlm::cpu
