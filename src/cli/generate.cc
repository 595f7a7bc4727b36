// rowlm generate: one request, decoded on its own.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/runtime.h"
#include "core/error.h"

namespace rowlm::cli {

int run_generate(const std::vector<std::string>& argv) {
  Args args("generate", "Generates a continuation of a prompt given as token ids (greedy decoding).");
  args.positional("MODEL_DIR", "a Hugging Face model directory")
      .option("ids", "ID,ID,...", "the prompt as token ids")
      .option("max-tokens", "N", "most tokens to generate", "64")
      .flag("ignore-eos", "keep generating past end-of-sequence tokens")
      .flag("json", "print the result as JSON on stdout");
  add_runtime_options(args, "bf16");
  if (!args.parse(argv)) return 0;
  const auto prompt = args.get_int_list("ids");
  const int64_t max_tokens = args.get_int("max-tokens");
  if (max_tokens < 0) throw Error("--max-tokens must not be negative");
  if (prompt.empty()) throw Error("--ids is empty");

  Runtime rt = open_runtime(args, args.get("MODEL_DIR"));
  const ModelInfo& info = rt.model->info();
  auto cache = rt.make_cache();
  const kv::RowId row = cache->create_row();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> out;
  std::string finish = "length";
  ForwardBatch b;
  for (std::size_t i = 0; i < prompt.size(); ++i) b.add(row, int64_t(i), prompt[i], i + 1 == prompt.size());
  double ttft = 0;
  Tensor logits;
  while (int64_t(out.size()) < max_tokens) {
    rt.model->forward(b, *cache, logits);
    if (out.empty()) ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const float* l = logits.data<float>();
    const int32_t next = int32_t(std::max_element(l, l + logits.dim(1)) - l);
    out.push_back(next);
    if (!args.flag_set("ignore-eos") &&
        std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), next) != info.eos_token_ids.end()) {
      finish = "stop";
      break;
    }
    b = ForwardBatch();
    b.add(row, cache->length(row), next, true);
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double decode_tps = out.size() > 1 ? double(out.size() - 1) / (total - ttft) : 0.0;
  if (args.flag_set("json")) {
    nlohmann::json j;
    j["token_ids"] = out;
    j["finish_reason"] = finish;
    j["usage"] = {{"prompt_tokens", prompt.size()}, {"completion_tokens", out.size()}};
    j["timings"] = {{"time_to_first_token_s", ttft}, {"total_s", total}, {"decode_tokens_per_s", decode_tps}};
    std::cout << j.dump() << "\n";
  } else {
    for (std::size_t i = 0; i < out.size(); ++i) std::cout << (i ? "," : "") << out[i];
    std::cout << "\n";
  }
  std::fprintf(stderr, "prompt %zu tokens, generated %zu, time to first token %.1f ms, %.1f tokens/s\n",
               prompt.size(), out.size(), ttft * 1e3, decode_tps);
  return 0;
}

}  // namespace rowlm::cli
