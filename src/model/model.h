#pragma once
// The interface every model family implements, and the loader that picks a
// family from a model directory's config.json.
//
// A forward step takes a flattened batch: tokens from any number of rows,
// each with its row and position. A row's tokens are contiguous in the batch
// and their positions continue the row's stored length in the KV cache, so
// one step can mix prefill chunks of some rows with decode tokens of others.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "kv/kv_cache.h"

namespace rowlm {

struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<kv::RowId> rows;       // per token
  std::vector<int64_t> positions;    // per token
  std::vector<int32_t> logit_rows;   // indices into tokens whose logits are wanted, in output order

  void add(kv::RowId row, int64_t position, int32_t token, bool want_logits) {
    if (want_logits) logit_rows.push_back(int32_t(tokens.size()));
    tokens.push_back(token);
    rows.push_back(row);
    positions.push_back(position);
  }
};

// What commands and the engine need to know about a loaded model.
struct ModelInfo {
  std::string architecture;   // e.g. "gemma4_text"
  std::string directory;
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int max_position = 0;       // 0 = unknown
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  int64_t parameter_count = 0;
  std::size_t weight_bytes = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // The KV storage this model needs: one layer per attention layer that owns
  // its cache, each with `codec`.
  virtual std::vector<kv::LayerSpec> kv_layers(const kv::CodecSpec& codec) const = 0;
  // Runs one step; logits is resized to [batch.logit_rows.size(), vocab] f32.
  // On failure (bad ids, positions, out of KV blocks) it throws and the cache
  // is as it was before the call.
  virtual void forward(const ForwardBatch& batch, kv::KvCache& cache, Tensor& logits) = 0;
  // A human-readable summary of the architecture (for `rowlm inspect`).
  virtual std::string describe() const = 0;
};

// Loads the model in `dir` (config.json + safetensors) for `backend`, which
// must outlive the model.
std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend);

}  // namespace rowlm
