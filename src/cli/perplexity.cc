// rowlm perplexity: how well a model predicts a text file.
//
// The text is tokenized without special tokens and cut into consecutive
// windows of ctx-1 tokens; each window is scored after a <bos>, and
// ppl = exp(total NLL / scored tokens) (tools/train_tiny/evaluate.py
// computes the same with transformers).

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/runtime.h"
#include "core/error.h"
#include "engine/model_files.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::cli {

int run_perplexity(const std::vector<std::string>& argv) {
  Args args("perplexity", "Computes the model's perplexity on a text file: consecutive windows of CTX-1 tokens,\n"
                          "each scored after <bos>; prints JSON.");
  add_model_argument(args)
      .option("file", "TEXT_FILE", "the text to score")
      .option("ctx", "N", "window length including <bos>", "512")
      .option("chunk", "N", "tokens per forward step", "512");
  add_runtime_options(args, "f32");
  if (!args.parse(argv)) return 0;
  const int64_t ctx = args.get_int("ctx"), chunk = args.get_int("chunk");
  if (ctx < 2) throw Error("--ctx must be at least 2");
  if (chunk < 1) throw Error("--chunk must be at least 1");
  const std::string path = args.get("file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();

  const std::string dir = model_source_from(args).dir;
  Runtime rt = open_runtime(args, dir);
  // A directory's tokenizer.json or a GGUF file's tokenizer.ggml.* (model_files.h).
  const std::optional<Tokenizer> tok = load_model_tokenizer(dir);
  if (!tok) throw Error("perplexity needs a tokenizer, and " + dir + " has none");
  const std::vector<int32_t> ids = tok->encode(ss.str(), false);
  if (ids.empty()) throw Error(path + ": no tokens to score");
  const int bos = rt.model->info().bos_token_id;
  if (bos < 0) throw Error("the model has no bos_token_id");
  const int64_t V = rt.model->info().vocab_size;

  double nll = 0;
  int64_t scored = 0;
  for (std::size_t start = 0; start < ids.size(); start += std::size_t(ctx - 1)) {
    const std::size_t end = std::min(ids.size(), start + std::size_t(ctx - 1));
    std::vector<int32_t> window = {bos};
    window.insert(window.end(), ids.begin() + std::ptrdiff_t(start), ids.begin() + std::ptrdiff_t(end));
    auto cache = rt.make_cache();
    const kv::RowId row = cache->create_row();
    for (std::size_t s = 0; s + 1 < window.size(); s += std::size_t(chunk)) {
      const std::size_t e = std::min(window.size() - 1, s + std::size_t(chunk));
      ForwardBatch b;
      for (std::size_t i = s; i < e; ++i) b.add(row, int64_t(i), window[i], true);
      Tensor logits;
      rt.model->forward(b, *cache, logits);
      for (std::size_t i = s; i < e; ++i) {
        const float* l = logits.data<float>() + int64_t(i - s) * V;
        double mx = l[0];
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(l[v]));
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(l[v]) - mx);
        nll -= double(l[window[i + 1]]) - mx - std::log(sum);
        ++scored;
      }
    }
  }
  nlohmann::json j = {{"perplexity", std::exp(nll / double(scored))}, {"tokens", scored},
                      {"nll", nll}, {"ctx", ctx}, {"file", path}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace rowlm::cli
