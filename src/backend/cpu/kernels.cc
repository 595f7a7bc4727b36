#include "backend/cpu/kernels.h"

#include <string>

#include "core/error.h"

namespace rowlm::cpu {

const Kernels& kernels_for(Isa isa) {
  // Checked before touching a table: building one runs that ISA's code.
  if (!isa_supported(isa))
    throw Error("CPU ISA '" + std::string(isa_name(isa)) + "' is not supported by this CPU");
  switch (isa) {
    case Isa::Avx512: return avx512_kernels();
    case Isa::Avx2: return avx2_kernels();
    case Isa::Scalar: break;
  }
  return scalar_kernels();
}

}  // namespace rowlm::cpu
