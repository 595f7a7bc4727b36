#include "tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace rowlm::tok {

void split_piece(const Piece& piece, const std::vector<Span>& matches, bool invert, SplitBehavior behavior,
                 Pieces& out) {
  struct Part {
    std::size_t begin, end;
    bool is_match;
  };
  const std::string& text = piece.text;
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  std::size_t prev = 0;
  for (const Span& m : matches) {
    if (prev != m.begin) parts.push_back({prev, m.begin, invert});
    parts.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev != text.size()) parts.push_back({prev, text.size(), invert});

  // (range, remove) after applying the behaviour
  std::vector<Part> kept;
  kept.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Part& p : parts) kept.push_back({p.begin, p.end, false});
      break;
    case SplitBehavior::Removed:
      kept = parts;
      break;
    case SplitBehavior::Contiguous:
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !kept.empty()) kept.back().end = p.end;
        else kept.push_back({p.begin, p.end, false});
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !kept.empty()) kept.back().end = p.end;
        else kept.push_back({p.begin, p.end, false});
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().begin = it->begin;
        else kept.push_back({it->begin, it->end, false});
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Part& p : kept) {
    if (p.is_match || p.end <= p.begin) continue;  // removed, or empty
    out.push_back({text.substr(p.begin, p.end - p.begin), -1, piece.at_start && p.begin == 0});
  }
}

namespace {

// Runs `fn` on every plain-text piece, replacing it by what fn appends.
void for_each_plain(Pieces& pieces, const std::function<void(const Piece&, Pieces&)>& fn) {
  Pieces out;
  out.reserve(pieces.size());
  for (Piece& p : pieces) {
    if (p.token >= 0) out.push_back(std::move(p));
    else fn(p, out);
  }
  pieces = std::move(out);
}

// Spans of the single characters for which `pred` holds.
void char_matches(std::string_view text, bool (*pred)(char32_t), std::vector<Span>& out) {
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = 0;
    const char32_t c = decode_utf8(text, i, &len);
    if (pred(c)) out.push_back({i, i + len});
    i += len;
  }
}

SplitBehavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  throw Error(where + ": unknown split behavior '" + name +
              "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

class Split final : public PreTokenizer {
 public:
  Split(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(Pieces& pieces) const override {
    std::vector<Span> matches;
    for_each_plain(pieces, [&](const Piece& p, Pieces& out) {
      matches.clear();
      pattern_.find(p.text, matches);
      split_piece(p, matches, invert_, behavior_, out);
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_.emplace(kGpt2Pattern);
  }
  void pre_tokenize(Pieces& pieces) const override {
    const auto& alphabet = ByteLevelAlphabet::get();
    std::vector<Span> matches;
    Pieces split;
    for_each_plain(pieces, [&](const Piece& piece, Pieces& out) {
      Piece p = piece;
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      split.clear();
      if (regex_) {
        matches.clear();
        regex_->find_all(p.text, matches);
        split_piece(p, matches, false, SplitBehavior::Isolated, split);
      } else {
        split.push_back(std::move(p));
      }
      for (Piece& s : split) {
        std::string mapped;
        mapped.reserve(s.text.size() * 2);
        for (char b : s.text) mapped.append(alphabet.encode(static_cast<unsigned char>(b)));
        s.text = std::move(mapped);
        out.push_back(std::move(s));
      }
    });
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

enum class PrependScheme { Always, First, Never };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(Pieces& pieces) const override {
    const Pattern space = Pattern::literal(" ");
    const Pattern marker = Pattern::literal(replacement_);
    std::vector<Span> matches;
    for_each_plain(pieces, [&](const Piece& piece, Pieces& out) {
      Piece p{space.replace_all(piece.text, replacement_), -1, piece.at_start};
      const bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && p.at_start)))
        p.text.insert(0, replacement_);
      if (!split_) {
        out.push_back(std::move(p));
        return;
      }
      matches.clear();
      marker.find(p.text, matches);
      split_piece(p, matches, false, SplitBehavior::MergedWithNext, out);
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class Whitespace final : public PreTokenizer {
 public:
  Whitespace() : regex_(R"(\w+|[^\w\s]+)") {}
  void pre_tokenize(Pieces& pieces) const override {
    std::vector<Span> matches;
    for_each_plain(pieces, [&](const Piece& p, Pieces& out) {
      matches.clear();
      regex_.find_all(p.text, matches);
      split_piece(p, matches, true, SplitBehavior::Removed, out);
    });
  }

 private:
  Regex regex_;
};

class CharClassSplit final : public PreTokenizer {
 public:
  CharClassSplit(bool (*pred)(char32_t), SplitBehavior behavior) : pred_(pred), behavior_(behavior) {}
  void pre_tokenize(Pieces& pieces) const override {
    std::vector<Span> matches;
    for_each_plain(pieces, [&](const Piece& p, Pieces& out) {
      matches.clear();
      char_matches(p.text, pred_, matches);
      split_piece(p, matches, false, behavior_, out);
    });
  }

 private:
  bool (*pred_)(char32_t);
  SplitBehavior behavior_;
};

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(Pieces& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, where);
  const std::string w = where + " (" + type + ")";
  if (type == "Split")
    return std::make_unique<Split>(Pattern::from_json(field<Json>(j, "pattern", w), w),
                                   parse_behavior(field<std::string>(j, "behavior", w), w),
                                   field_or<bool>(j, "invert", false, w));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(field_or<bool>(j, "add_prefix_space", true, w),
                                       field_or<bool>(j, "use_regex", true, w));
  if (type == "Metaspace") {
    std::string replacement = field_or<std::string>(j, "replacement", "\xE2\x96\x81", w);
    require_utf8(replacement, w + ": replacement");
    std::size_t len = 0;
    if (!replacement.empty()) decode_utf8(replacement, 0, &len);
    if (replacement.empty() || len != replacement.size())
      throw Error(w + ": 'replacement' must be a single character");
    PrependScheme scheme = PrependScheme::Always;
    if (j.contains("prepend_scheme")) {
      const auto s = field<std::string>(j, "prepend_scheme", w);
      if (s == "always") scheme = PrependScheme::Always;
      else if (s == "first") scheme = PrependScheme::First;
      else if (s == "never") scheme = PrependScheme::Never;
      else throw Error(w + ": unknown prepend_scheme '" + s + "' (expected always, first or never)");
    } else if (!field_or<bool>(j, "add_prefix_space", true, w)) {
      scheme = PrependScheme::Never;  // files written before prepend_scheme existed
    }
    return std::make_unique<Metaspace>(std::move(replacement), scheme, field_or<bool>(j, "split", true, w));
  }
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<CharClassSplit>(&is_whitespace, SplitBehavior::Removed);
  if (type == "Digits")
    return std::make_unique<CharClassSplit>(&is_numeric, field_or<bool>(j, "individual_digits", false, w)
                                                             ? SplitBehavior::Isolated
                                                             : SplitBehavior::Contiguous);
  if (type == "Sequence")
    return std::make_unique<PreTokenizerSequence>(sequence_parts<PreTokenizer>(
        j, "pretokenizers", where, w, [](const Json& e, const std::string& at) { return make_pre_tokenizer(e, at); }));
  throw Error(where + ": unsupported pre_tokenizer type '" + type +
              "' (rowlm supports Split, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits, Sequence)");
}

}  // namespace rowlm::tok
