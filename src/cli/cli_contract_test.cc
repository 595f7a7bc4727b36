// The rowlm command end to end: the contracts automated checks rely on
// (score, generate --json, perplexity, batch, inspect) against the
// transformers fixtures, and clear errors for bad arguments.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"
#include "core/npy.h"
#include "io/temp_dir.h"
#include "model/gemma4_assistant_test_util.h"

namespace rowlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using cli::testing::CommandRun;

const std::string kSource = ROWLM_SOURCE_DIR;

// Runs `rowlm ARGS` with stdin from `input`, capturing both streams.
CommandRun rowlm(const std::string& args, const std::string& input = "") { return cli::testing::run_rowlm(args, input); }

json fixture(const std::string& path) {
  std::ifstream in(kSource + "/tests/fixtures/" + path);
  return json::parse(in);
}

std::string join(const std::vector<int>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

TEST(Cli, ScoreWritesReferenceLogits) {
  const auto ref = fixture("gemma4/e_series/reference.json");
  const std::string out = (fs::temp_directory_path() / "rowlm_score_test.npy").string();
  const CommandRun r = rowlm("score " + kSource + "/tests/fixtures/gemma4/e_series --ids " +
                      join(ref["ids_a"].get<std::vector<int>>()) + " --logits-out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  const Tensor got = read_npy(out), want = read_npy(kSource + "/tests/fixtures/gemma4/e_series/logits_a.npy");
  ASSERT_EQ(got.shape(), want.shape());
  float diff = 0;
  for (int64_t i = 0; i < got.numel(); ++i) diff = std::max(diff, std::fabs(got.data<float>()[i] - want.data<float>()[i]));
  EXPECT_LE(diff, 1e-4f);
  fs::remove(out);
}

TEST(Cli, GenerateJsonIsGreedyAndMatchesTransformers) {
  for (const char* name : {"e_series", "moe_keqv"}) {
    const auto ref = fixture(std::string("gemma4/") + name + "/reference.json");
    const auto want = ref["greedy_tokens"].get<std::vector<int>>();
    const CommandRun r = rowlm("generate " + kSource + "/tests/fixtures/gemma4/" + name + " --ids " +
                        join(ref["greedy_prompt"].get<std::vector<int>>()) + " --max-tokens " +
                        std::to_string(want.size()) + " --ignore-eos --json");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["token_ids"].get<std::vector<int>>(), want) << name;
  }
}

// The bundled models: greedy continuations and perplexity against
// transformers (tests/fixtures/tiny, made by tools/train_tiny/evaluate.py),
// with f32 activations and with --matmul-precision bf16 (activations rounded
// to bf16 against the bf16 weights: the same greedy tokens, perplexity within
// the same 0.5%).
TEST(Cli, BundledModelsMatchTransformers) {
  const auto ref = fixture("tiny/reference.json");
  for (const std::string precision : {"f32", "bf16"}) {
    for (const auto& [role, dir] : {std::pair{"target", "rowlm-tiny"}, std::pair{"draft", "rowlm-tiny-draft"}}) {
      const auto& m = ref["models"][role];
      const std::string flags = " --matmul-precision " + precision;
      for (const auto& g : m["greedy"]) {
        const auto want = g["greedy_tokens"].get<std::vector<int>>();
        const CommandRun r = rowlm("generate " + kSource + "/models/" + dir + " --ids " +
                                   join(g["prompt_ids"].get<std::vector<int>>()) + " --max-tokens " +
                                   std::to_string(want.size()) + " --ignore-eos --json --kv-codec f32" + flags);
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(json::parse(r.out)["token_ids"].get<std::vector<int>>(), want)
            << dir << flags << ": " << g["prompt"];
      }
      const CommandRun p = rowlm("perplexity " + kSource + "/models/" + dir + " --file " + kSource +
                                 "/tests/fixtures/tiny/heldout_sample.txt" + flags);
      ASSERT_EQ(p.status, 0) << p.err;
      const double got = json::parse(p.out)["perplexity"], want = m["heldout_sample_ppl"];
      EXPECT_LE(std::fabs(got - want) / want, 0.005) << dir << flags << ": rowlm " << got << " vs transformers " << want;
      EXPECT_EQ(json::parse(p.out)["tokens"].get<int>(), ref["heldout_sample_tokens"].get<int>());
    }
  }
}

// Results are written as requests finish, each with its id.
TEST(Cli, BatchWritesOneResultPerRequest) {
  const std::string input =
      R"({"id": "a", "prompt": "In the beginning", "max_tokens": 5, "temperature": 0, "logprobs": 2})" "\n"
      R"({"id": "b", "prompt": "A river is", "max_tokens": 7, "temperature": 0.8, "seed": 3, "arrival_step": 2})" "\n"
      R"({"ids": [2, 500, 600], "max_tokens": 3, "temperature": 0})" "\n";
  const CommandRun r = rowlm("batch " + kSource + "/models/rowlm-tiny --input - --output - --token-budget 4", input);
  ASSERT_EQ(r.status, 0) << r.err;
  std::stringstream lines(r.out);
  std::map<std::string, json> by_id;
  for (std::string l; std::getline(lines, l);) {
    const json j = json::parse(l);
    EXPECT_TRUE(by_id.emplace(j["id"].dump(), j).second) << "two results for " << j["id"];
  }
  ASSERT_EQ(by_id.size(), 3u) << r.out;
  ASSERT_TRUE(by_id.count("\"a\"") && by_id.count("\"b\"") && by_id.count("3")) << r.out;  // 3: the line number
  const std::vector<json> out = {by_id["\"a\""], by_id["\"b\""], by_id["3"]};
  EXPECT_EQ(out[0]["token_ids"].size(), 5u);
  EXPECT_EQ(out[0]["logprobs"].size(), 5u);
  for (const auto& o : out) {
    for (const char* k : {"token_ids", "text", "finish_reason", "usage", "timings"}) EXPECT_TRUE(o.contains(k)) << k;
  }
  // The same request alone through generate gives the same tokens.
  const CommandRun solo = rowlm("generate " + kSource + "/models/rowlm-tiny \"A river is\" --max-tokens 7 --temperature 0.8 --seed 3 --json");
  ASSERT_EQ(solo.status, 0) << solo.err;
  EXPECT_EQ(json::parse(solo.out)["token_ids"], out[1]["token_ids"]);
}

// batch loses nothing: bad lines get error records and the rest run; the
// output is not touched before the model loads; --resume continues a run
// that was cut short (a partial last line included) without redoing what it
// finished; a far arrival_step does not stall the run.
TEST(Cli, BatchLosesNothing) {
  const fs::path dir = fs::temp_directory_path() / ("rowlm_batch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string in = (dir / "in.jsonl").string(), out = (dir / "out.jsonl").string();
  const std::string m = kSource + "/models/rowlm-tiny";
  std::ofstream(in) << R"({"id": "a", "prompt": "In the beginning", "max_tokens": 4, "temperature": 0})" "\n"
                    << "{not json\n"
                    << R"({"id": "c", "prompt": "x", "colour": "red"})" "\n"
                    << R"({"id": "d", "prompt": "A river is", "max_tokens": 3, "temperature": 0})" "\n"
                    << R"({"id": "e", "prompt": "Late", "max_tokens": 2, "temperature": 0, "arrival_step": 1000000})" "\n";
  auto read_lines = [&] {
    std::map<std::string, std::vector<json>> by_id;
    std::ifstream f(out);
    for (std::string l; std::getline(f, l);) {
      const json j = json::parse(l);
      by_id[j["id"].dump()].push_back(j);
    }
    return by_id;
  };

  std::ofstream(out) << "keep me\n";
  CommandRun r = rowlm("batch /nonexistent/model --input " + in + " --output " + out);
  EXPECT_NE(r.status, 0);
  {
    std::ifstream f(out);
    std::stringstream kept;
    kept << f.rdbuf();
    EXPECT_EQ(kept.str(), "keep me\n");  // not emptied by a run that could not start
  }

  r = rowlm("batch " + m + " --input " + in + " --output " + out);
  EXPECT_EQ(r.status, 1) << r.err;  // two lines failed
  auto by_id = read_lines();
  ASSERT_EQ(by_id.size(), 5u) << r.err;
  EXPECT_EQ(by_id["\"a\""][0]["token_ids"].size(), 4u);
  EXPECT_EQ(by_id["\"d\""][0]["token_ids"].size(), 3u);
  EXPECT_EQ(by_id["\"e\""][0]["token_ids"].size(), 2u);
  EXPECT_EQ(by_id["2"][0]["finish_reason"], "error");
  EXPECT_NE(by_id["2"][0]["error"].get<std::string>().find("line 2: invalid JSON"), std::string::npos);
  EXPECT_NE(by_id["\"c\""][0]["error"].get<std::string>().find("unknown field 'colour'"), std::string::npos);
  const json a = by_id["\"a\""][0];

  // A run killed after "a", in the middle of writing "d".
  std::ofstream(out) << a.dump() << "\n" << R"({"id": "d", "tok)";
  r = rowlm("batch " + m + " --input " + in + " --output " + out + " --resume");
  EXPECT_EQ(r.status, 1) << r.err;
  by_id = read_lines();  // every line parses: the partial one is gone
  ASSERT_EQ(by_id.size(), 5u);
  for (const auto& [id, lines] : by_id) EXPECT_EQ(lines.size(), 1u) << id;
  EXPECT_EQ(by_id["\"a\""][0], a);
  EXPECT_EQ(by_id["\"d\""][0]["token_ids"].size(), 3u);
  EXPECT_NE(r.err.find("resuming: 1 results"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// The chat keeps the conversation's KV: the second turn's prompt reuses the
// first turn's tokens, and /reset forgets them.
TEST(Cli, ChatReusesTheConversationKv) {
  const CommandRun r = rowlm("chat " + kSource + "/models/rowlm-tiny --stats --temperature 0 --max-tokens 12",
                             "Define mountain.\nDefine river.\n/reset\nDefine river.\n/exit\n");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::pair<int, int>> turns;  // (prompt tokens, reused)
  std::stringstream err(r.err);
  for (std::string line; std::getline(err, line);) {
    int prompt = 0, reused = 0;
    if (std::sscanf(line.c_str(), "(%d prompt tokens, %d reused", &prompt, &reused) == 2) turns.emplace_back(prompt, reused);
  }
  ASSERT_EQ(turns.size(), 3u) << r.err;
  EXPECT_EQ(turns[0].second, 0);
  // Turn 2 reuses what turn 1 left in the KV (its prompt and reply, block-aligned).
  EXPECT_GT(turns[1].second, turns[0].first - 16);
  EXPECT_GT(turns[1].first, turns[0].first);
  // After /reset the conversation starts over: same prompt as a first turn.
  EXPECT_LT(turns[2].first, turns[1].first);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '>'), 5) << r.out;  // one prompt per input line
}

// --thinking puts Gemma 4's <|think|> system turn in the prompt (eight more
// tokens: <|turn>system\n<|think|>\n<turn|>\n); a format without a thinking
// mode refuses it.
TEST(Cli, ChatThinkingAsksTheFormatForIt) {
  const std::string chat = "chat " + kSource + "/models/rowlm-tiny --stats --temperature 0 --max-tokens 4";
  auto prompt_tokens = [](const std::string& err) {
    int prompt = -1, reused = 0;
    std::stringstream lines(err);
    for (std::string line; std::getline(lines, line);)
      if (std::sscanf(line.c_str(), "(%d prompt tokens, %d reused", &prompt, &reused) == 2) break;
    return prompt;
  };
  const CommandRun plain = rowlm(chat, "hi\n/exit\n");
  const CommandRun thinking = rowlm(chat + " --thinking", "hi\n/exit\n");
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(thinking.status, 0) << thinking.err;
  EXPECT_EQ(prompt_tokens(thinking.err), prompt_tokens(plain.err) + 8) << thinking.err;
  const CommandRun refused = rowlm(chat + " --thinking --chat-format llama3", "hi\n/exit\n");
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.err.find("--thinking"), std::string::npos) << refused.err;
}

// Speculative decoding end to end: greedy output is plain decoding's, and
// the JSON reports what was drafted; --draft takes a draft model, "ngram"
// or a Gemma 4 assistant (here a random one for the bundled model).
TEST(Cli, DraftFlagsSpeculateAndReportIt) {
  const std::string m = kSource + "/models/rowlm-tiny";
  const std::string args = " \"And the king said unto\" --max-tokens 40 --ignore-eos --json --threads 1";
  const CommandRun plain = rowlm("generate " + m + args);
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_FALSE(json::parse(plain.out).contains("speculative"));
  const TempDir assistant("rowlm_cli_assistant");
  test::write_random_assistant(assistant.path(), test::AssistantShape{}, 5);
  for (const std::string& draft : {kSource + "/models/rowlm-tiny-draft", std::string("ngram"), assistant.path()}) {
    const CommandRun r = rowlm("generate " + m + args + " --draft " + draft + " --draft-tokens 3");
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["token_ids"], json::parse(plain.out)["token_ids"]) << draft;
    EXPECT_GT(j["speculative"]["proposed"].get<int>(), 0) << draft;
    EXPECT_LE(j["speculative"]["accepted"].get<int>(), j["speculative"]["proposed"].get<int>()) << draft;
  }
  const CommandRun b = rowlm("batch " + m + " --input - --output - --draft ngram --threads 1",
                             R"({"id": 1, "prompt": "In the beginning", "max_tokens": 30, "temperature": 0})" "\n");
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_GT(json::parse(b.out)["speculative"]["proposed"].get<int>(), 0);
  const CommandRun bad = rowlm("generate " + m + " hi --threads 1 --draft " + kSource + "/tests/fixtures/gemma4/bf16");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("vocabulary"), std::string::npos) << bad.err;
  // An assistant made for another model is refused, naming the mismatch.
  const CommandRun other = rowlm("generate " + kSource + "/tests/fixtures/gemma4/bf16 --ids 1,2 --threads 1 --draft " +
                                 assistant.path());
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.err.find("cannot use the assistant"), std::string::npos) << other.err;
}

TEST(Cli, InspectReportsSizeAndKvCost) {
  const CommandRun r = rowlm("inspect " + kSource + "/models/rowlm-tiny --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  // transformers counts 17,790,944 parameters; rowlm also counts the ten
  // layer_scalar values, which transformers keeps as buffers.
  EXPECT_EQ(j["parameters"].get<int64_t>(), 17790944 + 10);
  // Per token: 5 sliding donor layers (1 KV head x 64) and 1 full (1 x 128), K and V.
  EXPECT_EQ(j["kv_bytes_per_token"]["bf16"]["all_layers"].get<int64_t>(), 5 * 2 * 64 * 2 + 2 * 128 * 2);
  EXPECT_LT(j["kv_bytes_per_token"]["q4"]["all_layers"].get<double>(),
            0.3 * j["kv_bytes_per_token"]["bf16"]["all_layers"].get<double>() + 1);
}

// rowlm quantize writes a directory every command reads: inspect lists each
// tensor's format and bytes (adding up to the weight bytes), generate runs
// on it, and bad requests exit 1 naming the problem.
TEST(Cli, QuantizeWritesACheckpointTheOtherCommandsRun) {
  const fs::path dst = fs::temp_directory_path() / ("rowlm_quantize_" + std::to_string(::getpid()));
  fs::remove_all(dst);
  const CommandRun q = rowlm("quantize " + kSource + "/models/rowlm-tiny " + dst.string() +
                             " --bits 4 --group-size 64 --override mlp.down_proj=8/32");
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_NE(q.err.find("quantized 74 matrices to q4/64"), std::string::npos) << q.err;
  EXPECT_TRUE(fs::exists(dst / "tokenizer.json"));
  const CommandRun r = rowlm("inspect " + dst.string() + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  std::size_t bytes = 0, q4 = 0, q8 = 0;
  for (const json& t : j["tensors"]) {
    bytes += t["bytes"].get<std::size_t>();
    const std::string format = t["format"];
    q4 += format.rfind("q4/64 (bf16 scales)", 0) == 0;
    q8 += format.rfind("q8/32 (bf16 scales)", 0) == 0;
  }
  EXPECT_EQ(q8, 10u);  // one down_proj per layer
  EXPECT_EQ(q4, 64u);
  EXPECT_EQ(bytes, j["weight_bytes"].get<std::size_t>());
  EXPECT_EQ(j["parameters"].get<int64_t>(), 17790944 + 10);  // a quantized matrix counts its values
  const CommandRun g = rowlm("generate " + dst.string() + " --ids 2,651,1602 --max-tokens 8 --json");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(json::parse(g.out)["token_ids"].size(), 8u);
  const CommandRun again = rowlm("quantize " + dst.string() + " " + dst.string() + "_2");
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.err.find("already quantized"), std::string::npos) << again.err;
  const CommandRun bad = rowlm("quantize " + kSource + "/models/rowlm-tiny " + dst.string() + "_3 --bits 7");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("bits must be"), std::string::npos) << bad.err;
  fs::remove_all(dst);
  fs::remove_all(dst.string() + "_2");
  fs::remove_all(dst.string() + "_3");
}

// Qwen 3, the second family: every command runs on its fixtures, with the
// same contracts as Gemma 4 (score and generate --ids against transformers,
// batch equal to solo generate, inspect's counts, the tokenizer against HF
// tokenizers, ChatML for --chat).
TEST(Cli, Qwen3RunsEveryCommand) {
  const std::string q = kSource + "/tests/fixtures/qwen3/";
  {
    const auto ref = fixture("qwen3/gqa_tied/reference.json");
    const std::string out = (fs::temp_directory_path() / "rowlm_qwen3_score.npy").string();
    const CommandRun r = rowlm("score " + q + "gqa_tied --ids " + join(ref["ids_a"].get<std::vector<int>>()) +
                               " --logits-out " + out);
    ASSERT_EQ(r.status, 0) << r.err;
    const Tensor got = read_npy(out), want = read_npy(q + "gqa_tied/logits_a.npy");
    ASSERT_EQ(got.shape(), want.shape());
    float diff = 0;
    for (int64_t i = 0; i < got.numel(); ++i) diff = std::max(diff, std::fabs(got.data<float>()[i] - want.data<float>()[i]));
    EXPECT_LE(diff, 1e-4f);
    fs::remove(out);
  }
  for (const char* name : {"mqa_untied", "sliding_bias"}) {
    const auto ref = fixture(std::string("qwen3/") + name + "/reference.json");
    const auto want = ref["greedy_tokens"].get<std::vector<int>>();
    const CommandRun r = rowlm("generate " + q + name + " --ids " + join(ref["greedy_prompt"].get<std::vector<int>>()) +
                               " --max-tokens " + std::to_string(want.size()) + " --ignore-eos --json");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["token_ids"].get<std::vector<int>>(), want) << name;
  }
  const std::string chat = q + "chat";
  {
    const CommandRun r = rowlm("inspect " + chat + " --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["architecture"], "qwen3");
    EXPECT_EQ(j["parameters"].get<int64_t>(), 92576);  // transformers' count (make_qwen3_fixtures.py)
    // 2 layers, K and V of 2 KV heads x 24, bf16.
    EXPECT_EQ(j["kv_bytes_per_token"]["bf16"]["all_layers"].get<int64_t>(), 2 * 2 * 2 * 24 * 2);
  }
  {
    const auto ref = fixture("qwen3/chat/reference.json");
    const CommandRun r = rowlm("tokenize --tokenizer " + chat + " --text \"" +
                               ref["tokenizer_sample"]["text"].get<std::string>() + "\"");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["ids"], ref["tokenizer_sample"]["ids"]);
  }
  {
    const std::string input = R"({"id": "a", "prompt": "the cat", "max_tokens": 6, "temperature": 0})" "\n"
                              R"({"id": "b", "prompt": "on the mat", "max_tokens": 5, "temperature": 0.9, "seed": 4})" "\n";
    const CommandRun r = rowlm("batch " + chat + " --input - --output -", input);
    ASSERT_EQ(r.status, 0) << r.err;
    std::stringstream lines(r.out);
    std::map<std::string, json> by_id;  // results come as requests finish
    for (std::string l; std::getline(lines, l);) {
      const json j = json::parse(l);
      by_id[j["id"].get<std::string>()] = j;
    }
    ASSERT_EQ(by_id.size(), 2u) << r.out;
    const CommandRun solo = rowlm("generate " + chat + " \"on the mat\" --max-tokens 5 --temperature 0.9 --seed 4 --json");
    ASSERT_EQ(solo.status, 0) << solo.err;
    EXPECT_EQ(json::parse(solo.out)["token_ids"], by_id["b"]["token_ids"]);
  }
  {
    // ChatML: <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n is 11 tokens in this vocabulary.
    const CommandRun r = rowlm("generate " + chat + " --chat hi --max-tokens 3 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const CommandRun t = rowlm("tokenize --tokenizer " + chat +
                               " --no-special --text \"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n\"");
    ASSERT_EQ(t.status, 0) << t.err;
    EXPECT_EQ(json::parse(r.out)["usage"]["prompt_tokens"].get<std::size_t>(), json::parse(t.out)["ids"].size());
  }
}

// A GGUF file (tests/fixtures/gguf/qwen3_chat_f32.gguf: the qwen3/chat
// fixture as llama.cpp's converter writes it) runs like the directory it was
// made from: the same tokens, logits, tokenization and chat prompt.
// --tensor-parallel 2 (docs/design/tensor-parallel.md) through score and
// generate: transformers' logits and greedy tokens, as at 1 shard.
TEST(Cli, TensorParallelKeepsTheFixturesAnswers) {
  const std::string q = kSource + "/tests/fixtures/qwen3/";
  const auto ref = fixture("qwen3/gqa_tied/reference.json");
  const std::string out = (fs::temp_directory_path() / "rowlm_tp2_score.npy").string();
  const CommandRun r = rowlm("score " + q + "gqa_tied --tensor-parallel 2 --ids " +
                             join(ref["ids_a"].get<std::vector<int>>()) + " --logits-out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  const Tensor got = read_npy(out), want = read_npy(q + "gqa_tied/logits_a.npy");
  fs::remove(out);
  ASSERT_EQ(got.shape(), want.shape());
  float diff = 0;
  for (int64_t i = 0; i < got.numel(); ++i) diff = std::max(diff, std::fabs(got.data<float>()[i] - want.data<float>()[i]));
  EXPECT_LE(diff, 1e-4f);
  const auto greedy = ref["greedy_tokens"].get<std::vector<int>>();
  const CommandRun g = rowlm("generate " + q + "gqa_tied --tensor-parallel 2 --ids " +
                             join(ref["greedy_prompt"].get<std::vector<int>>()) + " --max-tokens " +
                             std::to_string(greedy.size()) + " --kv-codec f32 --ignore-eos --json");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(json::parse(g.out)["token_ids"].get<std::vector<int>>(), greedy);
}

TEST(Cli, GgufFileRunsLikeItsModelDirectory) {
  const std::string dir = kSource + "/tests/fixtures/qwen3/chat";
  const std::string gguf = kSource + "/tests/fixtures/gguf/qwen3_chat_f32.gguf";
  for (const std::string& args :
       {std::string("generate MODEL \"the cat sat\" --max-tokens 6 --ignore-eos --json"),
        std::string("generate MODEL \"on the mat\" --max-tokens 5 --temperature 0.9 --seed 4 --json"),
        std::string("generate MODEL --chat hi --max-tokens 3 --json"),
        std::string("tokenize --tokenizer MODEL --text \"the cat <|im_end|> sat\""),
        std::string("detokenize --tokenizer MODEL --ids 104,101,277,286")}) {
    auto with = [&](const std::string& model) {
      std::string a = args;
      a.replace(a.find("MODEL"), 5, model);
      const CommandRun r = rowlm(a);
      EXPECT_EQ(r.status, 0) << a << "\n" << r.err;
      json j = json::parse(r.out);
      if (j.contains("timings")) j.erase("timings");
      return j;
    };
    EXPECT_EQ(with(gguf), with(dir)) << args;
  }
  const std::string out_dir = (fs::temp_directory_path() / "rowlm_gguf_dir.npy").string();
  const std::string out_gguf = (fs::temp_directory_path() / "rowlm_gguf_file.npy").string();
  ASSERT_EQ(rowlm("score " + dir + " --ids 5,17,9,200 --logits-out " + out_dir).status, 0);
  ASSERT_EQ(rowlm("score " + gguf + " --ids 5,17,9,200 --logits-out " + out_gguf).status, 0);
  const Tensor a = read_npy(out_dir), b = read_npy(out_gguf);
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  fs::remove(out_dir);
  fs::remove(out_gguf);
  const CommandRun r = rowlm("inspect " + gguf + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["parameters"].get<int64_t>(), 92576);
  // perplexity reads the file's tokenizer too; this model has no <bos>, so
  // both stop at the same error after tokenizing.
  const std::string text = kSource + "/tests/fixtures/tiny/heldout_sample.txt";
  const CommandRun p_dir = rowlm("perplexity " + dir + " --file " + text);
  const CommandRun p_gguf = rowlm("perplexity " + gguf + " --file " + text);
  EXPECT_NE(p_dir.err.find("no bos_token_id"), std::string::npos) << p_dir.err;
  EXPECT_EQ(p_gguf.status, p_dir.status);
  EXPECT_EQ(p_gguf.err, p_dir.err);
}

// bench through the engine on a model file, profiled: the steps' operations
// are reported per step, and the profiled run generates what was asked.
TEST(Cli, BenchProfilesTheEngineOnAModelFile) {
  const std::string gguf = kSource + "/tests/fixtures/gguf/qwen3_chat_f32.gguf";
  const CommandRun r =
      rowlm("bench --device cpu --threads 1 --model " + gguf + " --concurrency 1,2 --prompt-tokens 6 --gen-tokens 4 --profile");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const json& run : j["runs"]) {
    EXPECT_EQ(run["generated_tokens"].get<int>(), 4 * run["concurrency"].get<int>()) << run.dump();
    std::set<std::string> ops;
    for (const json& op : run["profile_per_step"]["ops"]) ops.insert(op["op"].get<std::string>());
    EXPECT_TRUE(ops.count("matmul") && ops.count("attention")) << run.dump();
  }
}

TEST(Cli, BadArgumentsGiveClearErrors) {
  struct Case {
    std::string args, expect;
  };
  const std::string m = kSource + "/models/rowlm-tiny";
  for (const Case& c : std::vector<Case>{
           {"frobnicate", "unknown command"},
           {"generate", "missing MODEL_DIR"},
           {"generate /nonexistent/model \"hi\"", "does not exist"},
           {"generate " + m + " \"hi\" --max-tokens lots", "--max-tokens"},
           {"generate " + m + " \"hi\" --temperature -1", "temperature"},
           {"generate " + m + " \"hi\" --kv-codec q3", "q3"},
           {"generate " + m + " \"hi\" --matmul-precision fp8", "--matmul-precision"},
           {"perplexity " + m + " --file " + kSource + "/tests/fixtures/tiny/heldout_sample.txt --matmul-precision f64",
            "--matmul-precision"},
           {"generate " + m + " --ids 1,x,3", "--ids"},
           {"generate " + m + " --ids 1,99999999", "vocabulary"},
           {"generate " + m + " \"hi\" --bogus", "unknown option --bogus"},
           {"score " + m + " --ids 1,2", "--logits-out"},
           {"perplexity " + m + " --file /nonexistent.txt", "cannot open"},
           {"batch " + m + " --input -", "line"},
           {"generate " + m + " \"hi\" --tensor-parallel 0", "--tensor-parallel"},
           {"generate " + m + " \"hi\" --tensor-parallel 2", "has 1 KV head"},  // rowlm-tiny: MQA
       }) {
    const CommandRun r = rowlm(c.args, "{\"prompt\": 5}\n");
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\nstderr: " << r.err;
  }
}

}  // namespace
}  // namespace rowlm
