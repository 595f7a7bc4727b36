// The cost of structured outputs' token masks on a real vocabulary: the
// token table's build, a mask computed for a new automaton state (a cache
// miss), and a cached mask applied to a logits row (every constrained
// token), along the tokens of a JSON text of the schema.
//
//   constrain_bench TOKENIZER SCHEMA_FILE TEXT_FILE
//
// TEXT_FILE holds a JSON value the schema admits; it is tokenized and
// walked token by token. Prints one JSON object.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "constrain/automaton.h"
#include "constrain/json_constraint.h"
#include "constrain/token_masks.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw rowlm::Error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace rowlm;
  using namespace rowlm::constrain;
  if (argc != 4) {
    std::cerr << "usage: constrain_bench TOKENIZER SCHEMA_FILE TEXT_FILE\n";
    return 2;
  }
  try {
    const Tokenizer tok = Tokenizer::load(argv[1]);
    const auto grammar = Grammar::from_schema(nlohmann::json::parse(read_file(argv[2])));
    const std::string text = read_file(argv[3]);
    auto t0 = Clock::now();
    auto table = std::make_shared<const TokenTable>(tok, tok.vocab_size());
    const double table_s = seconds_since(t0);

    // Cold: every state of the walk computed afresh (cache misses).
    const std::vector<int32_t> ids = tok.encode(text, false);
    Automaton automaton(*grammar);
    State s = automaton.initial();
    std::vector<double> cold_ms;
    std::unordered_set<std::string> states;
    for (int32_t id : ids) {
      if (states.insert(s.key()).second) {
        t0 = Clock::now();
        const TokenMask m = compute_mask(automaton, s, *table);
        cold_ms.push_back(1e3 * seconds_since(t0));
        if (!m.test(id)) throw Error("the text's token '" + table->bytes(id) + "' is not allowed: is it valid for the schema?");
      }
      if (!automaton.feed(s, table->bytes(id))) throw Error("the text does not match the schema");
    }
    // Warm: the constraint masking a logits row per token, masks cached.
    MaskCache cache(table);
    std::vector<float> logits(std::size_t(tok.vocab_size()));
    double warm_s = 0;
    for (int pass = 0; pass < 2; ++pass) {
      JsonConstraint c(grammar, cache, {});
      t0 = Clock::now();
      for (int32_t id : ids) {
        std::fill(logits.begin(), logits.end(), 1.0f);
        c.mask(logits);
        c.accept(id);
      }
      if (pass == 1) warm_s = seconds_since(t0);
    }
    std::sort(cold_ms.begin(), cold_ms.end());
    double sum = 0;
    for (double x : cold_ms) sum += x;
    nlohmann::json out = {{"vocab", tok.vocab_size()},
                          {"tokens_with_bytes", table->sorted().size()},
                          {"token_table_build_s", table_s},
                          {"text_tokens", ids.size()},
                          {"distinct_states", cold_ms.size()},
                          {"new_state_mask_ms_mean", sum / double(cold_ms.size())},
                          {"new_state_mask_ms_p50", cold_ms[cold_ms.size() / 2]},
                          {"new_state_mask_ms_max", cold_ms.back()},
                          {"cached_mask_per_token_us", 1e6 * warm_s / double(ids.size())}};
    std::cout << out.dump(1) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "constrain_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
