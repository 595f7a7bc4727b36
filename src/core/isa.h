#pragma once
// Which instruction set the CPU kernels use (the backend's matmul and
// element-wise kernels, and the KV module's attention). Every ISA computes
// bitwise the same results (the kernels share one reduction order), so the
// choice only changes speed; tests and benchmarks force each one in turn,
// and ROWLM_CPU_ISA forces one for a whole process.

#include <string_view>
#include <vector>

namespace rowlm::cpu {

enum class Isa { Scalar, Avx2, Avx512 };

std::string_view isa_name(Isa isa);
// "scalar", "avx2", "avx512"; anything else is an Error naming the value.
Isa parse_isa(std::string_view name);
// Whether this CPU (and OS) can run the ISA's kernels.
bool isa_supported(Isa isa);
// The fastest supported ISA.
Isa best_isa();
// Every supported ISA, slowest first.
std::vector<Isa> supported_isas();
// ROWLM_CPU_ISA if set (an Error if unknown or unsupported here), else best_isa().
Isa isa_from_env();

}  // namespace rowlm::cpu
