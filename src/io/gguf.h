#pragma once
// GGUF files (llama.cpp's format, versions 2 and 3; gguf-py and
// ggml/src/gguf.cpp are the references): a little-endian header ("GGUF",
// version, tensor count, metadata count), typed key/value metadata, tensor
// infos (name, dimensions innermost first, ggml type, offset), then the
// tensor data, each tensor at a multiple of `general.alignment` (default
// 32) from the data region's start, which is itself aligned.
//
// open() maps the file and validates everything against the bytes that
// exist: lengths, counts, nesting, duplicate keys or names, known types,
// whole blocks per row, alignment, overlap and bounds, with overflow
// checks. A damaged or hostile file gives a rowlm::Error naming the file
// and the key or tensor at fault, never a crash or an out-of-bounds read.
// A File is immutable after open and may be read from any thread.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "io/gguf_types.h"

namespace rowlm::gguf {

// GGUF metadata value types (gguf_type).
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8,
  Array = 9, U64 = 10, I64 = 11, F64 = 12,
};

// One metadata value. Integers of every width are held as int64_t (a u64
// above INT64_MAX is rejected at open), floats as double, arrays of one
// element type (arrays of arrays are rejected) as a vector of those.
struct Value {
  ValueType type = ValueType::U8;
  ValueType element_type = ValueType::U8;  // arrays only
  std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>,
               std::vector<std::string>>
      data;
};

struct TensorInfo {
  std::string name;
  uint32_t type_code = 0;
  GgmlType type = GgmlType::F32;   // valid when the code is known
  std::vector<int64_t> ne;         // dimensions, innermost first (ggml order)
  std::vector<int64_t> shape() const;  // outermost first (row-major; ne reversed)
  int64_t numel() const;
  std::size_t offset = 0;              // from the data region's start
  std::span<const std::byte> bytes;    // the tensor's data
};

class File {
 public:
  static File open(const std::string& path);
  // Validates a file already in memory; `owner` keeps `bytes` alive and
  // `source` names the file in error messages.
  static File parse(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                    std::string source);

  const std::string& path() const { return source_; }
  uint32_t version() const { return version_; }
  std::size_t alignment() const { return alignment_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

  // Metadata, in file order of keys not guaranteed (sorted map).
  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const Value* find(const std::string& key) const;
  // Typed reads: throw rowlm::Error naming the file and the key if it is
  // absent or of another type (any integer type reads as an integer, any
  // float or integer as a float).
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;
  const std::vector<int64_t>& get_ints(const std::string& key) const;
  const std::vector<double>& get_floats(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // file order
  const TensorInfo* find_tensor(const std::string& name) const;
  // Throws rowlm::Error naming the file and tensor if absent.
  const TensorInfo& tensor(const std::string& name) const;

  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::string source_;
  uint32_t version_ = 0;
  std::size_t alignment_ = 32;
  std::shared_ptr<const void> owner_;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t> index_;
};

// "u32", "string", "array of f32": for error messages.
std::string value_type_name(const Value& v);

}  // namespace rowlm::gguf
