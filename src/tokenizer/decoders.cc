#include "tokenizer/decoders.h"

#include <optional>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace rowlm::tok {

std::optional<unsigned char> byte_fallback_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
  // Rust's u8::from_str_radix(.., 16): two hex digits, or '+' and one.
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int lo = hex(piece[4]);
  if (lo < 0) return std::nullopt;
  if (piece[3] == '+') return static_cast<unsigned char>(lo);
  const int hi = hex(piece[3]);
  if (hi < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

namespace {

class Replace final : public Decoder {
 public:
  Replace(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& pieces) const override {
    for (auto& p : pieces) p = pattern_.replace_all(p, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size());
    std::string bytes;
    std::size_t byte_count = 0;
    auto flush = [&] {
      if (byte_count == 0) return;
      if (find_invalid_utf8(bytes) == std::string::npos) {
        out.push_back(bytes);
      } else {
        // An invalid run becomes one U+FFFD per byte, as tokenizers does.
        for (std::size_t i = 0; i < byte_count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      byte_count = 0;
    };
    for (auto& p : pieces) {
      if (const auto b = byte_fallback_value(p)) {
        bytes += char(*b);
        ++byte_count;
        continue;
      }
      flush();
      out.push_back(std::move(p));
    }
    flush();
    pieces = std::move(out);
  }
  void collect_traits(Traits& traits) const override { traits.byte_fallback = true; }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& pieces) const override {
    std::string all;
    for (const auto& p : pieces) all += p;
    pieces.assign(1, std::move(all));
  }
};

class Strip final : public Decoder {
 public:
  Strip(char32_t content, std::size_t start, std::size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& pieces) const override {
    for (auto& p : pieces) {
      std::vector<std::size_t> starts;  // byte offset of each character
      for (std::size_t i = 0; i < p.size(); i += utf8_len(static_cast<unsigned char>(p[i]))) starts.push_back(i);
      const std::size_t n = starts.size();
      auto char_at = [&](std::size_t k) {
        std::size_t len = 0;
        return decode_utf8(p, starts[k], &len);
      };
      std::size_t cut_front = 0;
      while (cut_front < start_ && cut_front < n && char_at(cut_front) == content_) ++cut_front;
      std::size_t cut_back = n;
      for (std::size_t i = 0; i < stop_ && cut_back > cut_front && char_at(cut_back - 1) == content_; ++i) --cut_back;
      const std::size_t b = cut_front < n ? starts[cut_front] : p.size();
      const std::size_t e = cut_back < n ? starts[cut_back] : p.size();
      p = p.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& pieces) const override {
    const auto& alphabet = ByteLevelAlphabet::get();
    std::string bytes;
    for (const auto& p : pieces) alphabet.decode(p, bytes);
    pieces.assign(1, utf8_lossy(bytes));
  }
  void collect_traits(Traits& traits) const override { traits.byte_level = true; }
};

class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, bool prepend) : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& pieces) const override {
    // The first piece loses its markers when a prefix was prepended at
    // encoding; every other marker becomes a space.
    for (std::size_t i = 0; i < pieces.size(); ++i)
      pieces[i] = Pattern::literal(replacement_).replace_all(pieces[i], i == 0 && prepend_ ? "" : " ");
  }

 private:
  std::string replacement_;
  bool prepend_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& pieces) const override {
    for (const auto& p : parts_) p->decode_chain(pieces);
  }
  void collect_traits(Traits& traits) const override {
    for (const auto& p : parts_) p->collect_traits(traits);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

char32_t single_char(const std::string& s, const std::string& where, const char* name) {
  require_utf8(s, where + ": " + name);
  std::size_t len = 0;
  const char32_t c = s.empty() ? 0 : decode_utf8(s, 0, &len);
  if (s.empty() || len != s.size()) throw Error(where + ": '" + name + "' must be a single character");
  return c;
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, where);
  const std::string w = where + " (" + type + ")";
  if (type == "Replace")
    return std::make_unique<Replace>(Pattern::from_json(field<Json>(j, "pattern", w), w),
                                     field<std::string>(j, "content", w));
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    const auto content = field<std::string>(j, "content", w);
    const auto start = field<int64_t>(j, "start", w), stop = field<int64_t>(j, "stop", w);
    if (start < 0 || stop < 0) throw Error(w + ": 'start' and 'stop' must not be negative");
    return std::make_unique<Strip>(single_char(content, w, "content"), std::size_t(start), std::size_t(stop));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") {
    std::string replacement = field_or<std::string>(j, "replacement", "\xE2\x96\x81", w);
    single_char(replacement, w, "replacement");
    bool prepend = true;
    if (j.contains("prepend_scheme")) {
      const auto s = field<std::string>(j, "prepend_scheme", w);
      if (s != "always" && s != "first" && s != "never")
        throw Error(w + ": unknown prepend_scheme '" + s + "' (expected always, first or never)");
      prepend = s != "never";
    } else {
      prepend = field_or<bool>(j, "add_prefix_space", true, w);
    }
    return std::make_unique<Metaspace>(std::move(replacement), prepend);
  }
  if (type == "Sequence")
    return std::make_unique<Sequence>(sequence_parts<Decoder>(
        j, "decoders", where, w, [](const Json& e, const std::string& at) { return make_decoder(e, at); }));
  throw Error(where + ": unsupported decoder type '" + type +
              "' (rowlm supports Replace, ByteFallback, Fuse, Strip, ByteLevel, Metaspace, Sequence)");
}

}  // namespace rowlm::tok
