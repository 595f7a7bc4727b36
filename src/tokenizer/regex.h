#pragma once
// Regular expressions as the `tokenizers` library runs them (Oniguruma),
// executed by PCRE2 in UTF mode with JIT. Patterns are translated where the
// two dialects differ: \s, \w, \d and \h get Oniguruma's Unicode meanings.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rowlm::tok {

struct Span {
  std::size_t begin = 0, end = 0;
};

class Regex {
 public:
  // Throws rowlm::Error naming the pattern if it does not compile.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Appends every match in `text` (valid UTF-8) to `out`, iterating like
  // Oniguruma's find_iter: the search resumes at the previous match's end,
  // and an empty match right where the previous match ended is skipped.
  void find_all(std::string_view text, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

// The PCRE2 pattern that gives `oniguruma_pattern` Oniguruma's meaning.
std::string translate_oniguruma_pattern(std::string_view oniguruma_pattern);

}  // namespace rowlm::tok
