#pragma once
// Builds GGUF images in memory for the reader's tests: the header, typed
// metadata and tensor infos as the format lays them out, with whatever
// (possibly invalid) values a test wants.

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace rowlm::gguf::testing {

class Image {
 public:
  template <class T> Image& put(T v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes_.append(p, sizeof(T));
    return *this;
  }
  Image& str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_ += s;
    return *this;
  }
  Image& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    bytes_ += "GGUF";
    return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  Image& kv_u32(const std::string& key, uint32_t v) { return str(key).put<uint32_t>(uint32_t(ValueType::U32)).put(v); }
  Image& kv_string(const std::string& key, const std::string& v) {
    return str(key).put<uint32_t>(uint32_t(ValueType::String)).str(v);
  }
  // A tensor info: dims innermost first.
  Image& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(uint32_t(ne.size()));
    for (uint64_t n : ne) put(n);
    return put(type).put(offset);
  }
  // Zero padding up to a multiple of `alignment`, then `n` data bytes.
  Image& data(std::size_t n, std::size_t alignment = 32, char fill = 0) {
    bytes_.append((alignment - bytes_.size() % alignment) % alignment, '\0');
    bytes_.append(n, fill);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

inline File parse(const std::string& bytes, const std::string& source = "mem.gguf") {
  auto owner = std::make_shared<const std::string>(bytes);
  return File::parse(std::as_bytes(std::span(owner->data(), owner->size())), owner, source);
}

}  // namespace rowlm::gguf::testing
