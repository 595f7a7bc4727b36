#pragma once
// A model repository on the Hub named the way people write it:
// ORG/REPO, optionally @REVISION (a branch, a tag or a 40-hex commit).

#include <optional>
#include <string>

namespace rowlm::hub {

struct RepoRef {
  std::string repo;                 // "ORG/REPO"
  std::string revision = "main";

  // "ORG/REPO" or "ORG/REPO@REVISION", for messages.
  std::string display() const;
};

// Parses ORG/REPO[@REVISION] with the Hub's naming rules (letters, digits,
// '-', '_', '.'; no "--" or ".."; at most 96 characters a part). Revisions
// may contain '/' (refs/pr/1) but no "..", no leading '/' and no empty part.
// Returns nullopt for anything else; never throws.
std::optional<RepoRef> parse_repo_ref(const std::string& text);

// The same, throwing rowlm::Error that names `text` and the rule it breaks.
RepoRef repo_ref_or_throw(const std::string& text);

// True for a full commit hash (40 lower-case hex digits).
bool is_commit_hash(const std::string& revision);

// The cache folder name huggingface_hub gives a model repo: models--ORG--REPO.
std::string repo_folder_name(const std::string& repo);

}  // namespace rowlm::hub
