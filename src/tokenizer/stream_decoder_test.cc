// The streaming decoder against its oracle, Tokenizer::decode of all ids:
// for random id sequences (rich in byte-fallback pieces, partial UTF-8 and
// markers), what the stream returns concatenates to the full decode, every
// chunk is whole UTF-8, and after each token the text so far is a prefix of
// the decode of the ids so far.

#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

#include "tokenizer/test_support.h"
#include "tokenizer/unicode.h"

namespace rowlm {
namespace {

using nlohmann::json;

// A small tokenizer.json: byte pieces, a few words, the given decoder.
std::string small_tokenizer(const json& decoder, bool byte_level_vocab) {
  json vocab = json::object();
  int id = 0;
  vocab["<unk>"] = id++;
  vocab["<s>"] = id++;
  vocab["</s>"] = id++;
  if (byte_level_vocab) {
    // Every byte as its byte-level character, and some multi-byte pieces.
    const char* chars[] = {"Ġ", "a", "b", "Ã", "©", "â", "Ĥ", "¬", "ð", "Ł", "ĺ", "Ģ", "Ċ"};
    for (const char* c : chars) vocab[c] = id++;
    for (const char* p : {"Ġa", "Ã©", "âĤ¬", "ðŁĺĢ", "ðŁ", "ĺĢ", "aĠ", "ĊĊ"}) vocab[p] = id++;
  } else {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      vocab[name] = id++;
    }
    for (const char* p : {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "\xE2\x96\x81" "b", "ab",
                          "\xE2\x96\x81\xE2\x96\x81", "\xC3\xA9", "\xE2\x96\x81\xC3\xA9", " ", "x "})
      vocab[p] = id++;
  }
  json doc = {{"version", "1.0"},
              {"added_tokens",
               json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                            {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                            {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", decoder},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"unk_token", "<unk>"}}}};
  return doc.dump();
}

void check_stream(const Tokenizer& tok, const std::vector<int32_t>& pool, uint32_t seed, int sequences,
                  int max_len, bool skip_special) {
  std::mt19937 rng(seed);
  for (int s = 0; s < sequences; ++s) {
    std::vector<int32_t> ids(1 + rng() % uint32_t(max_len));
    for (auto& id : ids) id = pool[rng() % pool.size()];
    StreamDecoder stream(tok, skip_special);
    std::string got;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const std::string chunk = stream.push(ids[k]);
      ASSERT_EQ(tok::find_invalid_utf8(chunk), std::string::npos) << "chunk is not whole UTF-8";
      got += chunk;
      const std::string so_far = tok.decode(std::span(ids.data(), k + 1), skip_special);
      ASSERT_EQ(so_far.compare(0, got.size(), got), 0)
          << "emitted text is not a prefix of the decode so far (seed " << seed << ", sequence " << s << ")";
    }
    got += stream.finish();
    ASSERT_EQ(got, tok.decode(ids, skip_special)) << "seed " << seed << ", sequence " << s;
    EXPECT_EQ(stream.emitted_bytes(), got.size());
  }
}

// Every id, plus many copies of the pieces that decode to spaces or nothing,
// which is where start-of-text steps and window moves go wrong.
std::vector<int32_t> all_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < tok.vocab_size(); ++i)
    if (tok.id_to_token(i)) ids.push_back(i);
  for (const char* piece : {"\xE2\x96\x81", " ", "\xE2\x96\x81\xE2\x96\x81", "x ", "<s>", "\xC4\xA0"})
    if (auto id = tok.token_to_id(piece))
      for (int k = 0; k < 40; ++k) ids.push_back(*id);
  return ids;
}

TEST(StreamDecoder, SentencePieceStyleDecoderWithLeadingStrip) {
  const json decoder = {{"type", "Sequence"},
                        {"decoders",
                         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const Tokenizer tok = Tokenizer::from_json(small_tokenizer(decoder, false));
  check_stream(tok, all_ids(tok), 1, 300, 40, false);
  check_stream(tok, all_ids(tok), 2, 100, 40, true);
}

TEST(StreamDecoder, TrailingStripAndMetaspace) {
  const json strip_end = {{"type", "Sequence"},
                          {"decoders",
                           {{{"type", "ByteFallback"}},
                            {{"type", "Fuse"}},
                            {{"type", "Strip"}, {"content", " "}, {"start", 0}, {"stop", 2}}}}};
  const Tokenizer a = Tokenizer::from_json(small_tokenizer(strip_end, false));
  check_stream(a, all_ids(a), 3, 200, 30, false);
  const json metaspace = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}};
  const Tokenizer b = Tokenizer::from_json(small_tokenizer(metaspace, false));
  check_stream(b, all_ids(b), 4, 200, 30, false);
}

TEST(StreamDecoder, ByteLevelAndNoDecoder) {
  const Tokenizer a = Tokenizer::from_json(small_tokenizer({{"type", "ByteLevel"}}, true));
  check_stream(a, all_ids(a), 5, 300, 40, false);
  const Tokenizer b = Tokenizer::from_json(small_tokenizer(nullptr, false));
  check_stream(b, all_ids(b), 6, 100, 20, true);
}

TEST(StreamDecoder, LongStreamsMoveTheWindow) {
  const Tokenizer tok = Tokenizer::from_json(small_tokenizer({{"type", "ByteLevel"}}, true));
  check_stream(tok, all_ids(tok), 7, 3, 400, false);
}

TEST(StreamDecoder, RejectsUnknownIds) {
  const Tokenizer tok = Tokenizer::from_json(small_tokenizer(nullptr, false));
  StreamDecoder stream(tok);
  EXPECT_THROW(stream.push(-1), Error);
  EXPECT_THROW(stream.push(tok.vocab_size()), Error);
}

// The real tokenizers, with ids drawn from their byte pieces, special tokens
// and random pieces.
void check_real(const std::string& name, uint32_t seed) {
  std::string why;
  const auto dir = tok::testing::fetched_tokenizer(name, &why);
  if (!dir) ROWLM_SKIP_UNLESS_CI(why);
  const Tokenizer tok = Tokenizer::load(*dir);
  std::vector<int32_t> pool;
  std::mt19937 rng(seed);
  for (int i = 0; i < 400; ++i) pool.push_back(int32_t(rng() % uint32_t(tok.vocab_size())));
  for (int b = 0; b < 256; ++b) {
    char name_buf[8];
    std::snprintf(name_buf, sizeof name_buf, "<0x%02X>", b);
    if (auto id = tok.token_to_id(name_buf)) pool.push_back(*id);
  }
  for (const auto& t : tok.added_tokens())
    if (t.special) pool.push_back(t.id);
  for (const char* piece : {"\xE2\x96\x81", "\xE2\x96\x81\xE2\x96\x81", "\xC4\xA0", "\xC3\xA2", "\xC4\xA2", "\xC4\xAC"})
    if (auto id = tok.token_to_id(piece)) pool.push_back(*id);
  check_stream(tok, pool, seed, 150, 30, false);
  check_stream(tok, pool, seed + 1, 50, 30, true);
}

TEST(StreamDecoder, Gemma3) { check_real("gemma3", 11); }
TEST(StreamDecoder, Qwen3) { check_real("qwen3", 12); }

}  // namespace
}  // namespace rowlm
