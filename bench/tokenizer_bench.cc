// Tokenizer speed: load time of a tokenizer.json, then single-thread
// encoding throughput on a text file (tools/tokenizer_ref/bench.sh runs it
// side by side with Hugging Face tokenizers on the same text).
//
//   tokenizer_bench TOKENIZER TEXT_FILE [REFERENCE_IDS_JSON]
//
// Prints one JSON object. With REFERENCE_IDS_JSON (a JSON array of ids) it
// also reports whether rowlm's ids equal the reference's.

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw rowlm::Error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: tokenizer_bench TOKENIZER TEXT_FILE [REFERENCE_IDS_JSON]\n";
    return 2;
  }
  try {
    auto t0 = std::chrono::steady_clock::now();
    const rowlm::Tokenizer tok = rowlm::Tokenizer::load(argv[1]);
    const double load_s = seconds_since(t0);
    const std::string text = read_file(argv[2]);

    // The first pass fills the word cache as a long-running server's would
    // be; report the best of a few passes after it, and the cold one too.
    t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok.encode(text, false);
    const double cold_s = seconds_since(t0);
    double best_s = cold_s;
    for (int i = 0; i < 3; ++i) {
      t0 = std::chrono::steady_clock::now();
      ids = tok.encode(text, false);
      best_s = std::min(best_s, seconds_since(t0));
    }
    nlohmann::json out = {{"tokenizer", argv[1]},
                          {"load_s", load_s},
                          {"text_bytes", text.size()},
                          {"tokens", ids.size()},
                          {"encode_cold_s", cold_s},
                          {"encode_best_s", best_s},
                          {"mb_per_s_cold", double(text.size()) / 1e6 / cold_s},
                          {"mb_per_s", double(text.size()) / 1e6 / best_s}};
    if (argc > 3) {
      const auto ref = nlohmann::json::parse(read_file(argv[3])).get<std::vector<int32_t>>();
      out["same_ids_as_reference"] = ref == ids;
    }
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_bench: " << e.what() << "\n";
    return 1;
  }
}
