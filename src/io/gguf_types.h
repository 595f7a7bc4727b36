#pragma once
// ggml's tensor types as GGUF files store them (the `type` field of a tensor
// info; ggml/include/ggml.h's enum ggml_type, gguf-py's
// GGMLQuantizationType). A type stores its elements in blocks of
// block_size consecutive values along the innermost dimension, each block
// block_bytes long.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rowlm::gguf {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
};

struct GgmlTypeTraits {
  std::string_view name;  // "Q4_K", as llama.cpp prints it
  int64_t block_size = 0;
  int64_t block_bytes = 0;
  // rowlm can read its values (dense, or converted to affine at load).
  bool supported = false;
};

// The traits of a type code found in a file, or nullopt for a code ggml does
// not define.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t code);
// The traits of a type rowlm names (always defined).
GgmlTypeTraits traits(GgmlType type);
// "Q4_K", or "type 77" for a code ggml does not define.
std::string ggml_type_name(uint32_t code);

}  // namespace rowlm::gguf
