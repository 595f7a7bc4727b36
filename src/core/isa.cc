#include "core/isa.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace rowlm::cpu {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa parse_isa(std::string_view name) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (name == isa_name(isa)) return isa;
  throw Error("unknown CPU ISA '" + std::string(name) + "' (expected scalar, avx2 or avx512)");
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
#if defined(__x86_64__)
      // BMI2 because the ISA files are compiled with -mbmi2.
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
#else
      return false;
#endif
    case Isa::Avx512:
#if defined(__x86_64__)
      // The kernels use F (compute), BW/VL (masked 16-bit loads), DQ
      // (256-bit extracts); FMA and F16C come with every AVX-512 CPU.
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             isa_supported(Isa::Avx2);
#else
      return false;
#endif
  }
  return false;
}

Isa best_isa() {
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Isa isa_from_env() {
  const char* forced = std::getenv("ROWLM_CPU_ISA");
  if (forced == nullptr || *forced == '\0') return best_isa();
  const Isa isa = parse_isa(forced);
  if (!isa_supported(isa))
    throw Error("ROWLM_CPU_ISA=" + std::string(forced) + " is not supported by this CPU");
  return isa;
}

}  // namespace rowlm::cpu
