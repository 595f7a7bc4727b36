#include "kv/row_cache.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "core/error.h"
#include "kvcodec/codec.h"

namespace rowlm::kv {
namespace {

constexpr char kMagic[8] = {'R', 'O', 'W', 'L', 'M', 'K', 'V', '1'};
constexpr uint32_t kVersion = 1;

// FNV-1a, 64 bit: enough to tell a damaged file from a good one.
uint64_t fnv1a(const std::byte* p, std::size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  for (std::size_t i = 0; i < n; ++i) {
    h ^= uint64_t(p[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

class Writer {
 public:
  template <class T> void put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_bytes(const std::byte* p, std::size_t n) { bytes_.insert(bytes_.end(), p, p + n); }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

class Reader {
 public:
  Reader(const std::vector<std::byte>& bytes, std::size_t end, const std::string& path)
      : bytes_(bytes), end_(end), path_(path) {}
  template <class T> T get(const char* field) {
    T v;
    need(sizeof(T), field);
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const std::byte* take(std::size_t n, const char* field) {
    need(n, field);
    const std::byte* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::size_t pos() const { return pos_; }

 private:
  void need(std::size_t n, const char* field) {
    if (n > end_ - pos_)
      throw Error("KV row file " + path_ + ": truncated while reading " + field);
  }
  const std::vector<std::byte>& bytes_;
  std::size_t end_;
  std::size_t pos_ = 0;
  const std::string& path_;
};

}  // namespace

std::size_t RowCache::bytes() const {
  std::size_t n = 0;
  for (const Layer& l : data) n += l.records.size();
  return n;
}

const std::byte* RowCache::record(int layer, int64_t position) const {
  const Layer& l = data.at(std::size_t(layer));
  ROWLM_CHECK(position >= l.first && position < length, "RowCache::record position out of range");
  return l.records.data() + std::size_t(position - l.first) * token_record_bytes(layers[std::size_t(layer)]);
}

void check_row_cache(const RowCache& row, const std::string& what) {
  if (row.layers.empty()) throw Error(what + ": no layers");
  if (row.data.size() != row.layers.size())
    throw Error(what + ": " + std::to_string(row.data.size()) + " layer payloads for " +
                std::to_string(row.layers.size()) + " layers");
  if (row.length < 0 || row.length > (int64_t(1) << 40))
    throw Error(what + ": implausible length " + std::to_string(row.length));
  if (row.minimum_reusable_offset < 0 || row.minimum_reusable_offset > row.length)
    throw Error(what + ": minimum reusable offset " + std::to_string(row.minimum_reusable_offset) +
                " outside [0, length " + std::to_string(row.length) + "]");
  for (std::size_t i = 0; i < row.layers.size(); ++i) {
    check_layer_spec(row.layers[i], int(i));
    const RowCache::Layer& l = row.data[i];
    if (l.first < 0 || l.first > row.length)
      throw Error(what + ": layer " + std::to_string(i) + " first position " + std::to_string(l.first) +
                  " outside [0, length " + std::to_string(row.length) + "]");
    const std::size_t rec = token_record_bytes(row.layers[i]);
    if (std::size_t(row.length - l.first) > (std::size_t(1) << 46) / rec)
      throw Error(what + ": layer " + std::to_string(i) + " would hold an implausible " +
                  std::to_string(row.length - l.first) + " records of " + std::to_string(rec) + " bytes");
    const std::size_t want = std::size_t(row.length - l.first) * rec;
    if (l.records.size() != want)
      throw Error(what + ": layer " + std::to_string(i) + " holds " + std::to_string(l.records.size()) +
                  " bytes, expected " + std::to_string(want) + " for positions [" + std::to_string(l.first) +
                  ", " + std::to_string(row.length) + ")");
  }
}

void save_row_cache(const RowCache& row, const std::string& path) {
  check_row_cache(row, "KV row to save to " + path);
  Writer w;
  w.put_bytes(reinterpret_cast<const std::byte*>(kMagic), sizeof kMagic);
  w.put<uint32_t>(kVersion);
  w.put<uint32_t>(uint32_t(row.layers.size()));
  w.put<int64_t>(row.length);
  w.put<int64_t>(row.minimum_reusable_offset);
  for (std::size_t i = 0; i < row.layers.size(); ++i) {
    const LayerSpec& s = row.layers[i];
    w.put<int32_t>(s.kv_heads);
    w.put<int32_t>(s.head_dim);
    w.put<int32_t>(s.window);
    w.put<uint8_t>(uint8_t(s.codec.codec));
    w.put<int32_t>(s.codec.group_size);
    w.put<int64_t>(row.data[i].first);
    w.put<uint64_t>(row.data[i].records.size());
  }
  for (const RowCache::Layer& l : row.data) w.put_bytes(l.records.data(), l.records.size());
  w.put<uint64_t>(fnv1a(w.bytes().data(), w.bytes().size()));

  // Write beside the target and rename, so a crash never leaves half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot open " + tmp + " for writing");
    out.write(reinterpret_cast<const char*>(w.bytes().data()), std::streamsize(w.bytes().size()));
    out.flush();
    if (!out) throw Error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + path);
  }
}

RowCache load_row_cache(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open KV row file " + path);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(raw.size());
  if (!raw.empty()) std::memcpy(bytes.data(), raw.data(), raw.size());
  if (bytes.size() < sizeof kMagic + sizeof(uint64_t))
    throw Error("KV row file " + path + ": too short (" + std::to_string(bytes.size()) + " bytes)");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw Error("KV row file " + path + ": not a rowlm KV row file (bad magic)");
  const std::size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t stored_sum;
  std::memcpy(&stored_sum, bytes.data() + body, sizeof stored_sum);

  Reader r(bytes, body, path);
  r.take(sizeof kMagic, "magic");
  const uint32_t version = r.get<uint32_t>("version");
  if (version != kVersion)
    throw Error("KV row file " + path + ": version " + std::to_string(version) + " is not supported (expected " +
                std::to_string(kVersion) + ")");
  const uint32_t n_layers = r.get<uint32_t>("layer count");
  if (n_layers == 0 || n_layers > 4096)
    throw Error("KV row file " + path + ": implausible layer count " + std::to_string(n_layers));
  RowCache row;
  row.length = r.get<int64_t>("length");
  row.minimum_reusable_offset = r.get<int64_t>("minimum reusable offset");
  std::vector<uint64_t> sizes(n_layers);
  row.layers.resize(n_layers);
  row.data.resize(n_layers);
  for (uint32_t i = 0; i < n_layers; ++i) {
    LayerSpec& s = row.layers[i];
    s.kv_heads = r.get<int32_t>("kv_heads");
    s.head_dim = r.get<int32_t>("head_dim");
    s.window = r.get<int32_t>("window");
    const uint8_t codec = r.get<uint8_t>("codec");
    if (codec > uint8_t(Codec::Q4))
      throw Error("KV row file " + path + ": layer " + std::to_string(i) + " has unknown codec " +
                  std::to_string(codec));
    s.codec.codec = Codec(codec);
    s.codec.group_size = r.get<int32_t>("group size");
    row.data[i].first = r.get<int64_t>("first position");
    sizes[i] = r.get<uint64_t>("layer size");
    try {
      check_layer_spec(s, int(i));
    } catch (const Error& e) {
      throw Error("KV row file " + path + ": " + e.what());
    }
  }
  for (uint32_t i = 0; i < n_layers; ++i) {
    if (sizes[i] > body - r.pos())
      throw Error("KV row file " + path + ": layer " + std::to_string(i) + " claims " + std::to_string(sizes[i]) +
                  " bytes but the file is shorter");
    const std::byte* p = r.take(std::size_t(sizes[i]), "layer records");
    row.data[i].records.assign(p, p + sizes[i]);
  }
  if (r.pos() != body)
    throw Error("KV row file " + path + ": " + std::to_string(body - r.pos()) + " unexpected trailing bytes");
  if (fnv1a(bytes.data(), body) != stored_sum)
    throw Error("KV row file " + path + ": checksum mismatch (the file is damaged)");
  check_row_cache(row, "KV row file " + path);
  return row;
}

}  // namespace rowlm::kv
