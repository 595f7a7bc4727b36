#pragma once
// Output handling: what becomes of a request's generated tokens.
//
// Emitting a token records it (the sampler's history, the sequence,
// logprobs, counters) and streams its text: the request's StreamDecoder
// turns ids into final UTF-8 text and its StopStringMatcher holds back what
// may still be the start of a stop string. A request ends on one of the
// model's end-of-sequence ids (unless ignore_eos), one of its stop token ids
// or stop strings (Stop), at max_tokens or the end of the context (Length).
// Finishing a request delivers the text still held back (unless it was
// cancelled or failed), fills its result and timings, counts it and
// completes its handle.
//
// Nothing here touches the KV cache or the schedule: the caller releases a
// request's KV before finish() (StepRunner::release) and removes it from the
// schedule after.
//
// Threads: the scheduler thread's (or the caller's, in manual mode). Each
// call touches only the request it is given and the thread-safe Stats; the
// request's on_token callback and its handle's events are delivered from
// inside emit() and finish().

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request_state.h"
#include "engine/stats.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::engine {

class Output {
 public:
  // `tokenizer` may be null (a model served by ids only: no text streams);
  // it and `stats` outlive the Output.
  Output(const ModelInfo& model, const Tokenizer* tokenizer, Stats& stats);

  int64_t vocab_size() const { return vocab_size_; }

  // The request was admitted. The first time only: its queue time and
  // cached prompt tokens, and the engine's prompt-token totals.
  void admitted(RequestState& r);
  // The request was preempted (its KV released, to be recomputed).
  void preempted(RequestState& r);

  // Records a generated token and streams its text. Returns how the
  // request ends if this token ends it. Throws what the sampler, the
  // decoder or the request's callback throws.
  std::optional<FinishReason> emit(RequestState& r, const sampling::SampledToken& token);
  // Speculative decoding: `proposed` drafts of the request were verified
  // and `accepted` of them kept.
  void drafts_verified(RequestState& r, int proposed, int accepted);

  // Ends the request with `reason` (`error` set for Error): held-back text,
  // result, timings, counters, and the handle's finish, after which the
  // handle is done.
  void finish(RequestState& r, FinishReason reason, std::string error = {});

 private:
  // Whether `token` ends the request as a stop token (setting result.stop).
  bool stop_token(RequestState& r, int32_t token) const;
  std::string token_text(int32_t token) const;

  const int64_t vocab_size_;
  const int64_t context_;  // the model's max_position; 0 = unknown
  const std::vector<int32_t> eos_;
  const Tokenizer* const tokenizer_;
  Stats& stats_;
};

}  // namespace rowlm::engine
