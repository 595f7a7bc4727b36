#include "rowlm/backend_options.h"

#include <string>

#include "backend/backend.h"
#include "core/error.h"

namespace rowlm {

std::string_view matmul_precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::Bf16 ? "bf16" : "f32";
}

MatmulPrecision parse_matmul_precision(std::string_view name) {
  for (MatmulPrecision p : {MatmulPrecision::F32, MatmulPrecision::Bf16})
    if (name == matmul_precision_name(p)) return p;
  throw Error("unknown matmul precision '" + std::string(name) + "' (expected f32 or bf16)");
}

std::string_view activation_name(Activation a) { return a == Activation::Silu ? "silu" : "gelu_tanh"; }

}  // namespace rowlm
