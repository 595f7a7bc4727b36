#include "io/gguf_types.h"

#include <array>

#include "core/error.h"

namespace rowlm::gguf {
namespace {

struct Row {
  uint32_t code;
  GgmlTypeTraits traits;
};

constexpr int64_t kQkK = 256;  // QK_K: the super-block of the K-quants

// ggml-common.h's block structs (sizes as gguf-py's GGML_QUANT_SIZES).
constexpr std::array kTypes = {
    Row{0, {"F32", 1, 4, true}},
    Row{1, {"F16", 1, 2, true}},
    Row{2, {"Q4_0", 32, 2 + 16, true}},
    Row{3, {"Q4_1", 32, 2 + 2 + 16, true}},
    Row{6, {"Q5_0", 32, 2 + 4 + 16, true}},
    Row{7, {"Q5_1", 32, 2 + 2 + 4 + 16, true}},
    Row{8, {"Q8_0", 32, 2 + 32, true}},
    Row{9, {"Q8_1", 32, 4 + 4 + 32, false}},
    Row{10, {"Q2_K", kQkK, 2 + 2 + kQkK / 16 + kQkK / 4, true}},
    Row{11, {"Q3_K", kQkK, 2 + kQkK / 4 + kQkK / 8 + 12, true}},
    Row{12, {"Q4_K", kQkK, 2 + 2 + kQkK / 2 + 12, true}},
    Row{13, {"Q5_K", kQkK, 2 + 2 + kQkK / 2 + kQkK / 8 + 12, true}},
    Row{14, {"Q6_K", kQkK, 2 + kQkK / 2 + kQkK / 4 + kQkK / 16, true}},
    Row{15, {"Q8_K", kQkK, 4 + kQkK + kQkK / 8, false}},
    Row{16, {"IQ2_XXS", kQkK, 2 + kQkK / 4, false}},
    Row{17, {"IQ2_XS", kQkK, 2 + kQkK / 4 + kQkK / 32, false}},
    Row{18, {"IQ3_XXS", kQkK, 2 + kQkK / 4 + kQkK / 8, false}},
    Row{19, {"IQ1_S", kQkK, 2 + kQkK / 8 + kQkK / 16, false}},
    Row{20, {"IQ4_NL", 32, 2 + 16, false}},
    Row{21, {"IQ3_S", kQkK, 2 + kQkK / 4 + kQkK / 8 + kQkK / 32 + 4, false}},
    Row{22, {"IQ2_S", kQkK, 2 + kQkK / 4 + kQkK / 16, false}},
    Row{23, {"IQ4_XS", kQkK, 2 + 2 + kQkK / 2 + kQkK / 64, false}},
    Row{24, {"I8", 1, 1, false}},
    Row{25, {"I16", 1, 2, false}},
    Row{26, {"I32", 1, 4, false}},
    Row{27, {"I64", 1, 8, false}},
    Row{28, {"F64", 1, 8, false}},
    Row{29, {"IQ1_M", kQkK, kQkK / 8 + kQkK / 16 + kQkK / 32, false}},
    Row{30, {"BF16", 1, 2, true}},
    Row{34, {"TQ1_0", kQkK, 2 + 4 * 13, false}},
    Row{35, {"TQ2_0", kQkK, 2 + 64, false}},
    Row{39, {"MXFP4", 32, 1 + 16, false}},
    Row{40, {"NVFP4", 64, 4 + 32, false}},
    Row{41, {"Q1_0", 128, 2 + 16, false}},
    Row{42, {"Q2_0", 64, 2 + 16, false}},
};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t code) {
  for (const Row& r : kTypes)
    if (r.code == code) return r.traits;
  return std::nullopt;
}

GgmlTypeTraits traits(GgmlType type) {
  auto t = ggml_type_traits(uint32_t(type));
  ROWLM_CHECK(t.has_value(), "GgmlType without traits");
  return *t;
}

std::string ggml_type_name(uint32_t code) {
  if (auto t = ggml_type_traits(code)) return std::string(t->name);
  return "type " + std::to_string(code);
}

}  // namespace rowlm::gguf
