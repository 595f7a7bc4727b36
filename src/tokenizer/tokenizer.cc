#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <deque>
#include <fstream>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoders.h"
#include "tokenizer/json_scan.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pieces.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/unicode.h"

namespace rowlm {

using tok::Json;

struct Tokenizer::Impl {
  std::unique_ptr<tok::BpeModel> model;
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tok::PostProcessor> post_processor;
  std::unique_ptr<tok::Decoder> decoder;
  std::vector<tok::AddedToken> added;                       // file order
  std::unordered_map<std::string_view, std::size_t> added_by_content;
  std::unordered_map<int32_t, std::size_t> added_by_id;
  tok::AddedTokenMatcher raw_matcher;         // tokens matched before normalization
  tok::AddedTokenMatcher normalized_matcher;  // tokens matched in normalized text
  int32_t vocab_size = 0;
  TokenizerSpecialTokens specials;

  const tok::AddedToken* added_for_id(int32_t id) const {
    auto it = added_by_id.find(id);
    return it == added_by_id.end() ? nullptr : &added[it->second];
  }
};

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path.string());
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error("cannot read " + path.string() + ": " + ec.message());
  std::string text(size, '\0');
  if (!in.read(text.data(), std::streamsize(size))) throw Error("cannot read " + path.string());
  return text;
}

Json parse_small(std::string_view raw, const std::string& what) {
  try {
    return Json::parse(raw);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": invalid JSON: " + e.what());
  }
}

// The merges as read: pairs of pieces, viewing the document or, for pieces
// written with escapes, `owned`.
struct MergeList {
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  std::deque<std::string> owned;
};

// The top-level layout of a tokenizer.json. The vocab and the merges are
// read on the way (one pass over the big arrays); everything else becomes
// nlohmann::json.
struct Document {
  std::map<std::string, Json> top;    // every top-level entry but "model"
  std::map<std::string, Json> model;  // "model" entries but vocab and merges
  std::optional<tok::Vocab> vocab;
  std::optional<MergeList> merges;
  std::string vocab_problem;  // why the vocab was not read, if it was not
};

tok::Vocab read_vocab(tok::JsonScanner& sc) {
  tok::Vocab vocab;
  sc.expect('{');
  std::string scratch;
  for (bool first = true; sc.next_member('}', first); first = false) {
    const std::string_view piece = sc.string(scratch);
    sc.expect(':');
    const int64_t id = sc.integer();
    if (id < 0 || id > INT32_MAX) sc.fail("model.vocab: id " + std::to_string(id) + " is out of range");
    vocab.add(piece, int32_t(id));
  }
  vocab.finish();
  return vocab;
}

MergeList read_merges(tok::JsonScanner& sc) {
  MergeList list;
  std::string a_scratch, b_scratch;
  auto keep = [&](std::string_view s, const std::string& scratch) -> std::string_view {
    if (s.data() != scratch.data()) return s;  // a view of the document
    return list.owned.emplace_back(scratch);
  };
  sc.expect('[');
  for (bool first = true; sc.next_member(']', first); first = false) {
    const std::size_t index = list.pairs.size();
    if (sc.peek() == '"') {  // "left right"
      const std::string_view merge = keep(sc.string(a_scratch), a_scratch);
      const std::size_t space = merge.find(' ');
      if (space == std::string_view::npos || merge.find(' ', space + 1) != std::string_view::npos)
        sc.fail("model.merges[" + std::to_string(index) + "]: '" + std::string(merge) +
                "' is not two pieces separated by one space");
      list.pairs.emplace_back(merge.substr(0, space), merge.substr(space + 1));
    } else if (sc.peek() == '[') {  // ["left", "right"]
      sc.expect('[');
      const std::string_view a = keep(sc.string(a_scratch), a_scratch);
      sc.expect(',');
      const std::string_view b = keep(sc.string(b_scratch), b_scratch);
      sc.expect(']');
      list.pairs.emplace_back(a, b);
    } else {
      sc.fail("model.merges[" + std::to_string(index) + "] must be a string or a pair of strings");
    }
  }
  return list;
}

Document scan_document(tok::JsonScanner& sc, const std::string& what) {
  Document doc;
  std::string key_scratch;
  sc.expect('{');
  bool have_model = false;
  for (bool first = true; sc.next_member('}', first); first = false) {
    const std::string key(sc.string(key_scratch));
    sc.expect(':');
    if (key != "model") {
      doc.top[key] = parse_small(sc.skip_value(), what + ": " + key);
      continue;
    }
    have_model = true;
    if (sc.peek() != '{') sc.fail("\"model\" must be an object");
    sc.expect('{');
    for (bool mfirst = true; sc.next_member('}', mfirst); mfirst = false) {
      const std::string mkey(sc.string(key_scratch));
      sc.expect(':');
      // Other model types keep other shapes in vocab and merges; the type
      // check below names them.
      const auto type = doc.model.find("type");
      const bool other_type = type != doc.model.end() && type->second != "BPE";
      if (mkey == "vocab" && !other_type) {
        if (sc.peek() == '{') doc.vocab = read_vocab(sc);
        else doc.vocab_problem = "model.vocab is not an object of piece -> id", sc.skip_value();
      } else if (mkey == "merges" && !other_type) {
        if (sc.peek() == '[') doc.merges = read_merges(sc);
        else sc.fail("model.merges must be an array");
      } else if (other_type) {
        sc.skip_value();
      } else {
        doc.model[mkey] = parse_small(sc.skip_value(), what + ": model." + mkey);
      }
    }
  }
  if (!sc.at_end()) sc.fail("unexpected text after the top-level object");
  if (!have_model) throw Error(what + ": no \"model\"");
  return doc;
}

template <typename T>
T model_field_or(const std::map<std::string, Json>& m, const char* name, T fallback, const std::string& what) {
  auto it = m.find(name);
  if (it == m.end() || it->second.is_null()) return fallback;
  try {
    return it->second.get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(what + ": model." + name + " has the wrong type (" + it->second.type_name() + ")");
  }
}

std::vector<tok::AddedToken> read_added_tokens(const Json& list, const std::string& what) {
  std::vector<tok::AddedToken> out;
  if (list.is_null()) return out;
  if (!list.is_array()) throw Error(what + ": added_tokens must be an array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string w = what + ": added_tokens[" + std::to_string(i) + "]";
    const Json& j = list[i];
    if (!j.is_object()) throw Error(w + " must be an object");
    tok::AddedToken t;
    const auto id = tok::field<int64_t>(j, "id", w);
    if (id < 0 || id > tok::Vocab::kMaxId)
      throw Error(w + ": id " + std::to_string(id) + " is out of range (0 to " + std::to_string(tok::Vocab::kMaxId) +
                  ")");
    t.id = int32_t(id);
    t.content = tok::field<std::string>(j, "content", w);
    t.single_word = tok::field_or<bool>(j, "single_word", false, w);
    t.lstrip = tok::field_or<bool>(j, "lstrip", false, w);
    t.rstrip = tok::field_or<bool>(j, "rstrip", false, w);
    t.special = tok::field_or<bool>(j, "special", false, w);
    t.normalized = tok::field_or<bool>(j, "normalized", !t.special, w);
    out.push_back(std::move(t));
  }
  return out;
}

std::optional<int32_t> config_token(const Json& config, const char* name, const Tokenizer& tok) {
  auto it = config.find(name);
  if (it == config.end() || it->is_null()) return std::nullopt;
  std::string content;
  if (it->is_string()) content = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    content = (*it)["content"].get<std::string>();
  else return std::nullopt;
  return tok.token_to_id(content);
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_json(std::string_view text, const nlohmann::json* overrides, const std::string& what) {
  tok::JsonScanner sc(text, what);
  Document doc = scan_document(sc, what);
  if (overrides && !overrides->is_null()) {
    if (!overrides->is_object()) throw Error("tokenizer overrides must be a JSON object");
    for (const auto& [key, value] : overrides->items()) {
      if (key != "model") {
        doc.top[key] = value;
        continue;
      }
      if (!value.is_object()) throw Error("tokenizer overrides: \"model\" must be an object");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (mkey == "vocab" || mkey == "merges") throw Error("tokenizer overrides cannot replace model." + mkey);
        doc.model[mkey] = mvalue;
      }
    }
  }

  auto impl = std::make_unique<Impl>();
  const std::string type = model_field_or<std::string>(doc.model, "type", "BPE", what);
  if (type != "BPE") throw Error(what + ": unsupported model type '" + type + "' (rowlm supports BPE)");
  if (!doc.vocab) throw Error(what + ": " + (doc.vocab_problem.empty() ? "model has no vocab" : doc.vocab_problem));
  if (model_field_or<double>(doc.model, "dropout", 0.0, what) != 0.0)
    throw Error(what + ": model.dropout is set; BPE dropout is for training and makes encoding random");
  tok::BpeOptions options;
  if (auto it = doc.model.find("unk_token"); it != doc.model.end() && !it->second.is_null())
    options.unk_token = model_field_or<std::string>(doc.model, "unk_token", "", what);
  options.continuing_subword_prefix = model_field_or<std::string>(doc.model, "continuing_subword_prefix", "", what);
  options.end_of_word_suffix = model_field_or<std::string>(doc.model, "end_of_word_suffix", "", what);
  options.fuse_unk = model_field_or<bool>(doc.model, "fuse_unk", false, what);
  options.byte_fallback = model_field_or<bool>(doc.model, "byte_fallback", false, what);
  options.ignore_merges = model_field_or<bool>(doc.model, "ignore_merges", false, what);
  try {
    impl->model = std::make_unique<tok::BpeModel>(std::move(*doc.vocab), options);
    if (doc.merges) {
      impl->model->add_merges(doc.merges->pairs.data(), doc.merges->pairs.size(), 0);
      doc.merges.reset();
    }
    impl->model->finish_merges();
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(what, 0) == 0) throw;
    throw Error(what + ": " + msg);
  }

  auto get = [&](const char* key) -> const Json& {
    static const Json null_json;  // immutable
    auto it = doc.top.find(key);
    return it == doc.top.end() ? null_json : it->second;
  };
  try {
    impl->normalizer = tok::make_normalizer(get("normalizer"));
    impl->pre_tokenizer = tok::make_pre_tokenizer(get("pre_tokenizer"));
    impl->post_processor = tok::make_post_processor(get("post_processor"));
    impl->decoder = tok::make_decoder(get("decoder"));
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }

  // Added tokens take the model's id when the model has the piece, as
  // tokenizers does; otherwise the id the file gives.
  impl->added = read_added_tokens(get("added_tokens"), what);
  impl->vocab_size = impl->model->vocab().end_id();
  for (std::size_t i = 0; i < impl->added.size(); ++i) {
    tok::AddedToken& t = impl->added[i];
    if (t.content.empty()) continue;
    if (auto id = impl->model->vocab().find(t.content)) t.id = *id;
    impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
  }
  for (std::size_t i = 0; i < impl->added.size(); ++i) {
    const tok::AddedToken& t = impl->added[i];
    if (t.content.empty()) continue;
    impl->added_by_content[t.content] = i;
    impl->added_by_id[t.id] = i;
  }
  for (std::size_t i = 0; i < impl->added.size(); ++i) {
    const tok::AddedToken& t = impl->added[i];
    if (t.content.empty()) continue;
    if (!t.normalized) {
      impl->raw_matcher.add(t.content, i);
    } else {
      std::string pattern = t.content;
      if (impl->normalizer) impl->normalizer->normalize(pattern);
      impl->normalized_matcher.add(pattern, i);
    }
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, ec)) {
    file = path / "tokenizer.json";
    if (!std::filesystem::exists(file, ec)) throw Error(path.string() + " has no tokenizer.json");
  } else if (!std::filesystem::exists(path, ec)) {
    throw Error("tokenizer " + path.string() + " does not exist");
  }
  const std::string text = read_file(file);
  Tokenizer tok = from_json(text, nullptr, file.string());
  const auto config_path = file.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path, ec)) {
    const Json config = parse_small(read_file(config_path), config_path.string());
    if (!config.is_object()) throw Error(config_path.string() + ": expected a JSON object");
    auto& s = tok.impl_->specials;
    s.bos = config_token(config, "bos_token", tok);
    s.eos = config_token(config, "eos_token", tok);
    s.pad = config_token(config, "pad_token", tok);
    s.unk = config_token(config, "unk_token", tok);
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
      s.add_bos_token = config["add_bos_token"].get<bool>();
    if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean())
      s.add_eos_token = config["add_eos_token"].get<bool>();
  }
  return tok;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  tok::require_utf8(text, "text to encode");
  const Impl& m = *impl_;
  tok::Pieces pieces;
  // 1. Added tokens that match the raw text.
  for (const auto& s : m.raw_matcher.split(text, m.added))
    pieces.push_back({std::string(text.substr(s.begin, s.end - s.begin)), s.token, s.begin == 0});
  // 2. Normalize the rest, then find the added tokens that match normalized text.
  if (m.normalizer || !m.normalized_matcher.empty()) {
    tok::Pieces next;
    next.reserve(pieces.size());
    for (auto& p : pieces) {
      if (p.token >= 0) {
        next.push_back(std::move(p));
        continue;
      }
      if (m.normalizer) m.normalizer->normalize(p.text);
      for (const auto& s : m.normalized_matcher.split(p.text, m.added))
        next.push_back({p.text.substr(s.begin, s.end - s.begin), s.token, p.at_start && s.begin == 0});
    }
    pieces = std::move(next);
  }
  // 3. Words.
  if (m.pre_tokenizer) m.pre_tokenizer->pre_tokenize(pieces);
  // 4. Ids.
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const auto& p : pieces) {
    if (p.token >= 0) ids.push_back(p.token);
    else m.model->tokenize(p.text, ids);
  }
  if (m.post_processor) m.post_processor->process(ids, add_special_tokens);
  return ids;
}

std::optional<std::string_view> Tokenizer::decode_piece(int32_t id, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::optional<std::string_view> piece;
  bool special = false;
  if (const tok::AddedToken* t = m.added_for_id(id)) {
    piece = t->content;
    special = t->special;
  } else {
    piece = m.model->vocab().piece(id);
  }
  if (!piece) throw Error("token id " + std::to_string(id) + " is not in the vocabulary (size " +
                          std::to_string(m.vocab_size) + ")");
  if (skip_special_tokens && special) return std::nullopt;
  return piece;
}

std::string Tokenizer::decode_pieces(std::span<const std::string_view> pieces) const {
  std::string out;
  if (!impl_->decoder) {
    // Without a decoder tokenizers joins the pieces with spaces.
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (i) out += ' ';
      out.append(pieces[i]);
    }
    return out;
  }
  std::vector<std::string> chain(pieces.begin(), pieces.end());
  impl_->decoder->decode_chain(chain);
  for (const auto& s : chain) out += s;
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string_view> pieces;
  pieces.reserve(ids.size());
  for (int32_t id : ids)
    if (auto p = decode_piece(id, skip_special_tokens)) pieces.push_back(*p);
  return decode_pieces(pieces);
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end())
    return impl_->added[it->second].id;
  return impl_->model->vocab().find(token);
}

std::optional<std::string_view> Tokenizer::id_to_token(int32_t id) const {
  if (const tok::AddedToken* t = impl_->added_for_id(id)) return std::string_view(t->content);
  return impl_->model->vocab().piece(id);
}

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* t = impl_->added_for_id(id);
  return t && t->special;
}

std::optional<int32_t> Tokenizer::special_token_id(std::string_view content) const {
  auto it = impl_->added_by_content.find(content);
  if (it == impl_->added_by_content.end() || !impl_->added[it->second].special) return std::nullopt;
  return impl_->added[it->second].id;
}

const std::vector<tok::AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const TokenizerSpecialTokens& Tokenizer::special_tokens() const { return impl_->specials; }
const tok::Decoder* Tokenizer::decoder() const { return impl_->decoder.get(); }

}  // namespace rowlm
