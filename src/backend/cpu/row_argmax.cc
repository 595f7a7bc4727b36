#include "backend/cpu/row_argmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/argmax_code.h"

namespace rowlm::cpu {

namespace {
// Blocks of the scan: a block's maximum says whether the first largest
// value can be in it, so the second pass reads one block.
constexpr int64_t kScanBlock = 1024;
}  // namespace

RowScan scan_row(const Kernels& kernels, std::span<const float> x, int64_t block, std::vector<RowScan>& blocks) {
  const int64_t n = int64_t(x.size());
  blocks.resize(std::size_t((n + block - 1) / block));
  kernels.scan_blocks(x.data(), n, block, blocks.data());
  RowScan all{-std::numeric_limits<float>::infinity(), false, false};
  for (const RowScan& b : blocks) {
    all.max = all.max < b.max ? b.max : all.max;
    all.bad = all.bad || b.bad;
    all.any_finite = all.any_finite || b.any_finite;
  }
  return all;
}

int64_t first_index_of(std::span<const float> x, std::span<const RowScan> blocks, int64_t block, float max) {
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    if (!(blocks[b].max == max)) continue;
    const std::size_t end = std::min(x.size(), (b + 1) * std::size_t(block));
    for (std::size_t i = b * std::size_t(block); i < end; ++i)
      if (x[i] == max) return int64_t(i);
  }
  return 0;
}

int32_t argmax_code(const Kernels& kernels, std::span<const float> x) {
  std::vector<RowScan> blocks;
  const RowScan all = scan_row(kernels, x, kScanBlock, blocks);
  if (all.bad) {  // the slow search for the culprit runs only on failure
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::isnan(x[i]) || (x[i] > 0 && std::isinf(x[i]))) return argmax_code::bad_at(int64_t(i), std::isnan(x[i]));
  }
  if (!all.any_finite) return argmax_code::kNoFinite;
  return int32_t(first_index_of(x, blocks, kScanBlock, all.max));
}

}  // namespace rowlm::cpu
