#pragma once
// Builds GGUF images in memory for the reader's tests: the header, typed
// metadata and tensor infos as the format lays them out, with whatever
// (possibly invalid) values a test wants.

#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <variant>
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
  Image& raw(const std::string& b) {
    bytes_ += b;
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// One metadata value as the format stores it (type tag not included).
inline void put_value(Image& img, ValueType t, const Value& v, std::size_t index = SIZE_MAX) {
  auto integer = [&]() -> int64_t {
    return index == SIZE_MAX ? std::get<int64_t>(v.data) : std::get<std::vector<int64_t>>(v.data)[index];
  };
  auto real = [&]() -> double {
    return index == SIZE_MAX ? std::get<double>(v.data) : std::get<std::vector<double>>(v.data)[index];
  };
  switch (t) {
    case ValueType::U8: img.put<uint8_t>(uint8_t(integer())); break;
    case ValueType::I8: img.put<int8_t>(int8_t(integer())); break;
    case ValueType::U16: img.put<uint16_t>(uint16_t(integer())); break;
    case ValueType::I16: img.put<int16_t>(int16_t(integer())); break;
    case ValueType::U32: img.put<uint32_t>(uint32_t(integer())); break;
    case ValueType::I32: img.put<int32_t>(int32_t(integer())); break;
    case ValueType::U64: img.put<uint64_t>(uint64_t(integer())); break;
    case ValueType::I64: img.put<int64_t>(integer()); break;
    case ValueType::F32: img.put<float>(float(real())); break;
    case ValueType::F64: img.put<double>(real()); break;
    case ValueType::Bool:
      img.put<uint8_t>(index == SIZE_MAX ? uint8_t(std::get<bool>(v.data)) : uint8_t(integer()));
      break;
    case ValueType::String:
      img.str(index == SIZE_MAX ? std::get<std::string>(v.data) : std::get<std::vector<std::string>>(v.data)[index]);
      break;
    case ValueType::Array: {
      img.put<uint32_t>(uint32_t(v.element_type));
      const std::size_t n = std::visit(
          [](const auto& x) -> std::size_t {
            if constexpr (requires { x.size(); } && !std::is_same_v<std::decay_t<decltype(x)>, std::string>)
              return x.size();
            return 0;
          },
          v.data);
      img.put<uint64_t>(n);
      for (std::size_t i = 0; i < n; ++i) put_value(img, v.element_type, v, i);
      break;
    }
  }
}

// `f` written again (same metadata, tensors in the same order) with each
// tensor's type and data replaced by what `data` returns for it.
struct TensorData {
  uint32_t type;
  std::string bytes;
};
inline std::string rewrite(const File& f, const std::function<TensorData(const TensorInfo&)>& data) {
  Image img;
  img.header(f.tensors().size(), f.metadata().size(), f.version());
  for (const auto& [key, v] : f.metadata()) {
    img.str(key).put<uint32_t>(uint32_t(v.type));
    put_value(img, v.type, v);
  }
  std::vector<TensorData> all;
  uint64_t offset = 0;
  for (const TensorInfo& t : f.tensors()) {
    all.push_back(data(t));
    img.tensor(t.name, {t.ne.begin(), t.ne.end()}, all.back().type, offset);
    offset += (all.back().bytes.size() + f.alignment() - 1) / f.alignment() * f.alignment();
  }
  for (const TensorData& d : all) {
    img.data(0, f.alignment());
    img.raw(d.bytes);
  }
  img.data(0, f.alignment());
  return img.bytes();
}

inline File parse(const std::string& bytes, const std::string& source = "mem.gguf") {
  auto owner = std::make_shared<const std::string>(bytes);
  return File::parse(std::as_bytes(std::span(owner->data(), owner->size())), owner, source);
}

}  // namespace rowlm::gguf::testing
