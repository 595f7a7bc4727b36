#pragma once
// The shared decoder: one forward pass, driven by per-layer configuration
// data, that every family is expressed on (the way gemma.cpp's LayerConfig
// drives one TransformerLayer). A family's code reads its config.json into a
// DecoderConfig, binds its checkpoint names into DecoderWeights
// (weight_binder.h), and calls make_decoder_model; nothing of the forward is
// family code.
//
// One layer, with h the residual stream:
//   a   = norm(h, attn_norm)
//   q   = a·Wq (+ bq), per-head RMS norm (qk_norm), RoPE
//   k,v = a·Wk (+ bk), a·Wv (+ bv) or V = raw K (k_eq_v); per-head norms
//         (qk_norm; v_norm unscaled); RoPE on k; written to the KV cache
//         (layers that read another layer's K/V skip this)
//   o   = attention(q, K/V of kv_source) · Wo (+ bo), norm(o) if post_attention_norm
//   h  += o
//   f   = Dense: mlp(norm(h, ffn_norm)), norm(f) if post_ffn_norm
//         Experts (Qwen 3 MoE; Mixtral's form): experts(x), x = norm(h, ffn_norm), routed
//         on x·W_router
//         DenseAndExperts (Gemma 4): norm1(mlp(norm(h))) + norm2(experts(norm(h)))
//         routed on norm(h, router_scale)/√H, then the post-ffn norm
//   h  += f
//   per-layer input (Gemma 3n/4), then h *= layer_scalar
// then the final norm, the output head (tied to the embedding or its own)
// and the final softcap, for the rows whose logits are wanted.
//
// Batch invariance: every operation runs per token in one order (backend.h),
// and attention reads only each row's own blocks, so a token's logits do not
// depend on what else is in the batch.
//
// Tensor parallelism (tensor_parallel.h): each layer's attention and MLP run
// as N shards, their partial outputs summed in shard order before the bias
// and the residual add; N = 1 (the default) is one shard holding every head,
// on the model's backend, with no thread added. With
// ModelOptions::shard_backends each shard runs on its own backend from its
// own thread; the bits do not change.

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace rowlm::decoder {

// Rotary embedding frequencies for one kind of layer, in HF's rotate-half
// layout: pair k rotates dims (k, k + head_dim/2) by position·inv_freq[k];
// inv_freq[k] == 0 leaves the pair unchanged (proportional RoPE).
struct RopeFrequencies {
  int head_dim = 0;
  std::vector<float> inv_freq;  // head_dim / 2 entries
};

struct AttentionConfig {
  int num_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int window = 0;         // sliding window W (keys p-W < j <= p); 0 = full
  int rope = 0;           // index into DecoderConfig::ropes
  int kv_source = 0;      // decoder layer whose K/V this layer reads (itself when it owns its cache)
  int target_kv = -1;     // >= 0: reads this storage layer of another model's cache (a KvReader); owns none
  bool k_eq_v = false;    // V is the raw K projection (no v_proj)
  bool qk_norm = false;   // RMS norm over each head of q and k, with weights q_norm / k_norm
  bool v_norm = false;    // RMS norm over each head of v, without a weight
  bool qkv_bias = false;  // q/k/v projections have biases
  bool o_bias = false;    // the output projection has a bias
  float scale = 1.0f;     // multiplies q·k
  float softcap = 0.0f;   // 0 = off
};

enum class FfnKind {
  Dense,            // a gated MLP
  Experts,          // routed experts in place of the MLP (Qwen 3 MoE): router and experts read norm(h, ffn_norm)
  DenseAndExperts,  // Gemma 4 MoE: the dense MLP beside routed experts, summed
};

struct FfnConfig {
  FfnKind kind = FfnKind::Dense;
  Activation activation = Activation::Silu;
  int intermediate = 0;         // dense MLP width (not used by Experts)
  int experts = 0;              // Experts, DenseAndExperts
  int top_k = 0;
  int expert_intermediate = 0;
  bool renormalize = true;      // routing weights divided by the chosen k's sum
};

struct LayerConfig {
  AttentionConfig attention;
  FfnConfig ffn;
  bool post_attention_norm = false;  // norm of the attention output before the residual add
  bool post_ffn_norm = false;        // norm of the feed-forward output before the residual add
  bool owns_kv(int index) const { return attention.kv_source == index && attention.target_kv < 0; }
};

struct DecoderConfig {
  ModelInfo info;                    // what the model reports (architecture, ids, context)
  int vocab_size = 0;
  int hidden_size = 0;
  float norm_eps = 1e-6f;
  NormKind norm_kind = NormKind::Plain;
  float embed_scale = 1.0f;          // the token embedding is multiplied by it
  float final_softcap = 0.0f;        // 0 = off
  bool tie_word_embeddings = true;   // output head = the embedding
  // Per-layer inputs (Gemma 3n/4; 0 = off): a [per_layer_vocab, L·P] table
  // and a projection of the scaled embedding, gated into every layer.
  int per_layer_input = 0;
  int per_layer_vocab = 0;
  std::vector<RopeFrequencies> ropes;
  std::vector<LayerConfig> layers;
};

// Every tensor of one layer; what the layer's config does not use stays empty.
struct LayerWeights {
  Tensor attn_norm, post_attn_norm, ffn_norm, post_ffn_norm;  // f32 [H]
  Tensor q_norm, k_norm;                                      // f32 [head_dim]
  Weight q_proj, k_proj, v_proj, o_proj;
  Tensor q_bias, k_bias, v_bias, o_bias;                      // f32
  Weight gate_proj, up_proj, down_proj;                       // the dense MLP
  float layer_scalar = 1.0f;
  // Per-layer input.
  Weight per_layer_gate;        // [P, H]
  Weight per_layer_projection;  // [H, P]
  Tensor per_layer_norm;        // f32 [H]
  // Experts (DenseAndExperts).
  Weight router;                // [E, H]
  Tensor router_scale;          // f32 [H]
  Tensor router_expert_scale;   // f32 [E]
  ExpertBank experts;
  Tensor expert_norm;           // f32 [H]: norm of h before the experts
  Tensor dense_post_norm;       // f32 [H]: norm of the dense branch's output
  Tensor expert_post_norm;      // f32 [H]: norm of the experts' output
};

struct DecoderWeights {
  Weight embed;                  // [V, H]; also the output head when tied
  Weight lm_head;                // [V, H] when untied, else empty
  Tensor final_norm;             // f32 [H]
  Weight per_layer_embed;        // [V_ple, L·P]
  Weight per_layer_model_projection;  // [L·P, H]
  Tensor per_layer_projection_norm;   // f32 [P]
  std::vector<LayerWeights> layers;
  // Keeps the mmapped checkpoint files alive for the views above.
  std::shared_ptr<const void> storage;
  std::size_t weight_bytes = 0;  // bytes of all bound tensors as stored
  int64_t parameter_count = 0;
};

// Checks `config` (every layer's geometry, kv sources, rope indices) and
// builds the model on `backend`, which prepares (and may upload) every
// weight. `description` is what describe() returns.
//
// options.tensor_parallel = N splits every layer over N shards
// (tensor_parallel.h; an Error when the config cannot be split): the model's
// kv_layers() then lists N storage layers of kv_heads/N heads per owned
// layer, and kv_storage_of_layers() is an Error (no drafter reads a split
// cache). At N = 1 the model is the unsplit one, bit for bit.
// options.shard_backends (N - 1 backends, not `backend`, all distinct, all
// CPU or all CUDA backends as `backend` is, each reading the others'
// tensors (Backend::reads_from); else an Error before anything is
// prepared) places shards 1 … on
// them; the model keeps them alive and starts N - 1 threads (ShardWorkers)
// that live as long as it does.
//
// kv_backends() then names shard s's backend for storage layers i·N + s
// (for CacheOptions::layer_backends); a cache placed so has each shard
// write and read its KV on its own thread, one with every layer on
// `backend` has the caller do it shard after shard; any other placement is
// an Error at forward, and the step is aborted (the cache keeps none of it).
//
// Threads (with shard backends): forward is still called by one thread at
// a time; within it shard s's backend is called only from shard s's thread
// (shard 0's is `backend`, on the caller's), the sums and unsplit parts
// run on `backend` while the shard threads wait, and the cache's write and
// attend of different storage layers run at once (kv_cache.h allows it). Errors: a shard's error is rethrown on the caller (the
// lowest shard's when several fail) after every shard has stopped, and the
// step is aborted as any failed step is (the cache keeps no write of it).
std::unique_ptr<Model> make_decoder_model(DecoderConfig config, DecoderWeights weights, Backend& backend,
                                          std::string description, const ModelOptions& options = {});

// A decoder that starts from given input states and reads another model's
// KV cache: every layer has AttentionConfig::target_kv set and owns no KV
// (the Gemma 4 assistant's body, reading its target's KV). Its output head
// is DecoderWeights::embed (tied) or lm_head; nothing else of the embedding
// is used, and it has no per-layer inputs.
//
// Threads: one caller at a time, on the backend's thread, like Model.
class KvReader {
 public:
  virtual ~KvReader() = default;
  virtual const DecoderConfig& config() const = 0;
  // Runs every layer on `h` ([T, hidden] f32 on the backend), token t
  // querying queries[t] of `cache` (read only: its positions and key limits
  // pick the keys), and leaves the final-normed stream in `h`; `logits`, if
  // not null, becomes a host tensor [T, vocab] f32 of the output head (and
  // softcap).
  // Does not reset the backend's workspace: `h` may live there. Throws
  // rowlm::Error for queries the cache cannot answer; the cache is unchanged.
  virtual void forward(Tensor& h, std::span<const kv::AttentionQuery> queries, kv::KvCache& cache,
                       Tensor* logits) = 0;
};

// Checks `config` (as make_decoder_model does; every layer must read target
// storage, and no per-layer inputs) and builds the reader on `backend`.
std::unique_ptr<KvReader> make_kv_reader(DecoderConfig config, DecoderWeights weights, Backend& backend);

// Standard RoPE frequencies as transformers computes them in f32:
// inv_freq[k] = 1 / theta^(2k / head_dim) / factor for the first
// `rotated_pairs` pairs (all when -1), 0 for the rest.
RopeFrequencies default_rope(int head_dim, double theta, double factor = 1.0, int rotated_pairs = -1);

}  // namespace rowlm::decoder
