// rowlm's tokenizer against Hugging Face tokenizers: for real tokenizer.json
// files (Gemma 3, Llama 3, Qwen 3) and variants of them that exercise every
// supported component, the ids (with and without special tokens) and the
// decodings must equal the reference's, recorded in tests/tokenizers/fixtures
// by tools/tokenizer_ref/make_fixtures.js.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/test_support.h"
#include "tokenizer/tokenizer.h"

namespace rowlm {
namespace {

using nlohmann::json;
namespace tt = tok::testing;

std::string escaped(const std::string& s) { return json(s).dump(); }

void check_fixture(const std::string& name) {
  const json fixture = json::parse(tt::read_text(tt::fixtures_dir() / (name + ".json")));
  const json corpus = json::parse(tt::read_text(tt::fixtures_dir() / "corpus.json"));
  std::string why;
  const auto dir = tt::fetched_tokenizer(fixture["base"].get<std::string>(), &why);
  if (!dir) ROWLM_SKIP_UNLESS_CI(why);
  const std::string text = tt::read_text(*dir / "tokenizer.json");
  const json& overrides = fixture["overrides"];
  const Tokenizer tok = Tokenizer::from_json(text, &overrides, name);
  const json& cases = fixture["cases"];
  ASSERT_EQ(cases.size(), corpus.size());
  ASSERT_GE(cases.size(), 200u);
  int failures = 0;
  for (std::size_t i = 0; i < cases.size() && failures < 10; ++i) {
    const std::string input = corpus[i].get<std::string>();
    const json& c = cases[i];
    const auto ids = tok.encode(input, true);
    const auto plain = tok.encode(input, false);
    const auto want_ids = c["ids"].get<std::vector<int32_t>>();
    const bool ok = ids == want_ids && plain == c["plain"].get<std::vector<int32_t>>() &&
                    tok.decode(want_ids, false) == c["decoded"].get<std::string>() &&
                    tok.decode(want_ids, true) == c["skipped"].get<std::string>();
    if (!ok) {
      ++failures;
      ADD_FAILURE() << name << " case " << i << " " << escaped(input) << "\n  ids:       " << json(ids).dump()
                    << "\n  reference: " << c["ids"].dump() << "\n  plain:     " << json(plain).dump()
                    << "\n  reference: " << c["plain"].dump() << "\n  decoded:   "
                    << escaped(tok.decode(want_ids, false)) << "\n  reference: " << c["decoded"].dump()
                    << "\n  skipped:   " << escaped(tok.decode(want_ids, true))
                    << "\n  reference: " << c["skipped"].dump();
    }
  }
}

TEST(TokenizerReference, Gemma3) { check_fixture("gemma3"); }
TEST(TokenizerReference, Llama3) { check_fixture("llama3"); }
TEST(TokenizerReference, Qwen3) { check_fixture("qwen3"); }
TEST(TokenizerReference, Llama2) { check_fixture("llama2"); }
TEST(TokenizerReference, Gemma3MetaspaceFirst) { check_fixture("gemma3_metaspace_first"); }
TEST(TokenizerReference, Gemma3MetaspaceAlways) { check_fixture("gemma3_metaspace_always"); }
TEST(TokenizerReference, Gemma3Normalizers) { check_fixture("gemma3_normalizers"); }
TEST(TokenizerReference, Qwen3Splits) { check_fixture("qwen3_splits"); }
TEST(TokenizerReference, Llama3Whitespace) { check_fixture("llama3_whitespace"); }
TEST(TokenizerReference, Llama3WhitespaceSplitDigits) { check_fixture("llama3_wsplit_digits"); }

}  // namespace
}  // namespace rowlm
