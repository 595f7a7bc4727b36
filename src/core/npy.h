#pragma once
// NumPy .npy (format 1.0) reading and writing for float32 arrays: the
// exchange format for logits and reference fixtures.

#include <string>

#include "core/tensor.h"

namespace rowlm {

void write_npy(const std::string& path, const Tensor& t);  // F32 only
Tensor read_npy(const std::string& path);                 // '<f4', C order

}  // namespace rowlm
