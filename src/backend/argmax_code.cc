#include "backend/argmax_code.h"

#include <string>

#include "core/error.h"

namespace rowlm {

void check_argmax_rows(const Tensor& x, const Tensor& codes) {
  if (!(x.dtype() == DType::F32 && x.rank() == 2 && x.dim(1) > 0 && x.dim(1) <= argmax_code::kMaxRow))
    throw Error("argmax_rows: x must be f32 [n, V] with 0 < V <= 2^30, got " + std::string(dtype_name(x.dtype())) +
                    " " + shape_str(x.shape()));
  if (!(codes.dtype() == DType::I32 && codes.shape() == Shape{x.dim(0)}))
    throw Error("argmax_rows: codes must be i32 [" + std::to_string(x.dim(0)) + "], got " +
                    std::string(dtype_name(codes.dtype())) + " " + shape_str(codes.shape()));
}

}  // namespace rowlm
