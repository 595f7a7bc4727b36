#pragma once
// A repository's files at one commit, as the Hub's API lists them
// (GET /api/models/ORG/REPO/revision/REV?blobs=true), and the files of it
// rowlm needs.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rowlm::hub {

struct RepoFile {
  std::string path;                   // "model-00001-of-00002.safetensors"
  std::optional<std::uint64_t> size;  // the file's size (the LFS object's for LFS files)
  std::string blob_id;                // git blob id (SHA-1), when listed
  std::optional<std::string> lfs_sha256;  // for LFS files: the content's SHA-256
};

struct RepoListing {
  std::string commit;  // the commit the revision resolved to
  std::vector<RepoFile> files;
};

// Parses the API's JSON answer; throws rowlm::Error naming what is missing
// or malformed (`what` names the source in messages).
RepoListing parse_repo_listing(const std::string& json_text, const std::string& what);

struct FileChoice {
  std::string file;  // --file: this file (e.g. one GGUF) instead of the safetensors weights
  std::string quant;  // --quant: the GGUF file whose name carries this quantization (Q4_K_M)
};

// The files rowlm needs: config, generation config and tokenizer files, and
// the weights: every top-level *.safetensors with its index, or (with
// --file/--quant, or when the repo has only GGUF) one GGUF file (all parts of
// a split one). Throws rowlm::Error that lists the candidates when the
// choice is missing or ambiguous, or when the repo has no weights rowlm reads.
std::vector<RepoFile> select_files(const RepoListing& listing, const FileChoice& choice);

}  // namespace rowlm::hub
