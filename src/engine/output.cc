#include "engine/output.h"

#include <algorithm>
#include <chrono>
#include <span>

namespace rowlm::engine {

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Delivers an event to the request's callback, then to its handle's queue.
void deliver(RequestState& r, const TokenEvent& ev) {
  if (r.on_token) r.on_token(ev);
  r.handle->push(ev);
}

}  // namespace

Output::Output(const ModelInfo& model, const Tokenizer* tokenizer, Stats& stats)
    : vocab_size_(model.vocab_size),
      context_(model.max_position),
      eos_(model.eos_token_ids.begin(), model.eos_token_ids.end()),
      tokenizer_(tokenizer),
      stats_(stats) {}

void Output::admitted(RequestState& r) {
  if (r.ever_admitted) return;
  r.admitted = Clock::now();
  r.result.timings.queue_s = seconds(r.admitted - r.submitted);
  r.result.usage.cached_prompt_tokens = std::min<int64_t>(r.computed, r.prompt_length);
  r.ever_admitted = true;
  stats_.update([&](EngineStats& s) {
    s.cached_prompt_tokens += r.result.usage.cached_prompt_tokens;
    s.prompt_tokens += r.prompt_length;
  });
}

void Output::preempted(RequestState& r) {
  ++r.result.preemptions;
  stats_.update([](EngineStats& s) { ++s.preemptions; });
}

std::optional<FinishReason> Output::emit(RequestState& r, const sampling::SampledToken& s) {
  r.sampler.accept(s.token);
  r.tokens.push_back(s.token);
  if (r.generated_count() == 1) r.first_token = Clock::now();
  if (s.logprobs) r.result.logprobs.push_back(*s.logprobs);
  stats_.update([](EngineStats& st) { ++st.generated_tokens; });

  const bool stopped_by_token = stop_token(r, s.token);
  TokenEvent ev;
  ev.token = s.token;
  ev.logprobs = s.logprobs;
  bool stopped_by_string = false;
  // A stop token's text is never part of the output.
  if (!stopped_by_token && r.decoder) {
    const auto out = r.stops.feed(r.decoder->push(s.token));
    ev.text = out.text;
    if (out.stop) {
      stopped_by_string = true;
      r.result.stop = r.request.sampling.stop[*out.stop];
    }
  }
  r.result.text += ev.text;
  deliver(r, ev);

  const auto& max_tokens = r.request.sampling.max_tokens;
  if (stopped_by_token || stopped_by_string) return FinishReason::Stop;
  if ((max_tokens && r.generated_count() >= *max_tokens) || (context_ > 0 && r.sequence_length() >= context_))
    return FinishReason::Length;
  return std::nullopt;
}

void Output::drafts_verified(RequestState& r, int proposed, int accepted) {
  r.result.draft_proposed += proposed;
  r.result.draft_accepted += accepted;
  stats_.update([&](EngineStats& s) {
    s.draft_proposed += proposed;
    s.draft_accepted += accepted;
  });
}

void Output::finish(RequestState& r, FinishReason reason, std::string error) {
  // Text still held back (a possible stop-string prefix, an open UTF-8
  // sequence) belongs to the output unless a stop string ended it.
  if (!r.stops.stopped() && r.decoder) {
    std::string tail = r.stops.feed(r.decoder->finish()).text;
    if (!r.stops.stopped()) tail += r.stops.flush();
    if (!tail.empty() && reason != FinishReason::Cancelled && reason != FinishReason::Error) {
      r.result.text += tail;
      TokenEvent ev;
      ev.text = tail;
      deliver(r, ev);
    }
  }
  r.finished = Clock::now();
  RequestResult& res = r.result;
  res.token_ids.assign(r.generated().begin(), r.generated().end());
  res.finish = reason;
  res.error = std::move(error);
  res.usage.prompt_tokens = r.prompt_length;
  res.usage.completion_tokens = r.generated_count();
  res.timings.total_s = seconds(r.finished - r.submitted);
  if (r.generated_count() > 0) {
    res.timings.time_to_first_token_s = seconds(r.first_token - r.submitted);
    const double decode_s = seconds(r.finished - r.first_token);
    if (r.generated_count() > 1 && decode_s > 0)
      res.timings.decode_tokens_per_s = double(r.generated_count() - 1) / decode_s;
  }
  stats_.update([&](EngineStats& s) {
    if (reason == FinishReason::Cancelled) ++s.requests_cancelled;
    else if (reason == FinishReason::Error) ++s.requests_failed;
    else ++s.requests_finished;
  });
  r.handle->finish(res);
}

bool Output::stop_token(RequestState& r, int32_t token) const {
  const auto& p = r.request.sampling;
  const bool eos = !r.request.ignore_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end();
  if (!eos && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) == p.stop_token_ids.end())
    return false;
  r.result.stop = token_text(token);
  return true;
}

// The token's text as result.stop reports it: its vocabulary entry, or the
// id without a tokenizer.
std::string Output::token_text(int32_t token) const {
  return tokenizer_ ? std::string(tokenizer_->id_to_token(token).value_or("")) : std::to_string(token);
}

}  // namespace rowlm::engine
