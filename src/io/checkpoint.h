#pragma once
// A model directory's tensors, whichever way they are stored:
//   model.safetensors                      one file
//   model.safetensors.index.json           {"weight_map": {name: shard file}} + shards
//   *.safetensors without an index         every file, names must not repeat
// (looked for in that order). Every file is mapped and validated on open;
// an index must agree with its shards.

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/safetensors.h"

namespace rowlm {

class Checkpoint {
 public:
  static Checkpoint open(const std::string& model_dir);

  const std::string& dir() const { return dir_; }
  // The file that lists the tensors (model.safetensors, the index, or the
  // directory when files are found by name): what error messages cite.
  const std::string& listing() const { return listing_; }

  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // The entry (dtype, shape) without making a view; null if absent.
  const SafetensorsEntry* find(const std::string& name) const;
  // A zero-copy view; throws rowlm::Error naming the tensor and listing if absent.
  Tensor tensor(const std::string& name) const;
  // The file holding `name`, or listing() if it is absent.
  const std::string& file_of(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted

  // Keeps every mapped file alive; give it to whatever holds the views.
  std::shared_ptr<const void> storage() const;

 private:
  std::string dir_;
  std::string listing_;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, std::size_t> where_;  // tensor name -> files_ index
};

// The tensor-name prefix of the text decoder: "model." (text-only
// Gemma4ForCausalLM), "model.language_model." (Gemma4ForConditionalGeneration)
// or "language_model.model." (MLX), whichever has `embed_tokens.weight`.
// Throws rowlm::Error listing the names tried if none does.
std::string detect_text_prefix(const Checkpoint& checkpoint);

}  // namespace rowlm
