#include "model/weight_binder.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rowlm::decoder {
namespace {

// A large tensor is drawn in parallel chunks from jumped states; the oracle
// is the sequential path (tensors of at most one chunk), drawing the same
// stream in pieces: the bits must be the same.
TEST(SyntheticSource, ALargeTensorDrawnInParallelIsTheSequentialStream) {
  constexpr int64_t kChunk = int64_t(1) << 20, n = 2 * kChunk + 12345;
  DecoderWeights wa, wb;
  SyntheticSource parallel(5, 0.02f, wa), pieces(5, 0.02f, wb);
  const Tensor whole = parallel.tensor("a", {n});
  std::vector<uint16_t> joined;
  for (int64_t piece : {kChunk, kChunk, int64_t(12345)}) {
    const Tensor t = pieces.tensor("b", {piece});
    joined.insert(joined.end(), t.data<uint16_t>(), t.data<uint16_t>() + piece);
  }
  ASSERT_EQ(int64_t(joined.size()), n);
  EXPECT_EQ(std::memcmp(whole.raw(), joined.data(), std::size_t(n) * 2), 0);
  // And the stream goes on from the same state.
  EXPECT_EQ(parallel.vector("v", 7).data<float>()[6], pieces.vector("v", 7).data<float>()[6]);
}

}  // namespace
}  // namespace rowlm::decoder
