#pragma once
// Tensors of random bytes and byte-exact comparison, for the tests of the
// checkpoint readers and writers.

#include <cstring>
#include <random>
#include <utility>

#include "core/tensor.h"

namespace rowlm::tensor_testing {

// Every byte random: any bit pattern of a dtype must survive a round trip.
inline Tensor random_tensor(DType dtype, Shape shape, std::mt19937& rng) {
  Tensor t(dtype, std::move(shape));
  auto* p = static_cast<unsigned char*>(t.raw());
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

}  // namespace rowlm::tensor_testing
