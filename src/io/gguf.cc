#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "io/mapped_file.h"

namespace rowlm::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS

// Sequential little-endian reads that never pass the end of the bytes.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const std::string& source) : b_(bytes), source_(source) {}

  std::size_t pos() const { return pos_; }
  std::size_t left() const { return b_.size() - pos_; }

  template <class T> T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t n = read<uint64_t>(what.c_str());
    need(n, what.c_str());
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), std::size_t(n));
    pos_ += std::size_t(n);
    return s;
  }
  // n items of at least `each` bytes must fit in what is left (checked
  // without multiplying, which could wrap).
  void need_items(uint64_t n, std::size_t each, const char* what) const {
    if (n > left() / each)
      throw Error(source_ + ": GGUF file is truncated: " + what + " has " + std::to_string(n) +
                  " entries but only " + std::to_string(left()) + " bytes are left");
  }
  void need(uint64_t n, const char* what) const {
    if (n > left())
      throw Error(source_ + ": GGUF file is truncated: " + what + " needs " + std::to_string(n) +
                  " bytes at offset " + std::to_string(pos_) + ", " + std::to_string(left()) + " left");
  }

 private:
  std::span<const std::byte> b_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

bool is_scalar_integer(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
    default: return false;
  }
}

std::string scalar_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "type " + std::to_string(uint32_t(t));
}

bool known_value_type(uint32_t t) { return t <= uint32_t(ValueType::F64); }

// One integer of type t; `what` names the key in errors.
int64_t read_integer(Reader& r, ValueType t, const std::string& what, const std::string& source) {
  switch (t) {
    case ValueType::U8: return r.read<uint8_t>(what.c_str());
    case ValueType::I8: return r.read<int8_t>(what.c_str());
    case ValueType::U16: return r.read<uint16_t>(what.c_str());
    case ValueType::I16: return r.read<int16_t>(what.c_str());
    case ValueType::U32: return r.read<uint32_t>(what.c_str());
    case ValueType::I32: return r.read<int32_t>(what.c_str());
    case ValueType::I64: return r.read<int64_t>(what.c_str());
    case ValueType::U64: {
      const uint64_t v = r.read<uint64_t>(what.c_str());
      if (v > uint64_t(std::numeric_limits<int64_t>::max()))
        throw Error(source + ": GGUF " + what + ": u64 value " + std::to_string(v) + " is too large");
      return int64_t(v);
    }
    default: break;
  }
  ROWLM_CHECK(false, "read_integer of a non-integer type");
}

// The size one element of a scalar type takes (strings: at least their length).
std::size_t min_element_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    default: return 8;
  }
}

Value read_value(Reader& r, ValueType t, const std::string& key, const std::string& source) {
  const std::string what = "metadata '" + key + "'";
  Value v;
  v.type = t;
  if (is_scalar_integer(t)) {
    v.data = read_integer(r, t, what, source);
  } else if (t == ValueType::F32) {
    v.data = double(r.read<float>(what.c_str()));
  } else if (t == ValueType::F64) {
    v.data = r.read<double>(what.c_str());
  } else if (t == ValueType::Bool) {
    const uint8_t b = r.read<uint8_t>(what.c_str());
    if (b > 1) throw Error(source + ": GGUF " + what + ": bool value " + std::to_string(b) + " is not 0 or 1");
    v.data = b == 1;
  } else if (t == ValueType::String) {
    v.data = r.string(what);
  } else {  // Array
    const uint32_t et = r.read<uint32_t>(what.c_str());
    if (!known_value_type(et))
      throw Error(source + ": GGUF " + what + ": unknown array element type " + std::to_string(et));
    v.element_type = ValueType(et);
    if (v.element_type == ValueType::Array)
      throw Error(source + ": GGUF " + what + ": arrays of arrays are not supported");
    const uint64_t n = r.read<uint64_t>(what.c_str());
    // Bounds the allocation below by the bytes that exist.
    r.need_items(n, min_element_bytes(v.element_type), what.c_str());
    if (v.element_type == ValueType::String) {
      std::vector<std::string> s;
      s.reserve(std::size_t(n));
      for (uint64_t i = 0; i < n; ++i) s.push_back(r.string(what));
      v.data = std::move(s);
    } else if (v.element_type == ValueType::F32 || v.element_type == ValueType::F64) {
      std::vector<double> f(static_cast<std::size_t>(n));
      for (auto& x : f)
        x = v.element_type == ValueType::F32 ? double(r.read<float>(what.c_str())) : r.read<double>(what.c_str());
      v.data = std::move(f);
    } else {
      std::vector<int64_t> ints(static_cast<std::size_t>(n));
      for (auto& x : ints) {
        if (v.element_type == ValueType::Bool) {
          x = r.read<uint8_t>(what.c_str());
          if (x > 1) throw Error(source + ": GGUF " + what + ": bool element is not 0 or 1");
        } else {
          x = read_integer(r, v.element_type, what, source);
        }
      }
      v.data = std::move(ints);
    }
  }
  return v;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_mul_overflow(a, b, &out); }

}  // namespace

std::string value_type_name(const Value& v) {
  if (v.type == ValueType::Array) return "array of " + scalar_type_name(v.element_type);
  return scalar_type_name(v.type);
}

std::vector<int64_t> TensorInfo::shape() const { return {ne.rbegin(), ne.rend()}; }

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

File File::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  const auto bytes = mapped->bytes();
  return parse(bytes, std::move(mapped), path);
}

File File::parse(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, std::string source) {
  File f;
  f.source_ = std::move(source);
  f.owner_ = std::move(owner);
  const std::string& src = f.source_;
  Reader r(bytes, src);

  if (bytes.size() < 4 || r.read<uint32_t>("the magic") != kMagic)
    throw Error(src + ": not a GGUF file (it does not start with \"GGUF\")");
  f.version_ = r.read<uint32_t>("the version");
  if (f.version_ != 2 && f.version_ != 3) {
    if (f.version_ == 0x03000000 || f.version_ == 0x02000000)
      throw Error(src + ": big-endian GGUF files are not supported");
    throw Error(src + ": GGUF version " + std::to_string(f.version_) + " is not supported (2 or 3)");
  }
  const uint64_t n_tensors = r.read<uint64_t>("the tensor count");
  const uint64_t n_kv = r.read<uint64_t>("the metadata count");
  // Each metadata entry takes at least 12 bytes, each tensor info 24.
  r.need_items(n_kv, 12, "the metadata");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.string("metadata key " + std::to_string(i));
    const uint32_t t = r.read<uint32_t>(("the type of metadata '" + key + "'").c_str());
    if (!known_value_type(t))
      throw Error(src + ": GGUF metadata '" + key + "': unknown value type " + std::to_string(t));
    Value v = read_value(r, ValueType(t), key, src);
    if (f.metadata_.count(key)) throw Error(src + ": GGUF metadata key '" + key + "' appears twice");
    f.metadata_.emplace(std::move(key), std::move(v));
  }

  if (const Value* a = f.find("general.alignment")) {
    if (a->type != ValueType::U32)
      throw Error(src + ": GGUF metadata 'general.alignment' must be u32, not " + value_type_name(*a));
    const int64_t al = std::get<int64_t>(a->data);
    if (al <= 0 || (al & (al - 1)) != 0)
      throw Error(src + ": GGUF metadata 'general.alignment' = " + std::to_string(al) + " is not a power of two");
    f.alignment_ = std::size_t(al);
  }

  r.need_items(n_tensors, 24, "the tensor infos");
  f.tensors_.reserve(std::size_t(n_tensors));
  std::vector<std::size_t> sizes;
  sizes.reserve(std::size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = r.string("tensor name " + std::to_string(i));
    const std::string what = "tensor '" + t.name + "'";
    const uint32_t n_dims = r.read<uint32_t>(what.c_str());
    if (n_dims < 1 || n_dims > kMaxDims)
      throw Error(src + ": GGUF " + what + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = r.read<uint64_t>(what.c_str());
      if (n < 1 || n > uint64_t(std::numeric_limits<int64_t>::max()) || mul_overflows(numel, n, numel) ||
          numel > uint64_t(std::numeric_limits<int64_t>::max()))
        throw Error(src + ": GGUF " + what + " has an invalid dimension " + std::to_string(n));
      t.ne.push_back(int64_t(n));
    }
    t.type_code = r.read<uint32_t>(what.c_str());
    const auto traits = ggml_type_traits(t.type_code);
    if (!traits) throw Error(src + ": GGUF " + what + " has unknown type " + std::to_string(t.type_code));
    t.type = GgmlType(t.type_code);
    if (t.ne[0] % traits->block_size != 0)
      throw Error(src + ": GGUF " + what + " of type " + std::string(traits->name) + " has " +
                  std::to_string(t.ne[0]) + " elements per row, not a multiple of its block size " +
                  std::to_string(traits->block_size));
    const uint64_t offset = r.read<uint64_t>(what.c_str());
    if (offset % f.alignment_ != 0)
      throw Error(src + ": GGUF " + what + " starts at data offset " + std::to_string(offset) +
                  ", not a multiple of the alignment " + std::to_string(f.alignment_));
    uint64_t nbytes = 0;
    if (mul_overflows(numel / uint64_t(traits->block_size), uint64_t(traits->block_bytes), nbytes))
      throw Error(src + ": GGUF " + what + " is too large");
    t.offset = std::size_t(offset);
    sizes.push_back(std::size_t(nbytes));  // t.bytes is placed once the data region is known
    if (f.index_.count(t.name)) throw Error(src + ": GGUF tensor name '" + t.name + "' appears twice");
    f.index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  const std::size_t data_start = (r.pos() + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (data_start > bytes.size() && !f.tensors_.empty())
    throw Error(src + ": GGUF file is truncated: the tensor data region is missing");
  const std::size_t data_size = data_start <= bytes.size() ? bytes.size() - data_start : 0;

  // Bounds, then overlap in offset order.
  std::vector<const TensorInfo*> by_offset;
  for (std::size_t i = 0; i < f.tensors_.size(); ++i) {
    TensorInfo& t = f.tensors_[i];
    const std::size_t n = sizes[i];
    if (t.offset > data_size || n > data_size - t.offset)
      throw Error(src + ": GGUF file is truncated: tensor '" + t.name + "' needs bytes [" +
                  std::to_string(t.offset) + ", " + std::to_string(t.offset + n) + ") of a data region of " +
                  std::to_string(data_size));
    t.bytes = bytes.subspan(data_start + t.offset, n);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (a.offset + a.bytes.size() > b.offset)
      throw Error(src + ": GGUF tensors '" + a.name + "' and '" + b.name + "' overlap");
  }
  return f;
}

void File::fail(const std::string& what) const { throw Error(source_ + ": " + what); }

const Value* File::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
const Value& need_key(const File& f, const std::string& key) {
  const Value* v = f.find(key);
  if (!v) f.fail("GGUF metadata '" + key + "' is missing");
  return *v;
}
[[noreturn]] void wrong_type(const File& f, const std::string& key, const Value& v, const char* wanted) {
  f.fail("GGUF metadata '" + key + "' must be " + wanted + ", not " + value_type_name(v));
}
}  // namespace

std::string File::get_string(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type != ValueType::String) wrong_type(*this, key, v, "a string");
  return std::get<std::string>(v.data);
}

int64_t File::get_int(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (!is_scalar_integer(v.type)) wrong_type(*this, key, v, "an integer");
  return std::get<int64_t>(v.data);
}

double File::get_float(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type == ValueType::F32 || v.type == ValueType::F64) return std::get<double>(v.data);
  if (is_scalar_integer(v.type)) return double(std::get<int64_t>(v.data));
  wrong_type(*this, key, v, "a number");
}

bool File::get_bool(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type != ValueType::Bool) wrong_type(*this, key, v, "a bool");
  return std::get<bool>(v.data);
}

const std::vector<std::string>& File::get_strings(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type != ValueType::Array || v.element_type != ValueType::String)
    wrong_type(*this, key, v, "an array of strings");
  return std::get<std::vector<std::string>>(v.data);
}

const std::vector<int64_t>& File::get_ints(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type != ValueType::Array || !(is_scalar_integer(v.element_type) || v.element_type == ValueType::Bool))
    wrong_type(*this, key, v, "an array of integers");
  return std::get<std::vector<int64_t>>(v.data);
}

const std::vector<double>& File::get_floats(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type != ValueType::Array || !(v.element_type == ValueType::F32 || v.element_type == ValueType::F64))
    wrong_type(*this, key, v, "an array of floats");
  return std::get<std::vector<double>>(v.data);
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("GGUF tensor '" + name + "' is missing");
  return *t;
}

}  // namespace rowlm::gguf
