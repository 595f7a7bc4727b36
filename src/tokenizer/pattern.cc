#include "tokenizer/pattern.h"

namespace rowlm::tok {

Pattern Pattern::from_json(const Json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": pattern must be an object {\"String\": ...} or {\"Regex\": ...}");
  Pattern p;
  if (j.contains("String")) {
    p.literal_ = field<std::string>(j, "String", where + ".pattern");
  } else if (j.contains("Regex")) {
    p.regex_ = std::make_shared<const Regex>(field<std::string>(j, "Regex", where + ".pattern"));
  } else {
    throw Error(where + ": pattern must have a \"String\" or a \"Regex\"");
  }
  return p;
}

Pattern Pattern::literal(std::string s) {
  Pattern p;
  p.literal_ = std::move(s);
  return p;
}

void Pattern::find(std::string_view text, std::vector<Span>& out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  for (std::size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size()))
    out.push_back({at, at + literal_.size()});
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<Span> matches;
  find(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t prev = 0;
  for (const Span& m : matches) {
    out.append(text.substr(prev, m.begin - prev));
    out.append(content);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace rowlm::tok
