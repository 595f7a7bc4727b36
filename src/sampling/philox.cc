#include "sampling/philox.h"

namespace rowlm::sampling {

namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

void round_once(PhiloxCounter& c, const PhiloxKey& k) {
  const uint64_t p0 = uint64_t(kMul0) * c[0];
  const uint64_t p1 = uint64_t(kMul1) * c[2];
  const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
  const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    round_once(counter, key);
  }
  return counter;
}

double uniform01(uint64_t seed, uint64_t step, RandomStream stream) {
  const PhiloxCounter out = philox4x32_10(
      {uint32_t(step), uint32_t(step >> 32), uint32_t(stream), 0u},
      {uint32_t(seed), uint32_t(seed >> 32)});
  const uint64_t bits = (uint64_t(out[0]) << 32 | out[1]) >> 11;  // top 53 bits
  return double(bits) * 0x1.0p-53;
}

}  // namespace rowlm::sampling
