#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace rowlm {
namespace {

using json = nlohmann::json;  // std::map objects: the vocabulary has up to 262k keys

// The split patterns of the Hugging Face tokenizer.json files these
// pre-tokenizer names stand for (llama.cpp's llm_tokenizer_bpe regexes are
// the same expressions).
constexpr const char* kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}

json split_then_bytes(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(false)}}};
}

int64_t type_of(const GgufVocab& v, std::size_t id) {
  return v.types.empty() ? int64_t(GgufTokenType::Normal) : v.types[id];
}

// Code-point boundaries of `piece` (byte offsets, 0 and size() included).
std::vector<std::size_t> char_boundaries(const std::string& piece) {
  std::vector<std::size_t> at{0};
  for (std::size_t i = 0; i < piece.size();) {
    i = std::min(piece.size(), i + std::max<std::size_t>(1, tok::utf8_len(static_cast<unsigned char>(piece[i]))));
    at.push_back(i);
  }
  return at;
}

// The merges of a SentencePiece BPE vocabulary that keeps scores instead
// (llama.cpp's converter writes tokenizer.model's pieces and scores, no
// merges), ranked as Hugging Face's converter ranks them when it writes the
// model's tokenizer.json: every split of a piece into two pieces of the
// vocabulary is a merge; a piece's splits in order of (left id, right id),
// pieces in id order; then, stably, by the piece's score, the left part's
// length and the right part's (in code points), each highest first. On
// Gemma 3's tokenizer.json, with SentencePiece's scores (0 for user-defined
// pieces, minus the rank for the others), this gives its 514,906 merges in
// their order exactly.
json merges_from_scores(const GgufVocab& v, const std::unordered_map<std::string, int64_t>& ids,
                        const std::string& source) {
  struct Candidate {
    int64_t left, right;
    float score;
    uint32_t left_chars, right_chars;
  };
  std::vector<Candidate> all;
  // Each split hashes the piece's bytes: bounded, so a hostile file's long
  // pieces cannot make loading take hours (real vocabularies need ~10^7).
  constexpr uint64_t kMaxBytesHashed = uint64_t(1) << 31;
  uint64_t hashed = 0;
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    if (type_of(v, id) == int64_t(GgufTokenType::Unused)) continue;
    const std::string& piece = v.tokens[id];
    const std::vector<std::size_t> at = char_boundaries(piece);
    hashed += uint64_t(piece.size()) * uint64_t(at.size());
    if (hashed > kMaxBytesHashed)
      throw Error(source + ": GGUF metadata 'tokenizer.ggml.tokens' holds pieces too long to derive merges from "
                           "(at token " + std::to_string(id) + ")");
    const std::size_t first = all.size();
    for (std::size_t k = 1; k + 1 < at.size(); ++k) {
      const auto l = ids.find(piece.substr(0, at[k]));
      if (l == ids.end()) continue;
      const auto r = ids.find(piece.substr(at[k]));
      if (r == ids.end()) continue;
      all.push_back({l->second, r->second, float(v.scores[id]), uint32_t(k), uint32_t(at.size() - 1 - k)});
    }
    std::sort(all.begin() + std::ptrdiff_t(first), all.end(), [](const Candidate& a, const Candidate& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_chars != b.left_chars) return a.left_chars > b.left_chars;
    return a.right_chars > b.right_chars;
  });
  json merges = json::array();
  for (const Candidate& c : all)
    merges.push_back(json::array({v.tokens[std::size_t(c.left)], v.tokens[std::size_t(c.right)]}));
  return merges;
}

}  // namespace

std::string gguf_tokenizer_json(const GgufVocab& v, const std::string& source) {
  auto fail = [&](const std::string& key, const std::string& what) -> void {
    throw Error(source + ": GGUF metadata 'tokenizer.ggml." + key + "' " + what);
  };
  if (v.tokens.empty()) fail("tokens", "is empty");
  if (!v.types.empty() && v.types.size() != v.tokens.size())
    fail("token_type", "has " + std::to_string(v.types.size()) + " entries for " + std::to_string(v.tokens.size()) +
                           " tokens");
  for (const auto& [key, id] : {std::pair{"bos_token_id", v.bos}, {"eos_token_id", v.eos}, {"unknown_token_id", v.unk}})
    if (id && (*id < 0 || *id >= int64_t(v.tokens.size())))
      fail(key, "= " + std::to_string(*id) + " is not a token id (" + std::to_string(v.tokens.size()) + " tokens)");

  const bool byte_level_bpe = v.model == "gpt2";
  const bool sentencepiece_bpe = v.model == "gemma4" || v.model == "llama";
  if (!byte_level_bpe && !sentencepiece_bpe)
    fail("model", "= '" + v.model + "' is not supported (supported: gpt2, gemma4, llama)");
  if (!v.scores.empty() && v.scores.size() != v.tokens.size())
    fail("scores", "has " + std::to_string(v.scores.size()) + " entries for " + std::to_string(v.tokens.size()) +
                       " tokens");
  // Without merges, a SentencePiece vocabulary's merges come from its scores.
  const bool merges_from_score = sentencepiece_bpe && v.merges.empty();
  if (merges_from_score && v.scores.empty())
    fail("merges", "is missing, and so is 'tokenizer.ggml.scores': a SentencePiece vocabulary needs one of them");
  // A "llama" vocabulary prefixes the text with a space unless it says not
  // to (llama.cpp's default): Llama 2's and Mistral's pipeline. Gemma's
  // ("gemma4", or "llama" with add_space_prefix false) does not.
  const bool space_prefix = v.model == "llama" && v.add_space_prefix.value_or(true);

  json doc = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  json added = json::array();
  json vocab = json::object();
  std::unordered_map<std::string, int64_t> ids;  // of the BPE vocabulary
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    const int64_t t = type_of(v, id);
    if (t < 1 || t > 6) fail("token_type", "[" + std::to_string(id) + "] = " + std::to_string(t) + " is not a token type");
    const std::string& text = v.tokens[id];
    if (t == int64_t(GgufTokenType::Unused)) continue;
    // UNKNOWN is special text too (llama.cpp matches it as CONTROL; the
    // tokenizer.json files list <unk> among the special added tokens).
    const bool control = t == int64_t(GgufTokenType::Control) || t == int64_t(GgufTokenType::Unknown),
               user = t == int64_t(GgufTokenType::UserDefined);
    if (control || user)
      added.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", control}});
    // Byte-level vocabularies keep added tokens out of the BPE model (as
    // transformers saves them); SentencePiece ones have every piece in it.
    if (sentencepiece_bpe || !(control || user)) {
      if (!ids.emplace(text, int64_t(id)).second) fail("tokens", "lists '" + text + "' twice");
      vocab[text] = id;
    }
  }
  doc["added_tokens"] = std::move(added);

  json model = {{"type", "BPE"},           {"dropout", nullptr},       {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false},  {"ignore_merges", false}};
  if (byte_level_bpe) {
    const std::string pre = v.pre.empty() ? "default" : v.pre;
    if (pre == "qwen2") {
      doc["normalizer"] = {{"type", "NFC"}};
      doc["pre_tokenizer"] = split_then_bytes(kQwen2Split);
    } else if (pre == "llama-bpe") {
      doc["normalizer"] = nullptr;
      doc["pre_tokenizer"] = split_then_bytes(kLlama3Split);
      model["ignore_merges"] = true;
    } else if (pre == "gpt-2" || pre == "default") {
      doc["normalizer"] = nullptr;
      doc["pre_tokenizer"] = byte_level(true);
    } else {
      fail("pre", "= '" + pre + "' is not supported (supported: qwen2, llama-bpe, gpt-2, default)");
    }
    doc["decoder"] = byte_level(true);
  } else {
    const json spaces = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}};
    json decoders = {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}};
    if (space_prefix) {
      // Llama 2's: "▁" before the text, spaces as "▁", no split; decoding
      // drops the prefix's space.
      doc["normalizer"] = {{"type", "Sequence"},
                           {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}}, spaces}}};
      doc["pre_tokenizer"] = nullptr;
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    } else {
      doc["normalizer"] = spaces;
      doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"},
                              {"invert", false}};
    }
    doc["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
    model["byte_fallback"] = true;
    model["fuse_unk"] = true;
    if (v.unk) model["unk_token"] = v.tokens[std::size_t(*v.unk)];
  }
  doc["post_processor"] = nullptr;
  if (v.add_bos.value_or(false)) {
    if (!v.bos) fail("add_bos_token", "is true but bos_token_id is missing");
    const std::string& bos = v.tokens[std::size_t(*v.bos)];
    const json special = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    doc["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {special, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {special, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{bos, {{"id", bos}, {"ids", {*v.bos}}, {"tokens", {bos}}}}}}};
  }
  model["vocab"] = std::move(vocab);
  if (merges_from_score) {
    model["merges"] = merges_from_scores(v, ids, source);
  } else {
    model["merges"] = v.merges;
  }
  doc["model"] = std::move(model);
  return doc.dump();
}

Tokenizer tokenizer_from_gguf(const GgufVocab& vocab, const std::string& source) {
  return Tokenizer::from_json(gguf_tokenizer_json(vocab, source), nullptr, source + " (tokenizer.ggml.*)");
}

}  // namespace rowlm
