#pragma once
// rowlm's C++ library API: load an engine, submit requests from any thread,
// stream their tokens, cancel them, read their results.
//
//   rowlm::EngineOptions opt;
//   opt.model_dir = "models/rowlm-tiny";
//   auto engine = rowlm::Engine::create(opt);
//   rowlm::Request req;
//   req.prompt = "In the beginning";
//   req.sampling.max_tokens = 32;
//   auto handle = engine->submit(req);
//   rowlm::TokenEvent ev;
//   while (handle->next(ev)) std::cout << ev.text << std::flush;
//   rowlm::RequestResult result = handle->result();
//
// One engine runs one continuous batch: every step it flattens the decode
// tokens of running requests and chunks of waiting prompts into one forward
// pass under a token budget. A request's tokens and log-probabilities do not
// depend on what else runs (bitwise), so a request gives the same output
// alone or in any batch.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "rowlm/backend_options.h"
#include "rowlm/model_info.h"
#include "sampling/logprobs.h"
#include "sampling/sampling_params.h"

namespace rowlm {

class Backend;
class Model;
class Tokenizer;
namespace constrain {
class Grammar;
struct ToolCallRules;
}  // namespace constrain

// EngineOptions::prefix_cache_bytes by default (and `--prefix-cache-bytes`'s),
// whatever the KV budget: a fixed, stated bound on what an idle engine keeps.
inline constexpr std::size_t kDefaultPrefixCacheBytes = std::size_t(256) << 20;

struct EngineOptions {
  std::string model_dir;
  std::string device = "auto";        // where the model runs: auto, cpu, cuda, cuda:N (rowlm::make_backend)
  int threads = 0;                    // CPU threads; 0 = one per core
  // Tensor parallelism: attention heads, KV heads and MLP columns split
  // over this many shards, their partial outputs summed in a fixed order
  // (docs/tensor-parallel.md). Today the shards run one after another on
  // the one device (the CPU stand-in of the multi-GPU split); a model whose
  // geometry does not divide (e.g. fewer KV heads than shards) is an Error.
  int tensor_parallel = 1;
  // F32: activations stay f32 in every matmul (faithful). Bf16: rounded to
  // bf16 where they meet bf16 weights (about 2x the compute rate on CPUs
  // with AVX512-BF16; tensor cores on the GPU). Auto (the default): F32 on
  // the CPU, Bf16 on the GPU. Batch-invariant in every mode.
  MatmulPrecision matmul_precision = MatmulPrecision::Auto;
  std::string kv_codec = "bf16";      // f32, bf16, f16, q8, q4[:group], or a per-layer map
  // Precision switch (mlx-lm's quantized_kv_start): a request whose KV
  // reaches kv_quantize_after positions has them re-encoded in
  // kv_quantize_to (q8, q4[:group], or any codec narrower than a layer's),
  // and its later tokens are stored so: long contexts take less memory, and
  // positions before the switch keep their precision for short ones. Every
  // layer whose codec is wider than kv_quantize_to switches (at least one
  // must). Prefix reuse stops at the switch; outputs stay bitwise
  // independent of the schedule. None: off. docs/kv.md.
  std::optional<int64_t> kv_quantize_after;
  std::string kv_quantize_to = "q8";
  std::size_t kv_budget_bytes = 0;    // KV pool; 0 = a default from the machine's free memory
  bool prefix_cache = true;           // reuse cached prompt prefixes
  // The most KV bytes the prefix cache keeps of prompts no running request
  // holds (the KV of finished requests, for reuse): what an idle engine
  // keeps of its pool; the rest goes back to the system when the engine goes
  // idle (on the CPU backend). It is evicted first, least recently used,
  // when running requests need room. Must be > 0 while prefix_cache is on.
  std::size_t prefix_cache_bytes = kDefaultPrefixCacheBytes;
  // Admission holds KV room for every running request to reach its prompt
  // plus max_tokens (capped by the context), so admitted requests are not
  // preempted for room. With kv_overcommit, requests are admitted on what
  // they hold now: more run at once, and the most recently admitted is
  // preempted (and recomputed) when their growth outruns the pool.
  bool kv_overcommit = false;
  // A preempted request's KV moves to host memory (at most as many bytes as
  // the KV pool, for all preempted requests together) and back when it
  // resumes (shared from the prefix cache instead if that still holds it
  // all); off, past that limit, or under one KV block, it is recomputed.
  bool kv_swap = true;
  int max_running = 64;               // most requests in the running batch
  int token_budget = 256;             // most tokens in one step (prefill chunks + decode)
  int max_waiting = 1024;             // most queued requests; submit() beyond it throws QueueFull
  // Speculative decoding: "" (off), "ngram" (prompt lookup), or a draft model directory.
  std::string draft;
  int draft_tokens = 3;               // tokens proposed per row per round (docs/speculative.md)
  // false: no scheduler thread; the caller drives the engine with step()
  // (deterministic schedules for `rowlm batch` and tests).
  bool background = true;
};

struct Request {
  std::string prompt;                // text, tokenized with the model's tokenizer, or
  std::vector<int32_t> prompt_ids;   // token ids (used when non-empty)
  bool add_special_tokens = true;    // for a text prompt (e.g. <bos>); off for rendered chats
  sampling::SamplingParams sampling;
  bool ignore_eos = false;           // keep going past the model's end-of-sequence ids
  // The streamed text leaves out special tokens (e.g. <bos>); off, their text
  // is kept, as tool-call parsing needs (Gemma 4 marks calls with special
  // tokens). A stop token's text is never part of the output either way.
  bool skip_special_tokens = true;
  // Structured output: the generated text is held to a JSON value this
  // grammar admits (constrain/grammar.h: Grammar::from_schema for a JSON
  // Schema, Grammar::any_object), every token masked that cannot continue
  // one; the end-of-sequence and stop tokens only where the value is
  // complete. Null: free text. Needs a tokenizer.
  std::shared_ptr<const constrain::Grammar> response_format;
  // Tool calls held to their tools' schemas (strict function tools;
  // constrain/json_constraint.h): the text is free until the token that
  // opens a call, the call is then held to the rules' grammar (a listed
  // tool's name, arguments valid for its schema) and closed by its token.
  // The rules' forced tokens count as generated before the first token.
  // Null: none. Not together with response_format; needs a tokenizer.
  std::shared_ptr<const constrain::ToolCallRules> tool_calls;
};

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

// One generated token as it streams out. `text` is the request's new,
// final text (held back while it may still be the start of a stop string or
// half of a UTF-8 character), possibly empty.
struct TokenEvent {
  int32_t token = -1;
  std::string text;
  std::optional<sampling::RawLogprobs> logprobs;  // when the request asked for them
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens reused from the prefix cache
};

struct Timings {
  double queue_s = 0;                // submit to admission
  double time_to_first_token_s = 0;  // submit to first generated token
  double total_s = 0;                // submit to finish
  double decode_tokens_per_s = 0;    // generated tokens after the first / their time
};

struct RequestResult {
  std::vector<int32_t> token_ids;    // every generated token (a stop token, or the token completing a stop string, included)
  std::string text;                  // their text, up to any stop string
  FinishReason finish = FinishReason::Length;
  std::string stop;                  // the stop string or token text that ended it, if any
  std::string error;                 // set when finish == Error
  std::vector<sampling::RawLogprobs> logprobs;  // one per token, when asked for
  Usage usage;
  Timings timings;
  int64_t preemptions = 0;
  int64_t draft_proposed = 0, draft_accepted = 0;  // speculative decoding
};

class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  virtual uint64_t id() const = 0;
  // Blocks for the next token; false once the request has finished and
  // every token was delivered.
  virtual bool next(TokenEvent& event) = 0;
  // Blocks until the request finishes.
  virtual RequestResult result() = 0;
  virtual bool done() const = 0;
  // Stops the request; its KV blocks are freed at the next step boundary.
  virtual void cancel() = 0;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t steps = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, cached_prompt_tokens = 0;
  int64_t requests_finished = 0, requests_cancelled = 0, requests_failed = 0, preemptions = 0;
  int64_t kv_swaps = 0;  // preemptions whose KV moved to host memory and back instead of being recomputed
  std::size_t kv_used_bytes = 0, kv_capacity_bytes = 0, prefix_cache_bytes = 0;
  int64_t draft_proposed = 0, draft_accepted = 0;
  // Wall time of the steps that ran a forward pass, and of the forward passes
  // in them: the difference is what a step costs outside the model (sampling,
  // detokenization, stop strings, delivery, scheduling and KV bookkeeping).
  double step_seconds = 0, forward_seconds = 0;
  // Of those, the steps that fed one token per request and no drafts (plain
  // decode steps, no prompt chunk): what a decode step costs, comparable with
  // `rowlm bench`'s forward at the same batch.
  int64_t decode_steps = 0;
  double decode_step_seconds = 0, decode_forward_seconds = 0;
  // The backend's host thread pool (a CPU backend's): parallel regions, the
  // regions that stalled waiting for a worker that had lost its core, and
  // the regions run on fewer threads after such stalls. Many narrowed
  // regions mean other work took the cores; the speed figures then say more
  // about the machine than about rowlm.
  int64_t host_pool_regions = 0, host_pool_stalls = 0, host_pool_narrowed = 0;
};

class QueueFull : public Error {
 public:
  using Error::Error;
};

// A request this engine's model cannot run. field() names the Request field
// at fault ("prompt", "max_tokens", or a sampling parameter such as
// "temperature" or "stop[1]"); what() begins with it or quotes it.
class InvalidRequest : public Error {
 public:
  InvalidRequest(std::string field, const std::string& message) : Error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Loads the model (and draft model) and starts the scheduler thread
  // unless options.background is false. Throws rowlm::Error on bad options.
  static std::unique_ptr<Engine> create(const EngineOptions& options);
  // An engine over a model already built on `backend` (random weights for
  // benchmarks, say). options.model_dir, if set, supplies the tokenizer;
  // without one, requests give token ids.
  static std::unique_ptr<Engine> create(const EngineOptions& options, std::unique_ptr<Backend> backend,
                                        std::unique_ptr<Model> model);

  // Queues a request; thread-safe. `on_token`, if given, is called from the
  // scheduler thread for every event (keep it short); next() works either way.
  // Throws InvalidRequest for a request the model cannot run (an empty
  // prompt, ids outside the vocabulary, a prompt that leaves no room in the
  // context for a generated token, bad sampling parameters, stop strings
  // without a tokenizer: engine/validate_request.h) and QueueFull past
  // max_waiting. A request whose max_tokens would run past the context is
  // accepted, and finishes with Length at the context's end.
  virtual std::shared_ptr<RequestHandle> submit(Request request,
                                                std::function<void(const TokenEvent&)> on_token = {}) = 0;

  // Manual mode (background == false): runs one scheduler step; false when
  // nothing is running or waiting.
  virtual bool step() = 0;
  // Manual mode: steps until idle.
  virtual void run_until_idle() = 0;

  virtual const ModelInfo& model_info() const = 0;
  // The model directory's tokenizer. A model without tokenizer.json serves
  // requests given as ids only, and streams no text; tokenizer() then throws.
  virtual bool has_tokenizer() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual EngineStats stats() const = 0;
  // Stops accepting requests, cancels what is queued or running, joins the
  // scheduler thread. Called by the destructor.
  virtual void shutdown() = 0;
};

}  // namespace rowlm
