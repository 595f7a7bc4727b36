#include "rowlm/backend_options.h"

#include <string>

#include "backend/backend.h"
#include "core/error.h"

namespace rowlm {

std::string_view matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::Bf16: return "bf16";
    case MatmulPrecision::Auto: return "auto";
    case MatmulPrecision::Int8: return "int8";
    default: return "f32";
  }
}

MatmulPrecision parse_matmul_precision(std::string_view name) {
  for (MatmulPrecision p : {MatmulPrecision::F32, MatmulPrecision::Bf16, MatmulPrecision::Auto, MatmulPrecision::Int8})
    if (name == matmul_precision_name(p)) return p;
  throw Error("unknown matmul precision '" + std::string(name) + "' (expected f32, bf16, int8 or auto)");
}

std::string_view activation_name(Activation a) { return a == Activation::Silu ? "silu" : "gelu_tanh"; }

}  // namespace rowlm
