#pragma once
// cos and sin of one position's RoPE angles, as transformers forms them: the
// angle position · inv_freq[k] in f32, then cos and sin in f32 (std::cos,
// std::sin). Every backend takes its cos and sin from here (the CPU per
// token, the CUDA backend into its table), so they rotate by the same bits.

#include <cmath>
#include <cstdint>

namespace rowlm {

inline void rope_angles(const float* inv_freq, int64_t half, int64_t position, float* cos, float* sin) {
  const float p = float(position);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = p * inv_freq[i];
    cos[i] = std::cos(angle);
    sin[i] = std::sin(angle);
  }
}

}  // namespace rowlm
