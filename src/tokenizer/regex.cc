#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace rowlm::tok {

namespace {

// Oniguruma's Unicode classes, spelled as PCRE2 class items.
constexpr std::string_view kWordItems = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";
constexpr std::string_view kHexItems = "0-9a-fA-F";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string translate_oniguruma_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  std::size_t class_start = 0;  // index in p just after '[' or '[^'
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;
        case 'S': out += "\\P{White_Space}"; break;
        case 'd': out += "\\p{Nd}"; break;
        case 'D': out += "\\P{Nd}"; break;
        case 'w':
          if (in_class) out += kWordItems;
          else out += "[" + std::string(kWordItems) + "]";
          break;
        case 'h':
          if (in_class) out += kHexItems;
          else out += "[" + std::string(kHexItems) + "]";
          break;
        case 'W':
        case 'H':
          if (in_class)
            throw Error("regex '" + std::string(p) + "': \\" + e + " inside a character class is not supported");
          out += "[^" + std::string(e == 'W' ? kWordItems : kHexItems) + "]";
          break;
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:alpha:]
      const std::size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == '[')
      throw Error("regex '" + std::string(p) + "': nested character classes are not supported");
    if (in_class && c == ']' && i != class_start) in_class = false;
    out += c;
  }
  return out;
}

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern) : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  const std::string translated = translate_oniguruma_pattern(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                  PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!compiled_->code)
    throw Error("regex '" + pattern_ + "' does not compile: " + pcre2_message(err) + " (at offset " +
                std::to_string(offset) + " of '" + translated + "')");
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;
  using JitStack = std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)>;
  using MatchContext = std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)>;
  MatchData md(pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  JitStack stack(nullptr, &pcre2_jit_stack_free);
  MatchContext context(nullptr, &pcre2_match_context_free);
  if (!md) throw Error("regex: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  bool have_last = false;
  std::size_t last_end = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md.get(), context.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack) {
      // Long runs can outgrow the default 32 KiB JIT stack: retry with a big one.
      stack.reset(pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr));
      context.reset(pcre2_match_context_create(nullptr));
      if (!stack || !context) throw Error("regex: out of memory");
      pcre2_jit_stack_assign(context.get(), nullptr, stack.get());
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw Error("regex '" + pattern_ + "' failed to match: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t b = ov[0], e = ov[1];
    if (b == e && have_last && last_end == e) {
      if (start >= text.size()) return;
      start += utf8_len(static_cast<unsigned char>(text[start]));
      continue;
    }
    out.push_back({b, e});
    have_last = true;
    last_end = e;
    start = e;
    if (b == e && e == text.size()) return;
  }
}

}  // namespace rowlm::tok
