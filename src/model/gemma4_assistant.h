#pragma once
// The Gemma 4 assistant (transformers' Gemma4AssistantForCausalLM): a small
// Gemma 4 text stack that drafts tokens for a Gemma 4 target by reading the
// target's KV instead of keeping its own. Design note: docs/design/families.md
// ("Gemma 4 assistant").
//
// A row's committed tokens are c[0..L-1]; the target holds KV for
// c[0..L-2], and its final-normed hidden state at L-2 predicted c[L-1]. One
// draft step feeds one token t with a state s:
//   x      = pre_projection([target_embed(t) ; s])    target_embed is the target's scaled embedding;
//                                                     step 0: t = c[L-1], s = the target's hidden at L-2;
//                                                     step j: t = draft j, s = step j-1's `state`
//   h      = norm(text stack(x)) at position L-1: every layer's queries read the keys and values of
//            the target's last layer of the same attention type at positions < L-1 (a sliding
//            layer: the last sliding_window + 1 of them, as transformers' flipped bidirectional
//            window mask, inclusive of its window, leaves them)
//   logits = lm_head(h) (tied to the assistant's embedding, no softcap); with ordered embeddings
//            only the tokens of the top-k centroids (centroids(h)) are scored, every other token
//            gets the row's smallest scored logit minus 1
//   state  = post_projection(h)                       step j+1's s
// Every step of a round uses the same position and KV: the assistant writes
// no KV, so a speculative round's rollback of the target's rows is all the
// rollback it needs.
//
// Batch invariance: a row's logits and state depend on its own inputs and
// KV only (transformers takes the ordered-embedding mask value over the
// whole batch; here it is per row, the same at batch 1).
//
// Threads: one caller at a time, on the backend's thread (like Model).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace rowlm::gemma4 {

// Whether `dir` holds an assistant: config.json's model_type is
// gemma4_assistant or its architectures name Gemma4AssistantForCausalLM.
// False for a path without a readable config.json (a GGUF file, a typo).
bool is_assistant_dir(const std::string& dir);

class Assistant {
 public:
  virtual ~Assistant() = default;

  // Loads <dir> (config.json + safetensors) on `backend` for `target` (on
  // the same backend): each layer reads the KV storage of the target's last
  // decoder layer of its attention type. Throws rowlm::Error naming the file
  // and field, or the mismatch with the target (vocabulary, backbone hidden
  // size, head sizes and KV heads, a layer type the target lacks).
  static std::unique_ptr<Assistant> load(const std::string& dir, Backend& backend, const Model& target);

  virtual const ModelInfo& info() const = 0;
  // The target's hidden size: the width of states and target embeddings.
  virtual int state_size() const = 0;
  // Widens the target cache's window layers that the assistant reads so
  // they keep the keys it attends to (one more than a target query needs).
  // `layers` are the target's kv_layers().
  virtual void widen_target_windows(std::vector<kv::LayerSpec>& layers) const = 0;

  // One draft step for n rows: tokens[i] is what row i feeds, states
  // ([n, state_size()] host f32) its s, queries[i] its row in
  // `target_cache`, at position L-1 with key_limit L-1. `logits` becomes a
  // host tensor [n, vocab] f32 and `next_states` one [n, state_size()].
  // Resets the backend's workspace. Throws rowlm::Error for ids outside the
  // vocabulary or keys the cache does not hold; nothing is changed then.
  virtual void step(std::span<const int32_t> tokens, const Tensor& states, std::span<const kv::AttentionQuery> queries,
                    Model& target, kv::KvCache& target_cache, Tensor& logits, Tensor& next_states) = 0;
};

}  // namespace rowlm::gemma4
