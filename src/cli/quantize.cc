// rowlm quantize: an f32/bf16/f16 model directory to an mlx-community
// (MLX affine) checkpoint.

#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/mlx_checkpoint.h"

namespace rowlm::cli {

int run_quantize(const std::vector<std::string>& argv) {
  Args args("quantize",
            "Writes DST_DIR, an mlx-community-layout checkpoint of SRC_DIR: every matrix whose width is whole\n"
            "groups is quantized with MLX's affine quantizer (codes, scales, biases in the model's dtype);\n"
            "config.json gains its 'quantization' entry and the tokenizer files are copied. Gemma 4 routers\n"
            "get 8 bits in groups of 64 as mlx-lm gives them, unless an override says otherwise.");
  args.positional("SRC_DIR", "a Hugging Face model directory (f32, bf16 or f16 safetensors)")
      .positional("DST_DIR", "the directory to write (must not exist or be empty)")
      .option("bits", "N", "bits per weight: 2, 3, 4, 5, 6 or 8", "4")
      .option("group-size", "N", "weights per scale and bias: 16, 32, 64 or 128", "64")
      .option("override", "PATTERN=SPEC",
              "for modules whose tensor name contains PATTERN: SPEC is BITS, BITS/GROUP or none (keep them in\n"
              "floating point); may repeat, later ones win (e.g. --override mlp.down_proj=8 --override embed_tokens=none)");
  if (!args.parse(argv)) return 0;
  QuantizeOptions options;
  options.spec.bits = int(args.get_int("bits"));
  options.spec.group_size = int(args.get_int("group-size"));
  for (const std::string& o : args.get_all("override")) options.overrides.push_back(parse_quantize_override(o));
  const QuantizeReport r = quantize_checkpoint(args.get("SRC_DIR"), args.get("DST_DIR"), options);
  std::fprintf(stderr, "quantized %d matrices to q%d/%d (%d tensors kept): %.1f MB -> %.1f MB in %s\n", r.quantized,
               options.spec.bits, options.spec.group_size, r.kept, r.bytes_in / 1e6, r.bytes_out / 1e6,
               args.get("DST_DIR").c_str());
  return 0;
}

}  // namespace rowlm::cli
