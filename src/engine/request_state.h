#pragma once
// One request inside the engine: its tokens, sampler, text stream and
// handle, and where it stands in the schedule. Owned by the scheduler
// thread; the handle is the only part other threads touch.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/request_handle.h"
#include "kv/kv_cache.h"
#include "kv/row_cache.h"
#include "rowlm/engine.h"
#include "sampling/sampler.h"
#include "sampling/stop_strings.h"
#include "tokenizer/stream_decoder.h"

namespace rowlm::engine {

using Clock = std::chrono::steady_clock;

struct RequestState {
  RequestState(uint64_t request_id, Request submitted_request, std::vector<int32_t> prompt, int64_t vocab_size,
               const Tokenizer* tokenizer, std::shared_ptr<HandleImpl> request_handle,
               std::function<void(const TokenEvent&)> token_callback)
      : id(request_id),
        request(std::move(submitted_request)),
        prompt_length(int64_t(prompt.size())),
        tokens(std::move(prompt)),
        sampler(this->request.sampling, vocab_size, tokens),
        decoder(tokenizer ? std::optional<StreamDecoder>(std::in_place, *tokenizer, this->request.skip_special_tokens)
                          : std::nullopt),
        stops(this->request.sampling.stop),
        handle(std::move(request_handle)),
        on_token(std::move(token_callback)) {}

  const uint64_t id;
  const Request request;
  const int64_t prompt_length;
  std::vector<int32_t> tokens;  // the prompt, then every generated token
  sampling::Sampler sampler;
  std::optional<StreamDecoder> decoder;  // none when the model has no tokenizer
  sampling::StopStringMatcher stops;
  std::shared_ptr<HandleImpl> handle;
  std::function<void(const TokenEvent&)> on_token;
  RequestResult result;

  // Schedule. The model has consumed `computed` tokens of sequence() (the
  // row's KV length); the rest is fed at coming steps.
  kv::RowId row = -1;
  int64_t computed = 0;
  std::optional<kv::RowCache> swapped;  // its KV in host memory while preempted (StepRunner::evict)
  // The target's final-normed hidden state at target_state_position, its
  // last computed position when it was set (StepRunner, for drafters that
  // continue from it). Kept across preemption: batch invariance makes a
  // recomputed state the same, and a restored row needs no recompute.
  std::vector<float> target_state;
  int64_t target_state_position = -1;
  uint64_t admit_order = 0;
  Clock::time_point submitted = Clock::now(), admitted, first_token, finished;
  bool ever_admitted = false;

  int64_t sequence_length() const { return int64_t(tokens.size()); }
  // The most positions the request can reach: its prompt and max_tokens,
  // capped by `context` (the model's max_position; 0 = unknown, no cap).
  int64_t max_length(int64_t context) const {
    const int64_t limit = context > 0 ? context : INT64_MAX;
    const auto& max_tokens = request.sampling.max_tokens;
    return max_tokens ? std::min<int64_t>(limit, prompt_length + *max_tokens) : limit;
  }
  int64_t generated_count() const { return int64_t(tokens.size()) - prompt_length; }
  std::span<const int32_t> generated() const { return std::span(tokens).subspan(std::size_t(prompt_length)); }
};

}  // namespace rowlm::engine
