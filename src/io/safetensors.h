#pragma once
// safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets}, then the raw little-endian data.
//
// Reading validates everything in the header against the bytes that exist,
// so a damaged or hostile file gives a rowlm::Error naming the file (and the
// tensor), never a crash or an out-of-bounds read. Tensors come back as
// zero-copy views whose owner keeps the mapped file alive.

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace rowlm {

// Where one tensor lies: a byte range [begin, end) of the data region.
struct SafetensorsEntry {
  DType dtype = DType::F32;
  Shape shape;
  std::size_t begin = 0;
  std::size_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`.
  static SafetensorsFile open(const std::string& path);
  // Validates a file already in memory. `owner` keeps `bytes` alive for the
  // views handed out; `source` names the file in error messages.
  static SafetensorsFile parse(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                               std::string source);

  const std::string& path() const { return source_; }
  std::size_t size() const { return entries_.size(); }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry* find(const std::string& name) const;
  // A view of the named tensor; throws rowlm::Error naming the file and the
  // tensor if it is absent. Data that is not aligned to its element size
  // (possible only in hand-made files) is copied into owned storage.
  Tensor tensor(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Keeps the file's bytes alive.
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::string source_;
  std::span<const std::byte> data_;  // the data region, after the header
  std::shared_ptr<const void> owner_;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (names unique, not "__metadata__") and string `metadata`
// as a safetensors file that the reference implementation accepts: header
// padded to 8 bytes, tensors packed without gaps, largest element size
// first so every tensor is aligned to its element size. Writes to a
// temporary file and renames it over `path`.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The safetensors dtype string ("F32", "BF16", ...) of a DType.
std::string_view safetensors_dtype_name(DType t);

}  // namespace rowlm
