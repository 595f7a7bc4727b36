#include "io/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"

namespace rowlm {
namespace {

using json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; a length
// beyond that is damage, not a header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "F32") return DType::F32;
  if (s == "BF16") return DType::BF16;
  if (s == "F16") return DType::F16;
  if (s == "U32") return DType::U32;
  if (s == "I32") return DType::I32;
  if (s == "U8") return DType::U8;
  if (s == "I64") return DType::I64;
  return std::nullopt;
}

uint64_t read_le_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint64_t(p[i]);
  return v;
}

// A JSON value that must be a non-negative integer, as uint64.
std::optional<uint64_t> as_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  return std::nullopt;
}

class HeaderParser {
 public:
  HeaderParser(const std::string& source, std::size_t data_size) : source_(source), data_size_(data_size) {}

  [[noreturn]] void fail(const std::string& what) const { throw Error(source_ + ": " + what); }
  [[noreturn]] void fail(const std::string& tensor, const std::string& what) const {
    throw Error(source_ + ": tensor '" + tensor + "': " + what);
  }

  json parse(std::string_view text) {
    // nlohmann keeps the last of duplicate keys silently; a callback sees
    // every top-level key, so duplicates can be refused.
    std::set<std::string> seen;
    std::optional<std::string> duplicate;
    auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && !duplicate) {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!seen.insert(key).second) duplicate = key;
      }
      return true;
    };
    json header;
    try {
      header = json::parse(text.begin(), text.end(), on_event);
    } catch (const json::exception& e) {
      fail(std::string("header is not valid JSON (") + e.what() + ")");
    }
    if (duplicate) fail(*duplicate, "listed twice in the header");
    if (!header.is_object()) fail("header is not a JSON object");
    return header;
  }

  std::map<std::string, std::string> metadata(const json& v) const {
    std::map<std::string, std::string> out;
    if (v.is_null()) return out;
    if (!v.is_object()) fail("__metadata__ is not an object of strings");
    for (const auto& [key, value] : v.items()) {
      if (!value.is_string()) fail("__metadata__ value '" + key + "' is not a string");
      out[key] = value.get<std::string>();
    }
    return out;
  }

  SafetensorsEntry entry(const std::string& name, const json& v) const {
    if (!v.is_object()) fail(name, "header entry is not an object");
    SafetensorsEntry e;
    const auto dtype = v.find("dtype");
    if (dtype == v.end()) fail(name, "missing dtype");
    if (!dtype->is_string()) fail(name, "dtype is not a string");
    const auto parsed = parse_dtype(dtype->get<std::string>());
    if (!parsed) fail(name, "unsupported dtype '" + dtype->get<std::string>() + "' (expected F32, BF16, F16, U32, I32, U8 or I64)");
    e.dtype = *parsed;

    const auto shape = v.find("shape");
    if (shape == v.end()) fail(name, "missing shape");
    if (!shape->is_array()) fail(name, "shape is not an array");
    // The element count must fit the file, so any product past data_size_
    // is already wrong; stopping there also rules out overflow.
    uint64_t numel = 1;
    bool too_big = false;
    for (const json& d : *shape) {
      const auto dim = as_count(d);
      if (!dim) fail(name, "shape " + shape->dump() + " has a dimension that is not a non-negative integer");
      if (*dim > uint64_t(INT64_MAX)) fail(name, "shape " + shape->dump() + " has a dimension too large");
      e.shape.push_back(int64_t(*dim));
      if (*dim == 0) numel = 0;
      else if (numel > data_size_ / *dim) too_big = true;
      else numel *= *dim;
    }
    if (numel == 0) too_big = false;

    const auto offsets = v.find("data_offsets");
    if (offsets == v.end()) fail(name, "missing data_offsets");
    if (!offsets->is_array() || offsets->size() != 2) fail(name, "data_offsets is not a pair [begin, end]");
    const auto begin = as_count((*offsets)[0]), end = as_count((*offsets)[1]);
    if (!begin || !end) fail(name, "data_offsets " + offsets->dump() + " are not non-negative integers");
    if (*begin > *end) fail(name, "data_offsets " + offsets->dump() + " are reversed");
    if (*end > data_size_) {
      fail(name, "data_offsets " + offsets->dump() + " run past the data region (" + std::to_string(data_size_) +
                     " bytes)");
    }
    const uint64_t span = *end - *begin;
    if (too_big || numel * dtype_size(e.dtype) != span) {
      fail(name, "shape " + shape_str(e.shape) + " of " + std::string(dtype_name(e.dtype)) + " needs " +
                     (too_big ? std::string("more bytes than the file holds") : std::to_string(numel * dtype_size(e.dtype)) + " bytes") +
                     " but data_offsets " + offsets->dump() + " span " + std::to_string(span));
    }
    e.begin = std::size_t(*begin);
    e.end = std::size_t(*end);
    return e;
  }

  void check_no_overlap(const std::map<std::string, SafetensorsEntry>& entries) const {
    std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
    for (const auto& [name, e] : entries) {
      if (e.end > e.begin) order.emplace_back(&name, &e);
    }
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
    for (std::size_t i = 1; i < order.size(); ++i) {
      if (order[i].second->begin < order[i - 1].second->end) {
        fail(*order[i].first, "data overlaps tensor '" + *order[i - 1].first + "'");
      }
    }
  }

 private:
  const std::string& source_;
  std::size_t data_size_;
};

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::U32: return "U32";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
    case DType::I64: return "I64";
  }
  return "?";
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto mapping = MappedFile::open(path);
  const auto bytes = mapping->bytes();
  return parse(bytes, std::move(mapping), path);
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                       std::string source) {
  SafetensorsFile file;
  file.source_ = std::move(source);
  file.owner_ = std::move(owner);
  const std::string& src = file.source_;
  if (bytes.size() < 8) {
    throw Error(src + ": too short for a safetensors file (" + std::to_string(bytes.size()) +
                " bytes; the 8-byte header length is missing)");
  }
  const uint64_t header_len = read_le_u64(bytes.data());
  if (header_len > kMaxHeaderBytes) {
    throw Error(src + ": header length " + std::to_string(header_len) + " is not plausible (limit " +
                std::to_string(kMaxHeaderBytes) + "); not a safetensors file?");
  }
  if (header_len > bytes.size() - 8) {
    throw Error(src + ": header length " + std::to_string(header_len) + " runs past the end of the file (" +
                std::to_string(bytes.size()) + " bytes): truncated?");
  }
  file.data_ = bytes.subspan(8 + header_len);
  HeaderParser parser(src, file.data_.size());
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  const json header = parser.parse(text);
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      file.metadata_ = parser.metadata(value);
    } else {
      file.entries_.emplace(name, parser.entry(name, value));
    }
  }
  parser.check_no_overlap(file.entries_);
  return file;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (!e) throw Error(source_ + ": no tensor named '" + name + "'");
  const std::byte* data = data_.data() + e->begin;
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(e->dtype) == 0) return Tensor::view(e->dtype, e->shape, data, owner_);
  Tensor copy(e->dtype, e->shape);
  if (e->end > e->begin) std::memcpy(copy.raw(), data, e->end - e->begin);
  return copy;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") throw Error(path + ": '__metadata__' cannot name a tensor");
    if (!names.insert(name).second) throw Error(path + ": tensor '" + name + "' given twice");
  }
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (std::size_t i : order) {
    const Tensor& t = tensors[i].second;
    header[tensors[i].first] = {{"dtype", safetensors_dtype_name(t.dtype())},
                                {"shape", t.shape()},
                                {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot open " + tmp + " for writing");
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (std::size_t i : order) {
      const Tensor& t = tensors[i].second;
      if (t.nbytes()) out.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
    }
    out.flush();
    if (!out) throw Error("failed writing " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error("cannot move " + tmp + " to " + path);
  }
}

}  // namespace rowlm
