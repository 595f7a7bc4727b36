#include "tokenizer/normalizers.h"

#include <vector>

#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace rowlm::tok {

namespace {

class Replace final : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode_normalize(text, form_); }

 private:
  NormalForm form_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = lowercase(text); }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t len = 0;
        if (!is_whitespace(decode_utf8(text, begin, &len))) break;
        begin += len;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t i = end - 1;
        while (i > begin && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
        std::size_t len = 0;
        if (!is_whitespace(decode_utf8(text, i, &len))) break;
        end = i;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, where);
  const std::string w = where + " (" + type + ")";
  if (type == "Replace")
    return std::make_unique<Replace>(Pattern::from_json(field<Json>(j, "pattern", w), w),
                                     field<std::string>(j, "content", w));
  if (type == "Prepend") return std::make_unique<Prepend>(field<std::string>(j, "prepend", w));
  if (type == "NFC") return std::make_unique<UnicodeForm>(NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeForm>(NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(NormalForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(field_or<bool>(j, "strip_left", true, w), field_or<bool>(j, "strip_right", true, w));
  if (type == "Sequence")
    return std::make_unique<NormalizerSequence>(sequence_parts<Normalizer>(
        j, "normalizers", where, w, [](const Json& e, const std::string& at) { return make_normalizer(e, at); }));
  throw Error(where + ": unsupported normalizer type '" + type +
              "' (rowlm supports Replace, Prepend, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Sequence)");
}

}  // namespace rowlm::tok
