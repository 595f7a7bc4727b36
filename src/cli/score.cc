// rowlm score: logits of every position of a token sequence, as .npy.

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/runtime.h"
#include "core/error.h"
#include "core/npy.h"

namespace rowlm::cli {

int run_score(const std::vector<std::string>& argv) {
  Args args("score", "Writes the float32 logits [T, vocab] that the model gives at every position of a\n"
                     "token sequence, computed with f32 activations, as a NumPy .npy file.");
  add_model_argument(args)
      .option("ids", "ID,ID,...", "the token ids, comma-separated")
      .option("logits-out", "FILE.npy", "where to write the logits")
      .option("chunk", "N", "tokens per forward step", "256");
  add_runtime_options(args, "f32");
  if (!args.parse(argv)) return 0;
  const auto ids = args.get_int_list("ids");
  const std::string out_path = args.get("logits-out");
  const int64_t chunk = args.get_int("chunk");
  if (chunk < 1) throw Error("--chunk must be at least 1");
  if (ids.empty()) throw Error("--ids is empty");

  Runtime rt = open_runtime(args, model_source_from(args).dir);
  auto cache = rt.make_cache();
  const kv::RowId row = cache->create_row();
  const int64_t V = rt.model->info().vocab_size, T = int64_t(ids.size());
  Tensor all(DType::F32, {T, V});
  for (int64_t start = 0; start < T; start += chunk) {
    const int64_t n = std::min(chunk, T - start);
    ForwardBatch b;
    for (int64_t i = start; i < start + n; ++i) b.add(row, i, ids[std::size_t(i)], true);
    Tensor logits;
    rt.model->forward(b, *cache, logits);
    std::copy_n(logits.data<float>(), n * V, all.data<float>() + start * V);
  }
  write_npy(out_path, all);
  std::fprintf(stderr, "wrote logits [%lld, %lld] to %s\n", (long long)T, (long long)V, out_path.c_str());
  return 0;
}

}  // namespace rowlm::cli
