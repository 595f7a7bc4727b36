#pragma once
// One row's K/V outside any pool: what KvCache::extract returns and
// KvCache::restore takes (the seed's per-request KVCache / extractRow).
// Every layer keeps its codec; bytes are canonical token records (codec.h),
// so a row saved and restored is byte-identical to the original.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_cache.h"

namespace rowlm::kv {

struct RowCache {
  struct Layer {
    int64_t first = 0;               // first stored position
    std::vector<std::byte> records;  // positions [first, length): token_record_bytes each
  };
  std::vector<LayerSpec> layers;
  int64_t length = 0;                   // also the position of the row's next token
  int64_t minimum_reusable_offset = 0;
  std::vector<Layer> data;              // one per layer

  std::size_t bytes() const;
  // The record of `position` in `layer` (must be stored).
  const std::byte* record(int layer, int64_t position) const;
};

// Throws rowlm::Error naming `what` and the first inconsistency (layer count,
// a bad layer spec, first > length, record bytes that do not match).
void check_row_cache(const RowCache& row, const std::string& what);

// A file holds one row: a header (magic, version, layout, length, offsets,
// sizes), the records, and a checksum. Loading validates all of it; a
// truncated, corrupted or foreign file is an Error naming the path.
void save_row_cache(const RowCache& row, const std::string& path);
RowCache load_row_cache(const std::string& path);

}  // namespace rowlm::kv
