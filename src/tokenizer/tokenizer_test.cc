// Loading tokenizer.json: the public API on a small file, and clear errors
// for broken files and unsupported components.

#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "tokenizer/json_scan.h"

namespace rowlm {
namespace {

using nlohmann::json;

json small_doc() {
  return {{"added_tokens",
           {{{"id", 0}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
            {{"id", 5}, {"content", "<x>"}, {"special", false}, {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Whitespace"}}},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model",
           {{"type", "BPE"},
            {"vocab", {{"<s>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}, {"\xC3\xA9", 4}}},
            {"merges", json::array({json::array({"a", "b"})})}}}};
}

std::string error_of(const json& doc) {
  try {
    Tokenizer::from_json(doc.dump(), nullptr, "test.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tokenizer, SmallFileApi) {
  const Tokenizer tok = Tokenizer::from_json(small_doc().dump());
  EXPECT_EQ(tok.vocab_size(), 6);  // the added <x> takes id 5
  EXPECT_EQ(tok.encode("ab a<x>b"), (std::vector<int32_t>{3, 1, 5, 2}));
  EXPECT_EQ(tok.token_to_id("ab"), 3);
  EXPECT_EQ(tok.token_to_id("<x>"), 5);
  EXPECT_FALSE(tok.token_to_id("zz"));
  EXPECT_EQ(tok.id_to_token(4), "\xC3\xA9");
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_FALSE(tok.is_special(5));
  EXPECT_EQ(tok.special_token_id("<s>"), 0);
  EXPECT_FALSE(tok.special_token_id("<x>"));
  // Without a decoder, pieces are joined with spaces.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 3, 1}), "<s> ab a");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 3, 1}, true), "ab a");
  EXPECT_THROW(tok.decode(std::vector<int32_t>{6}), Error);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(tok.encode("bad \xFF utf8"), Error);
}

TEST(Tokenizer, LoadsDirectoriesWithTokenizerConfig) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rowlm_tokenizer_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_THROW(Tokenizer::load(dir), Error);  // no tokenizer.json yet
  std::ofstream(dir / "tokenizer.json") << small_doc().dump();
  std::ofstream(dir / "tokenizer_config.json")
      << json({{"bos_token", {{"content", "<s>"}}}, {"eos_token", "<x>"}, {"add_bos_token", true}}).dump();
  const Tokenizer tok = Tokenizer::load(dir);
  EXPECT_EQ(tok.special_tokens().bos, 0);
  EXPECT_EQ(tok.special_tokens().eos, 5);
  EXPECT_EQ(tok.special_tokens().add_bos_token, true);
  EXPECT_FALSE(tok.special_tokens().add_eos_token);
  EXPECT_FALSE(tok.special_tokens().pad);
  std::ofstream(dir / "tokenizer_config.json") << "{broken";
  EXPECT_THROW(Tokenizer::load(dir / "tokenizer.json"), Error);
  fs::remove_all(dir);
  EXPECT_THROW(Tokenizer::load(dir / "tokenizer.json"), Error);
}

TEST(Tokenizer, UnknownComponentsAreNamed) {
  json doc = small_doc();
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}, {{"type", "Punctuation"}}}}};
  EXPECT_NE(error_of(doc).find("pre_tokenizer.pretokenizers[1]: unsupported pre_tokenizer type 'Punctuation'"),
            std::string::npos)
      << error_of(doc);
  doc = small_doc();
  doc["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_NE(error_of(doc).find("unsupported normalizer type 'BertNormalizer'"), std::string::npos);
  doc = small_doc();
  doc["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(error_of(doc).find("unsupported decoder type 'WordPiece'"), std::string::npos);
  doc = small_doc();
  doc["post_processor"] = {{"type", "BertProcessing"}};
  EXPECT_NE(error_of(doc).find("unsupported post_processor type 'BertProcessing'"), std::string::npos);
  doc = small_doc();
  doc["model"] = {{"type", "Unigram"}, {"vocab", json::array({json::array({"a", -1.0})})}};
  EXPECT_NE(error_of(doc).find("unsupported model type 'Unigram'"), std::string::npos) << error_of(doc);
}

TEST(Tokenizer, BrokenFilesGiveClearErrors) {
  json doc = small_doc();
  doc["model"]["merges"] = json::array({"a c"});
  EXPECT_NE(error_of(doc).find("'c' is not in the vocab"), std::string::npos) << error_of(doc);
  doc = small_doc();
  doc["model"]["merges"] = json::array({"a b c"});
  EXPECT_NE(error_of(doc).find("model.merges[0]"), std::string::npos) << error_of(doc);
  doc = small_doc();
  doc["model"]["vocab"]["dup"] = 1;
  EXPECT_NE(error_of(doc).find("id 1 is given to both"), std::string::npos) << error_of(doc);
  // Ids are memory in a dense table: a far one is an error, not 2.4 GB (a fuzzer's find).
  doc = small_doc();
  doc["model"]["vocab"]["far"] = 300000000;
  EXPECT_NE(error_of(doc).find("'far' has the id 300000000, past the largest rowlm accepts (16777215)"),
            std::string::npos)
      << error_of(doc);
  doc = small_doc();
  doc["added_tokens"] = json::array({{{"id", 300000000}, {"content", "<far>"}}});
  EXPECT_NE(error_of(doc).find("added_tokens[0]: id 300000000 is out of range (0 to 16777215)"), std::string::npos)
      << error_of(doc);
  doc = small_doc();
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(["}}}, {"behavior", "Isolated"}};
  EXPECT_NE(error_of(doc).find("does not compile"), std::string::npos) << error_of(doc);
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Sideways"}};
  EXPECT_NE(error_of(doc).find("unknown split behavior 'Sideways'"), std::string::npos) << error_of(doc);
  doc = small_doc();
  doc["model"].erase("vocab");
  EXPECT_NE(error_of(doc).find("model has no vocab"), std::string::npos) << error_of(doc);
  doc = small_doc();
  doc["model"]["dropout"] = 0.1;
  EXPECT_NE(error_of(doc).find("dropout"), std::string::npos);
  doc = small_doc();
  doc["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"SpecialToken", {{"id", "<nope>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                           {"special_tokens", json::object()}};
  EXPECT_NE(error_of(doc).find("'<nope>' is not in special_tokens"), std::string::npos) << error_of(doc);

  const std::string text = small_doc().dump();
  for (std::size_t cut : {std::size_t(0), std::size_t(1), text.size() / 2, text.size() - 1}) {
    EXPECT_THROW(Tokenizer::from_json(text.substr(0, cut)), Error) << cut;
  }
  try {
    Tokenizer::from_json("{\n  \"model\": {\"vocab\": {\"a\": 1,,}}}", nullptr, "f.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f.json: invalid JSON"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::from_json(std::string(100000, '[') + std::string(100000, ']')), Error);
  EXPECT_THROW(Tokenizer::from_json("{\"model\": {\"vocab\": {\"\xFF\": 1}}}"), Error);
}

TEST(JsonScanner, StringsDecodeLikeNlohmann) {
  for (const std::string s : {"plain", "", "tab\\t nl\\n quote\\\" slash\\/ back\\\\", "\\u00e9\\u20AC",
                              "\\ud83d\\ude00 emoji", "raw \xC3\xA9", "\\u0000nul"}) {
    const std::string doc = "\"" + s + "\"";
    tok::JsonScanner sc(doc, "t");
    std::string scratch;
    EXPECT_EQ(std::string(sc.string(scratch)), json::parse(doc).get<std::string>()) << s;
  }
  for (const std::string bad : {"\"\\ud800\"", "\"\\udc00x\"", "\"\\x\"", "\"open", "\"ctl\x01\"", "\"\\u12\""}) {
    tok::JsonScanner sc(bad, "t");
    std::string scratch;
    EXPECT_THROW(sc.string(scratch), Error) << bad;
  }
}

}  // namespace
}  // namespace rowlm
