#include "hub/repo_ref.h"

#include <cctype>

#include "core/error.h"

namespace rowlm::hub {

namespace {

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

// Why `part` is not a valid name part, or empty when it is.
std::string name_problem(const std::string& part) {
  if (part.empty()) return "an empty name";
  if (part.size() > 96) return "a name longer than 96 characters";
  for (char c : part)
    if (!name_char(c)) return std::string("the character '") + c + "'";
  if (part.find("--") != std::string::npos || part.find("..") != std::string::npos) return "'--' or '..'";
  if (!std::isalnum(static_cast<unsigned char>(part.front())) || !std::isalnum(static_cast<unsigned char>(part.back())))
    return "a name that does not start and end with a letter or digit";
  return "";
}

std::string revision_problem(const std::string& rev) {
  if (rev.empty()) return "an empty revision";
  if (rev.size() > 256) return "a revision longer than 256 characters";
  if (rev.front() == '/' || rev.back() == '/' || rev.find("//") != std::string::npos ||
      rev.find("..") != std::string::npos)
    return "a revision with an empty part or '..'";
  for (char c : rev)
    if (!name_char(c) && c != '/') return std::string("the character '") + c + "' in the revision";
  return "";
}

// Why `text` is not ORG/REPO[@REVISION], or empty when it is; fills `out`.
std::string parse(const std::string& text, RepoRef& out) {
  std::string id = text;
  std::string revision = "main";
  if (const auto at = text.find('@'); at != std::string::npos) {
    id = text.substr(0, at);
    revision = text.substr(at + 1);
    if (auto p = revision_problem(revision); !p.empty()) return p;
  }
  const auto slash = id.find('/');
  if (slash == std::string::npos) return "no '/' (a repo id is ORG/REPO)";
  if (id.find('/', slash + 1) != std::string::npos) return "more than one '/' (a repo id is ORG/REPO)";
  if (auto p = name_problem(id.substr(0, slash)); !p.empty()) return p;
  if (auto p = name_problem(id.substr(slash + 1)); !p.empty()) return p;
  if (id.size() > 4 && id.compare(id.size() - 4, 4, ".git") == 0) return "a name ending in .git";
  out.repo = id;
  out.revision = revision;
  return "";
}

}  // namespace

std::string RepoRef::display() const { return revision == "main" ? repo : repo + "@" + revision; }

std::optional<RepoRef> parse_repo_ref(const std::string& text) {
  RepoRef r;
  if (!parse(text, r).empty()) return std::nullopt;
  return r;
}

RepoRef repo_ref_or_throw(const std::string& text) {
  RepoRef r;
  if (auto p = parse(text, r); !p.empty())
    throw Error("'" + text + "' is not a Hugging Face repo id ORG/REPO[@REVISION]: it has " + p);
  return r;
}

bool is_commit_hash(const std::string& revision) {
  if (revision.size() != 40) return false;
  for (char c : revision)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string repo_folder_name(const std::string& repo) {
  std::string name = "models--" + repo;
  const auto slash = name.find('/');
  if (slash != std::string::npos) name.replace(slash, 1, "--");
  return name;
}

}  // namespace rowlm::hub
