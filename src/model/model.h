#pragma once
// The interface every model implements, and the loader that picks a family
// from a model directory's config.json (families.h).
//
// A forward step takes a flattened batch: tokens from any number of rows,
// grouped in runs (consecutive tokens of one row). A row has at most one run
// per step and its run continues the row's stored length in the KV cache, so
// one step can mix prefill chunks of some rows with decode tokens of others.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/row_sampling.h"
#include "core/tensor.h"
#include "kv/kv_cache.h"
#include "rowlm/model_info.h"

namespace rowlm {

struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<kv::TokenRun> runs;    // tokens in run order
  std::vector<int32_t> logit_rows;   // indices into tokens whose logits are wanted, in output order
  // Per logits row, or empty for none: 1 where the caller needs only the
  // row's argmax code (backend/argmax_code.h), not the row (a greedy row:
  // on a GPU its logits then never cross to the host).
  std::vector<uint8_t> argmax_only;
  // Rows sampled where the logits are (Backend::sample_rows), each naming
  // its logits row (RowSampling::row), which must be marked argmax_only;
  // their edit lists and grammar masks.
  std::vector<RowSampling> sample_on_device;
  std::vector<RowSamplingEdit> sampling_edits;
  std::vector<uint64_t> sampling_masks;

  // Appends a token: it extends the last run when it is the next position of
  // the same row, else starts a new run.
  void add(kv::RowId row, int64_t position, int32_t token, bool want_logits, bool only_argmax = false) {
    if (want_logits) {
      logit_rows.push_back(int32_t(tokens.size()));
      argmax_only.push_back(only_argmax ? 1 : 0);
    }
    tokens.push_back(token);
    if (!runs.empty() && runs.back().row == row && runs.back().position + runs.back().count == position) {
      ++runs.back().count;
    } else {
      runs.push_back({row, position, 1});
    }
  }
  bool empty() const { return tokens.empty(); }
};

// What the output head brings back of the rows that do not cross whole.
struct RowPicks {
  // When any row is marked argmax_only: the argmax code of every logits row
  // (Backend::argmax_rows, of the row as the model computed it); else empty.
  std::vector<int32_t> argmax;
  // Per ForwardBatch::sample_on_device entry, its token (Backend::sample_rows),
  // and when any entry asks for logprobs, each entry's RowLogprobStats
  // (meaningful for those that ask).
  std::vector<int32_t> sampled;
  std::vector<RowLogprobStats> logprob_stats;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // The KV storage this model needs: one layer per attention layer that owns
  // its cache, each with `codec`.
  virtual std::vector<kv::LayerSpec> kv_layers(const kv::CodecSpec& codec) const = 0;
  // Where kv_layers()'s storage layers would best live, for
  // CacheOptions::layer_backends: a model split over shard backends
  // (ModelOptions::shard_backends) names shard s's backend for shard s's
  // layers, so that each shard writes and reads its KV on its own device
  // and thread. Empty (the default): the model's backend for all. A cache
  // built without it still works; the split model then writes and reads KV
  // on its own backend, shard after shard.
  virtual std::vector<Backend*> kv_backends() const { return {}; }
  // Runs one step on the cache's backend (the model's own). `logits` becomes
  // a host tensor [logits rows not marked argmax_only, vocab] f32, in
  // logit_rows order; `picks` (which must not be null when any row is
  // marked) what the head brought back of the others; `hidden`, when not
  // null, a host tensor [batch.logit_rows.size(), hidden_size] f32 holding
  // the final-normed state of each logits row (what the output head reads:
  // drafters that continue from the model's state take it). On failure (bad
  // ids, positions, out of KV blocks) it throws and the cache is as it was
  // before the call.
  virtual void forward(const ForwardBatch& batch, kv::KvCache& cache, Tensor& logits, Tensor* hidden,
                       RowPicks* picks) = 0;
  void forward(const ForwardBatch& batch, kv::KvCache& cache, Tensor& logits, Tensor* hidden) {
    forward(batch, cache, logits, hidden, nullptr);
  }
  void forward(const ForwardBatch& batch, kv::KvCache& cache, Tensor& logits) { forward(batch, cache, logits, nullptr); }
  // The scaled token embedding the first layer reads, of `tokens`, into
  // `out` ([tokens.size(), hidden_size] f32 on the model's backend). Throws
  // for an id outside the vocabulary.
  virtual void embed(std::span<const int32_t> tokens, Tensor& out) = 0;
  // Per decoder layer, the KV storage layer (an index into kv_layers()) its
  // attention reads. A model split by tensor parallelism throws rowlm::Error
  // (its layers read N storage layers each; no drafter reads a split cache).
  virtual std::vector<int> kv_storage_of_layers() const = 0;
  // A human-readable summary of the architecture (for `rowlm inspect`).
  virtual std::string describe() const = 0;
};

// How a model is built from its weights, whatever the family.
struct ModelOptions {
  // Tensor parallelism (model/tensor_parallel.h): attention heads, KV heads
  // and MLP columns split over this many shards, the shards' partial
  // outputs summed in shard order. 1 = unsplit.
  int tensor_parallel = 1;
  // Where shards 1 … N-1 run. Empty: every shard on the model's backend,
  // one after another (the one-device stand-in). Otherwise exactly
  // tensor_parallel - 1 backends (shard 0 runs on the model's own, which
  // also holds the KV cache and the unsplit parts), distinct from it and
  // each other, and all CPU backends or all CUDA backends like it (tensors
  // cross by Backend::copy_from_backend; a mix is an Error): shard s's split weights are
  // prepared on its backend and its layer work runs there, from a thread of
  // its own (model/shard_workers.h). The bits are those of the one-backend
  // run. The model co-owns them; nothing else may call them while it runs.
  // Must be empty at tensor_parallel = 1.
  std::vector<std::shared_ptr<Backend>> shard_backends;
};

// The model's KV storage layers (Model::kv_layers) with the codecs of
// `codec_map` (kvcodec's parse_codec_map: "q8", or "bf16,3=q8"), whose layer
// indices count the model's storage layers before a tensor-parallel split:
// each split storage layer takes its unsplit layer's codec. Throws
// rowlm::Error naming a bad entry.
std::vector<kv::LayerSpec> kv_layers_with_codecs(const Model& model, std::string_view codec_map);

// Loads the model in `dir` (config.json + safetensors), or the GGUF file
// `dir` names (gguf_model.h), for `backend`, which must outlive the model. The family comes from config.json's model_type
// (families.h); an unknown one is an Error listing the supported types.
// Options the model cannot honour (a split its geometry does not allow)
// are an Error naming why.
std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const ModelOptions& options = {});

}  // namespace rowlm
