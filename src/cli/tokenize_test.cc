// rowlm tokenize / detokenize in-process: output format, JSON-lines round
// trips against the library, and errors that name the bad input.

#include "cli/tokenize.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A byte-fallback BPE whose every string round-trips: <0xNN> pieces, a few
// merges, <s> as a template-added special token.
fs::path write_tokenizer_dir() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}};
  int id = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = id++;
  }
  for (const char* p : {"h", "e", "l", "o", "he", "ll", "hell", "hello"}) vocab[p] = id++;
  const json doc = {
      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"h e", "l l", "he ll", "hell o"}},
        {"byte_fallback", true},
        {"unk_token", "<unk>"}}}};
  const fs::path dir = fs::temp_directory_path() / ("rowlm_tokenize_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << doc.dump();
  return dir;
}

class TokenizeCommand : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = write_tokenizer_dir(); }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs a command with `input` on stdin; returns its stdout.
  std::string run(int (*command)(const std::vector<std::string>&), std::vector<std::string> args,
                  const std::string& input = "") {
    std::istringstream in(input);
    std::ostringstream out;
    auto* old_in = std::cin.rdbuf(in.rdbuf());
    auto* old_out = std::cout.rdbuf(out.rdbuf());
    try {
      command(args);
    } catch (...) {
      std::cin.rdbuf(old_in);
      std::cout.rdbuf(old_out);
      throw;
    }
    std::cin.rdbuf(old_in);
    std::cout.rdbuf(old_out);
    return out.str();
  }
  std::string error_of(int (*command)(const std::vector<std::string>&), std::vector<std::string> args,
                       const std::string& input = "") {
    try {
      run(command, std::move(args), input);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path dir_;
};

TEST_F(TokenizeCommand, TextGivesIdsObject) {
  const Tokenizer tok = Tokenizer::load(dir_);
  const std::string text = "hello h\xC3\xA9llo";
  const json out = json::parse(run(&tokenize_command, {"--tokenizer", dir_.string(), "--text", text}));
  EXPECT_EQ(out, json({{"ids", tok.encode(text)}}));
  const json plain = json::parse(
      run(&tokenize_command, {"--tokenizer", (dir_ / "tokenizer.json").string(), "--no-special", "--text", text}));
  EXPECT_EQ(plain["ids"].get<std::vector<int32_t>>(), tok.encode(text, false));
  EXPECT_EQ(plain["ids"].get<std::vector<int32_t>>().front(), *tok.token_to_id("hello"));
}

// Blank lines are skipped, as rowlm batch skips them, by both commands.
TEST_F(TokenizeCommand, JsonlSkipsBlankLines) {
  const std::string dense = run(&tokenize_command, {"--tokenizer", dir_.string(), "--jsonl"}, "\"hello\"\n\"ll\"\n");
  const std::string sparse =
      run(&tokenize_command, {"--tokenizer", dir_.string(), "--jsonl"}, "\n\"hello\"\n  \r\n\n\"ll\"\n\n");
  EXPECT_EQ(sparse, dense);
  EXPECT_EQ(run(&detokenize_command, {"--tokenizer", dir_.string(), "--jsonl"}, "\n" + dense + "\t\n"),
            run(&detokenize_command, {"--tokenizer", dir_.string(), "--jsonl"}, dense));
}

TEST_F(TokenizeCommand, JsonlRoundTripsInOrder) {
  const std::vector<std::string> texts = {"hello", "", "\xF0\x9F\x98\x80 hell\no", "<s>x", "ll\t"};
  std::string input;
  for (const auto& t : texts) input += json(t).dump() + "\n";
  const std::string ids = run(&tokenize_command, {"--tokenizer", dir_.string(), "--jsonl", "--no-special"}, input);
  const std::string back = run(&detokenize_command, {"--tokenizer", dir_.string(), "--jsonl"}, ids);
  std::istringstream lines(back);
  std::string line;
  std::size_t i = 0;
  for (; std::getline(lines, line); ++i) {
    ASSERT_LT(i, texts.size());
    EXPECT_EQ(json::parse(line).get<std::string>(), texts[i]);
  }
  EXPECT_EQ(i, texts.size());
}

TEST_F(TokenizeCommand, DetokenizeIds) {
  const Tokenizer tok = Tokenizer::load(dir_);
  const auto ids = tok.encode("hello");
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  EXPECT_EQ(json::parse(run(&detokenize_command, {"--tokenizer", dir_.string(), "--ids", list}))["text"], "<s>hello");
  EXPECT_EQ(json::parse(run(&detokenize_command, {"--tokenizer", dir_.string(), "--ids", list, "--skip-special"}))["text"],
            "hello");
  EXPECT_EQ(json::parse(run(&detokenize_command, {"--tokenizer", dir_.string(), "--ids", ""}))["text"], "");
}

TEST_F(TokenizeCommand, ErrorsNameTheProblem) {
  const std::string t = dir_.string();
  EXPECT_NE(error_of(&tokenize_command, {"--tokenizer", "/no/such/dir", "--text", "x"}).find("/no/such/dir"),
            std::string::npos);
  EXPECT_NE(error_of(&tokenize_command, {"--tokenizer", t}).find("either --text or --jsonl"), std::string::npos);
  EXPECT_NE(error_of(&tokenize_command, {"--tokenizer", t, "--jsonl"}, "\"ok\"\n{bad\n").find("stdin line 2"),
            std::string::npos);
  EXPECT_NE(error_of(&tokenize_command, {"--tokenizer", t, "--jsonl"}, "\"ok\"\n\"ok\"\n42\n").find("stdin line 3: expected a JSON string"),
            std::string::npos);
  EXPECT_NE(error_of(&detokenize_command, {"--tokenizer", t, "--ids", "1,x"}).find("--ids"), std::string::npos);
  EXPECT_NE(error_of(&detokenize_command, {"--tokenizer", t, "--ids", "1,99999"}).find("99999"), std::string::npos);
  EXPECT_NE(error_of(&detokenize_command, {"--tokenizer", t, "--jsonl"}, "[1]\n[1, \"a\"]\n").find("stdin line 2"),
            std::string::npos);
  EXPECT_NE(error_of(&detokenize_command, {"--tokenizer", t, "--jsonl"}, "[-5]\n").find("stdin line 1"),
            std::string::npos);
  EXPECT_NE(error_of(&tokenize_command, {"--tokenizer", t, "--jsonl"}, "\"\\ud800\"\n").find("stdin line 1"),
            std::string::npos);
}

}  // namespace
}  // namespace rowlm::cli
