#include "backend/cpu/amx_bf16_rows.h"

#include <algorithm>

#include "backend/cpu/amx_bf16.h"
#include "core/dtype.h"

namespace rowlm::cpu {

static_assert(kAmxRowsStepFloats == 2 * kAmxBlock, "a step holds two blocks' elements, paired");

int64_t amx_rows_lag(int64_t ldw) { return ldw * 2 % 4096 == 0 ? kAmxRowsLag : 0; }

int64_t amx_rows_x_stride(int64_t K, int64_t lag) { return (amx_blocks(K) + lag) * kAmxRowsStepFloats; }

void amx_rows_pack_x(const float* x, int64_t K, int64_t lag, float* packed) {
  const int64_t steps = amx_blocks(K) + lag;
  std::fill(packed, packed + steps * kAmxRowsStepFloats, 0.0f);
  // The even rows' elements, each rounded once (x[32j + e] at step j), then
  // the odd rows', the same values lag steps later: simple loops the
  // compiler vectorizes (decode packs x at every matmul).
  for (int64_t j = 0; j * kAmxBlock < K; ++j) {
    const int64_t n = std::min(kAmxBlock, K - j * kAmxBlock);
    for (int64_t e = 0; e < n; ++e) packed[j * kAmxRowsStepFloats + 2 * e] = round_bf16(x[j * kAmxBlock + e]);
  }
  for (int64_t j = lag; j < steps; ++j)
    for (int64_t e = 0; e < kAmxBlock; ++e)
      packed[j * kAmxRowsStepFloats + 2 * e + 1] = packed[(j - lag) * kAmxRowsStepFloats + 2 * e];
}

}  // namespace rowlm::cpu
