#pragma once
// A stand-in Engine for the server's tests (header only, so the library does
// not carry it). Every request "generates" the tokens of a scripted reply,
// one per `token_interval`, on a thread of its own; it honours max_tokens,
// cancel() and a bound on requests at once (QueueFull), and counts what
// happened, so HTTP behaviour can be checked without a model.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

#include "rowlm/engine.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::server::testing {

class FakeEngine : public Engine {
 public:
  explicit FakeEngine(const std::string& model_dir) : tokenizer_(Tokenizer::load(model_dir)) {
    info_.architecture = "fake";
    info_.directory = model_dir;
    info_.vocab_size = tokenizer_.vocab_size();
    info_.max_position = 4096;
    info_.eos_token_ids = {1, 106};
  }
  ~FakeEngine() override { shutdown(); }

  // Settings (set before requests arrive).
  std::string reply = " And the king said unto him, What is this that thou hast done?";
  std::chrono::milliseconds token_interval{0};
  int capacity = 1000;  // requests at once; more throw QueueFull

  std::atomic<int> submitted{0}, cancelled{0}, finished{0}, active{0};

  Request last_request() const {
    std::lock_guard lock(mutex_);
    return last_;
  }
  void set_max_position(int n) { info_.max_position = n; }

  std::shared_ptr<RequestHandle> submit(Request request, std::function<void(const TokenEvent&)> = {}) override {
    std::lock_guard lock(mutex_);
    if (stopped_) throw Error("the engine is shut down");
    if (request.prompt_ids.empty() && request.prompt.empty()) throw Error("empty prompt");
    if (active.load() >= capacity) throw QueueFull("the queue holds " + std::to_string(capacity) + " requests");
    last_ = request;
    ++submitted;
    ++active;
    auto h = std::make_shared<Handle>(*this, std::move(request));
    handles_.remove_if([](const std::weak_ptr<Handle>& w) { return w.expired(); });
    handles_.push_back(h);
    h->start();
    return h;
  }
  bool step() override { return false; }
  void run_until_idle() override {}
  const ModelInfo& model_info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  bool has_tokenizer() const override { return true; }
  EngineStats stats() const override {
    EngineStats s;
    s.running = active.load();
    s.requests_cancelled = cancelled.load();
    s.requests_finished = finished.load();
    return s;
  }
  void shutdown() override {
    std::list<std::weak_ptr<Handle>> handles;
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
      handles.swap(handles_);
    }
    for (auto& w : handles)
      if (auto h = w.lock()) h->cancel();
  }

 private:
  class Handle : public RequestHandle {
   public:
    Handle(FakeEngine& engine, Request request) : engine_(engine), request_(std::move(request)) {}
    ~Handle() override {
      cancel();
      if (thread_.joinable()) thread_.join();
    }
    void start() {
      thread_ = std::thread([this] { run(); });
    }
    uint64_t id() const override { return 0; }
    bool next(TokenEvent& event) override {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return !queue_.empty() || done_; });
      if (queue_.empty()) return false;
      event = std::move(queue_.front());
      queue_.pop_front();
      return true;
    }
    RequestResult result() override {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return done_; });
      return result_;
    }
    bool done() const override {
      std::lock_guard lock(mutex_);
      return done_;
    }
    void cancel() override {
      std::lock_guard lock(mutex_);
      cancel_ = true;
      ready_.notify_all();
    }

   private:
    void run() {
      const Tokenizer& tok = engine_.tokenizer_;
      const std::vector<int32_t> reply = tok.encode(engine_.reply, false);
      const std::size_t limit = request_.sampling.max_tokens ? std::size_t(*request_.sampling.max_tokens) : reply.size();
      RequestResult r;
      r.usage.prompt_tokens = int64_t(request_.prompt_ids.size());
      FinishReason finish = reply.size() > limit ? FinishReason::Length : FinishReason::Stop;
      std::string previous;
      for (std::size_t i = 0; i < std::min(limit, reply.size()); ++i) {
        {
          std::unique_lock lock(mutex_);
          if (ready_.wait_for(lock, engine_.token_interval, [&] { return cancel_; })) {
            finish = FinishReason::Cancelled;
            break;
          }
        }
        TokenEvent ev;
        ev.token = reply[i];
        const std::string text = tok.decode(std::span(reply.data(), i + 1));
        ev.text = text.substr(previous.size());
        previous = text;
        if (request_.sampling.logprobs) {
          sampling::RawLogprobs lp{-0.5f, {}};
          for (int32_t k = 0; k < *request_.sampling.logprobs; ++k) lp.top.push_back({ev.token + k, -0.5f - float(k)});
          ev.logprobs = lp;
          r.logprobs.push_back(lp);
        }
        r.token_ids.push_back(ev.token);
        r.text += ev.text;
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(ev));
        ready_.notify_all();
      }
      r.finish = finish;
      r.usage.completion_tokens = int64_t(r.token_ids.size());
      (finish == FinishReason::Cancelled ? engine_.cancelled : engine_.finished)++;
      --engine_.active;
      std::lock_guard lock(mutex_);
      result_ = std::move(r);
      done_ = true;
      ready_.notify_all();
    }

    FakeEngine& engine_;
    Request request_;
    std::thread thread_;
    mutable std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<TokenEvent> queue_;
    RequestResult result_;
    bool done_ = false, cancel_ = false;
  };

  Tokenizer tokenizer_;
  ModelInfo info_;
  mutable std::mutex mutex_;
  Request last_;
  std::list<std::weak_ptr<Handle>> handles_;
  bool stopped_ = false;
};

}  // namespace rowlm::server::testing
