// The tokenizer built from GGUF metadata against Hugging Face tokenizers:
// each real tokenizer.json (Qwen 3, Llama 3, Gemma 3 with Gemma's
// SentencePiece-style pipeline, which Gemma 4 shares) is reduced to what a
// GGUF file keeps of it, as llama.cpp's converter records it (tokens by id,
// token types, "left right" merges, bos and add_bos; convert_hf_to_gguf's
// get_vocab_base and gguf-py's LlamaHfVocab / SpecialVocab), and the
// tokenizer rebuilt from that must give the reference ids recorded from HF
// tokenizers on the shared corpus (tests/tokenizers/fixtures).

#include "tokenizer/gguf_vocab.h"

#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/test_support.h"

namespace rowlm {
namespace {

using nlohmann::json;
namespace tt = tok::testing;

bool looks_special(const std::string& t) { return t.starts_with("<|") && t.ends_with("|>"); }

// What a GGUF file holds of `dir`'s tokenizer.json: `model` and `pre` as
// llama.cpp would name them.
GgufVocab reduce(const json& tj, const std::string& model, const std::string& pre) {
  GgufVocab v;
  v.model = model;
  v.pre = pre;
  std::map<int64_t, std::string> by_id;
  for (const auto& [text, id] : tj["model"]["vocab"].items()) by_id[id.get<int64_t>()] = text;
  std::map<int64_t, const json*> added;
  for (const json& a : tj["added_tokens"]) {
    added[a["id"].get<int64_t>()] = &a;
    by_id[a["id"].get<int64_t>()] = a["content"].get<std::string>();
  }
  const int64_t n = by_id.rbegin()->first + 1;
  for (int64_t id = 0; id < n; ++id) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      v.tokens.push_back("[PAD" + std::to_string(id) + "]");
      v.types.push_back(int64_t(GgufTokenType::Unused));
      continue;
    }
    const std::string& text = it->second;
    v.tokens.push_back(text);
    GgufTokenType t = GgufTokenType::Normal;
    if (tj["model"].value("unk_token", json()) == text)
      t = GgufTokenType::Unknown;  // as llama.cpp's converter marks <unk>
    else if (auto a = added.find(id); a != added.end())
      t = (*a->second)["special"].get<bool>() || looks_special(text) ? GgufTokenType::Control : GgufTokenType::UserDefined;
    else if (model != "gpt2" && text.size() == 6 && text.starts_with("<0x") && text.ends_with(">"))
      t = GgufTokenType::Byte;
    v.types.push_back(int64_t(t));
  }
  for (const json& m : tj["model"]["merges"])
    v.merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  if (tj["model"].contains("unk_token") && tj["model"]["unk_token"].is_string())
    v.unk = tj["model"]["vocab"][tj["model"]["unk_token"].get<std::string>()].get<int64_t>();
  return v;
}

// What llama.cpp's converter keeps of a SentencePiece model instead of
// merges (tokenizer.model's pieces and scores): SentencePiece scores BPE
// pieces by minus their rank and user-defined, control and byte pieces 0.
// From these, rowlm must derive the merges the tokenizer.json was made with.
void keep_scores_not_merges(GgufVocab& v) {
  v.merges.clear();
  v.scores.assign(v.tokens.size(), 0.0);
  double rank = 0;
  for (std::size_t id = 0; id < v.tokens.size(); ++id)
    if (v.types[id] == int64_t(GgufTokenType::Normal)) v.scores[id] = -rank++;
  v.add_space_prefix = false;
}

// The same with scores that rank each piece where the tokenizer.json's
// first merge making it stands (Llama 2's tokenizer.model ranks, e.g.,
// "▁▁" last, which its ids do not say); the space prefix as llama.cpp
// leaves it for Llama 2 (absent: true).
void keep_ranked_scores_not_merges(GgufVocab& v) {
  std::map<std::string, std::size_t> first;
  for (std::size_t i = 0; i < v.merges.size(); ++i) {
    const std::size_t sp = v.merges[i].find(' ');
    first.emplace(v.merges[i].substr(0, sp) + v.merges[i].substr(sp + 1), i);
  }
  v.scores.assign(v.tokens.size(), 0.0);
  for (std::size_t id = 0; id < v.tokens.size(); ++id)
    if (auto it = first.find(v.tokens[id]); it != first.end()) v.scores[id] = -double(it->second);
  v.merges.clear();
}

enum class Merges { Kept, FromScores, FromRankedScores };

void check(const std::string& name, const std::string& model, const std::string& pre,
           std::optional<std::string> bos_token, Merges merges = Merges::Kept) {
  const json fixture = json::parse(tt::read_text(tt::fixtures_dir() / (name + ".json")));
  const json corpus = json::parse(tt::read_text(tt::fixtures_dir() / "corpus.json"));
  std::string why;
  const auto dir = tt::fetched_tokenizer(name, &why);
  if (!dir) GTEST_SKIP() << why;
  const json tj = json::parse(tt::read_text(*dir / "tokenizer.json"));
  GgufVocab v = reduce(tj, model, pre);
  if (merges == Merges::FromRankedScores) keep_ranked_scores_not_merges(v);
  if (merges == Merges::FromScores) {
    keep_scores_not_merges(v);
    // The derived merges are the tokenizer.json's, in its order.
    const json derived = json::parse(gguf_tokenizer_json(v, name + ".gguf"))["model"]["merges"];
    ASSERT_EQ(derived.size(), tj["model"]["merges"].size());
    for (std::size_t i = 0; i < derived.size(); ++i)
      ASSERT_EQ(derived[i], tj["model"]["merges"][i]) << "merge " << i;
  }
  if (bos_token) {
    for (std::size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == *bos_token) v.bos = int64_t(i);
    v.add_bos = true;
  }
  const Tokenizer tok = tokenizer_from_gguf(v, name + ".gguf");
  const json& cases = fixture["cases"];
  ASSERT_EQ(cases.size(), corpus.size());
  int failures = 0;
  for (std::size_t i = 0; i < cases.size() && failures < 5; ++i) {
    const std::string input = corpus[i].get<std::string>();
    const auto want = cases[i]["ids"].get<std::vector<int32_t>>();
    const bool ok = tok.encode(input, true) == want &&
                    tok.encode(input, false) == cases[i]["plain"].get<std::vector<int32_t>>() &&
                    tok.decode(want, false) == cases[i]["decoded"].get<std::string>() &&
                    tok.decode(want, true) == cases[i]["skipped"].get<std::string>();
    if (!ok) {
      ++failures;
      ADD_FAILURE() << name << " case " << i << " " << json(input).dump() << "\n  ids:       "
                    << json(tok.encode(input, true)).dump() << "\n  reference: " << cases[i]["ids"].dump()
                    << "\n  decoded:   " << json(tok.decode(want, false)).dump()
                    << "\n  reference: " << cases[i]["decoded"].dump()
                    << "\n  skipped:   " << json(tok.decode(want, true)).dump()
                    << "\n  reference: " << cases[i]["skipped"].dump();
    }
  }
}

TEST(GgufVocab, Qwen3) { check("qwen3", "gpt2", "qwen2", std::nullopt); }
TEST(GgufVocab, Llama3) { check("llama3", "gpt2", "llama-bpe", std::nullopt); }
TEST(GgufVocab, Gemma3AsGemma4) { check("gemma3", "gemma4", "", "<bos>"); }
// Gemma 3 GGUFs as llama.cpp converts them: model "llama", scores, no merges.
TEST(GgufVocab, Gemma3FromScores) { check("gemma3", "llama", "", "<bos>", Merges::FromScores); }
// Llama 2 (and Mistral) GGUFs: model "llama" prefixing a space, with merges
// (from a tokenizer.json) or with tokenizer.model's scores.
TEST(GgufVocab, Llama2) { check("llama2", "llama", "", "<s>"); }
TEST(GgufVocab, Llama2FromScores) { check("llama2", "llama", "", "<s>", Merges::FromRankedScores); }

TEST(GgufVocab, ErrorsNameTheKey) {
  auto error_of = [](const GgufVocab& v) {
    try {
      gguf_tokenizer_json(v, "m.gguf");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GgufVocab v;
  v.model = "gpt2";
  v.tokens = {"a", "b"};
  EXPECT_EQ(error_of(v), "no error");
  v.pre = "falcon";
  EXPECT_EQ(error_of(v), "m.gguf: GGUF metadata 'tokenizer.ggml.pre' = 'falcon' is not supported "
                         "(supported: qwen2, llama-bpe, gpt-2, default)");
  v.pre = "";
  v.model = "bert";
  EXPECT_NE(error_of(v).find("'tokenizer.ggml.model' = 'bert' is not supported"), std::string::npos);
  v.model = "llama";
  EXPECT_EQ(error_of(v), "m.gguf: GGUF metadata 'tokenizer.ggml.merges' is missing, and so is "
                         "'tokenizer.ggml.scores': a SentencePiece vocabulary needs one of them");
  v.scores = {0.0};
  EXPECT_NE(error_of(v).find("'tokenizer.ggml.scores' has 1 entries for 2 tokens"), std::string::npos);
  v.scores = {0.0, -1.0};
  EXPECT_EQ(error_of(v), "no error");
  v.tokens[1] = std::string(std::size_t(1) << 16, 'x');  // 2^32 bytes to hash
  EXPECT_NE(error_of(v).find("'tokenizer.ggml.tokens' holds pieces too long to derive merges from (at token 1)"),
            std::string::npos);
  v.tokens[1] = "b";
  v.scores.clear();
  v.add_space_prefix = std::nullopt;
  v.model = "gpt2";
  v.types = {1};
  EXPECT_NE(error_of(v).find("'tokenizer.ggml.token_type' has 1 entries for 2 tokens"), std::string::npos);
  v.types = {1, 9};
  EXPECT_NE(error_of(v).find("'tokenizer.ggml.token_type' [1] = 9 is not a token type"), std::string::npos);
  v.types = {};
  v.bos = 7;
  EXPECT_NE(error_of(v).find("'tokenizer.ggml.bos_token_id' = 7 is not a token id"), std::string::npos);
  v.bos = std::nullopt;
  v.add_bos = true;
  EXPECT_NE(error_of(v).find("'tokenizer.ggml.add_bos_token' is true but bos_token_id is missing"), std::string::npos);
  v.add_bos = std::nullopt;
  v.tokens = {"a", "a"};
  EXPECT_NE(error_of(v).find("'tokenizer.ggml.tokens' lists 'a' twice"), std::string::npos);
}

}  // namespace
}  // namespace rowlm
