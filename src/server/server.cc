#include "server/server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <malloc.h>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <unordered_map>

#include <httplib.h>

#include "server/api_error.h"
#include "server/api_request.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/front_door.h"
#include "server/prepare.h"
#include "server/reply.h"
#include "server/response_store.h"
#include "server/responses_request.h"
#include "server/router.h"
#include "server/sse.h"
#include "engine/model_files.h"
#include "tokenizer/chat_format.h"
#include "ui/chat_page.h"

namespace rowlm::server {

namespace {

using Json = nlohmann::json;

enum class Endpoint { kChatCompletions, kCompletions, kMessages, kResponses };

const char* endpoint_name(Endpoint e) {
  switch (e) {
    case Endpoint::kChatCompletions: return "chat_completions";
    case Endpoint::kCompletions: return "completions";
    case Endpoint::kMessages: return "messages";
    case Endpoint::kResponses: return "responses";
  }
  return "unknown";
}

Dialect dialect_of(const httplib::Request& req) {
  return req.path.starts_with("/v1/messages") || req.has_header("anthropic-version") ? Dialect::kAnthropic
                                                                                     : Dialect::kOpenAI;
}

// The metrics label of a path: the generation endpoints by name, anything
// else as "other" (a label per requested path would grow without bound).
std::string endpoint_label(const std::string& path) {
  if (path == "/v1/chat/completions") return endpoint_name(Endpoint::kChatCompletions);
  if (path == "/v1/completions") return endpoint_name(Endpoint::kCompletions);
  if (path == "/v1/messages") return endpoint_name(Endpoint::kMessages);
  if (path == "/v1/responses") return endpoint_name(Endpoint::kResponses);
  return "other";
}

Outcome outcome_of_status(int status) {
  if (status == 401) return Outcome::kUnauthorized;
  if (status == 413 || status == 429 || status == 503) return Outcome::kRejected;
  return status >= 500 ? Outcome::kServerError : Outcome::kClientError;
}

void send_error(httplib::Response& res, Dialect dialect, const ApiError& error) {
  res.status = error.status();
  res.set_content(json_text(error_body(dialect, error)), "application/json");
}

// Compares every byte of the key whatever was sent, so response timing
// reveals neither a matching prefix nor the key's length.
bool same_secret(std::string_view given, const std::string& key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (std::size_t i = 0; i < key.size(); ++i)
    diff |= static_cast<unsigned char>((i < given.size() ? given[i] : 0) ^ key[i]);
  return diff == 0;
}

// Random ids for responses and tool calls ("chatcmpl-3fk9...").
class IdSource {
 public:
  IdSource() : rng_(std::random_device{}()) {}
  std::string next(std::string_view prefix) {
    static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::lock_guard lock(mutex_);
    std::string id(prefix);
    for (int i = 0; i < 24; ++i) id += kAlphabet[rng_() % (sizeof kAlphabet - 1)];
    return id;
  }

 private:
  std::mutex mutex_;
  std::mt19937_64 rng_;
};

// Counts a generation request as in flight for as long as it lives.
class InFlight {
 public:
  InFlight(std::atomic<int>& count, Metrics& metrics) : count_(count), metrics_(metrics) {
    ++count_;
    metrics_.add_in_flight(1);
  }
  ~InFlight() {
    metrics_.add_in_flight(-1);
    // The last request out hands the allocator's free memory back to the
    // system: after a burst of many connection threads, glibc would keep
    // tens of MB of freed arena pages resident.
    if (--count_ == 0) malloc_trim(0);
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  std::atomic<int>& count_;
  Metrics& metrics_;
};

}  // namespace

struct HttpServer::Impl {
  Impl(Engine& e, ServerOptions o)
      : engine(e),
        options(std::move(o)),
        chat_format(options.chat_format.empty()
                        ? model_chat_format(engine.model_info().directory)
                        : tokenizer::ChatFormat::by_name(options.chat_format)),
        started(std::time(nullptr)),
        responses(options.response_store_bytes, std::chrono::seconds(options.response_store_seconds)) {
    if (options.response_store_seconds < 0) throw Error("--response-store-ttl must not be negative");
    if (options.model_name.empty())
      options.model_name = std::filesystem::path(engine.model_info().directory).filename().string();
    if (options.model_name.empty()) options.model_name = "rowlm";
    if (options.http_threads < 1) throw Error("--http-threads must be at least 1");
    if (options.stream_interval_ms < 0 || options.stream_interval_ms > 10000)
      throw Error("--stream-interval must be between 0 and 10000 ms");
    model.name = options.model_name;
    model.tokenizer = &engine.tokenizer();
    model.chat_format = &chat_format;
    model.context_length = engine.model_info().max_position;
    model.vocab_size = engine.model_info().vocab_size;
    model.max_prompt_bytes = max_prompt_bytes_for(engine.tokenizer(), model.context_length);
    install();
    FrontDoorOptions d;
    d.host = options.host;
    d.port = options.port;
    d.handler_threads = options.http_threads;
    d.limits.max_body_bytes = options.max_body_bytes;
    d.header_timeout = std::chrono::milliseconds(options.header_timeout_ms);
    d.keep_alive_timeout = std::chrono::seconds(options.keep_alive_seconds);
    d.max_connections = options.max_connections;
    d.max_connections_per_client = options.max_connections_per_client;
    door = std::make_unique<FrontDoor>(
        d, [this](const std::shared_ptr<Connection>& c, const std::string& request) { return serve(c, request); },
        [this](const Refusal& r) { return refusal_body(r); });
  }

  void install();
  bool serve(const std::shared_ptr<Connection>& connection, const std::string& request);
  std::string refusal_body(const Refusal& refusal);
  void keep_response(const ResponsesReplyWriter& writer, const RequestResult& result, std::vector<ChatTurn> conversation,
                     std::vector<int32_t> prompt_ids, std::string prompt_text);
  std::shared_ptr<Connection> connection_of(const httplib::Request& req);
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  bool authorized(const httplib::Request& req) const;

  Engine& engine;
  ServerOptions options;
  tokenizer::ChatFormat chat_format;
  ServedModel model;
  std::time_t started;
  Router http;
  Metrics metrics;
  IdSource ids;
  ResponseStore responses;  // the Responses API's stored responses
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};
  // The connection of each request being served, for its handler to watch
  // (keyed by the request cpp-httplib parsed, which lives while it is served).
  std::mutex serving_mutex;
  std::unordered_map<const httplib::Request*, std::shared_ptr<Connection>> serving;
  std::unique_ptr<FrontDoor> door;  // last: its handler threads use the rest
};

bool HttpServer::Impl::serve(const std::shared_ptr<Connection>& connection, const std::string& request) {
  const httplib::Request* parsed = nullptr;
  struct Forget {
    Impl& impl;
    const httplib::Request*& parsed;
    ~Forget() {
      if (!parsed) return;
      std::lock_guard lock(impl.serving_mutex);
      impl.serving.erase(parsed);
    }
  } forget{*this, parsed};
  return http.serve(*connection, request, draining.load(), [&](httplib::Request& r) {
    parsed = &r;
    std::lock_guard lock(serving_mutex);
    serving[&r] = connection;
  });
}

std::shared_ptr<Connection> HttpServer::Impl::connection_of(const httplib::Request& req) {
  std::lock_guard lock(serving_mutex);
  const auto it = serving.find(&req);
  return it == serving.end() ? nullptr : it->second;
}

std::string HttpServer::Impl::refusal_body(const Refusal& r) {
  const Dialect dialect =
      r.path.starts_with("/v1/messages") || r.anthropic ? Dialect::kAnthropic : Dialect::kOpenAI;
  metrics.count_request(endpoint_label(r.path), outcome_of_status(r.status));
  return json_text(error_body(dialect, ApiError(r.status, r.message)));
}

// A finished Responses API reply, kept for previous_response_id and GET:
// its conversation with the reply's message and calls as an assistant turn
// (reasoning is left out: the chat formats drop it from later prompts), and
// what the KV now holds.
void HttpServer::Impl::keep_response(const ResponsesReplyWriter& writer, const RequestResult& result,
                                     std::vector<ChatTurn> conversation, std::vector<int32_t> prompt_ids,
                                     std::string prompt_text) {
  if (result_failed(result)) return;
  StoredResponse s;
  s.response = writer.response();
  s.id = s.response.value("id", "");
  ChatTurn reply;
  reply.role = ChatTurn::Role::kAssistant;
  for (const Json& item : s.response["output"]) {
    if (item["type"] == "message") {
      for (const Json& part : item["content"]) reply.text += part.value("text", "");
    } else if (item["type"] == "function_call") {
      ToolCall call;
      call.id = item["call_id"];
      call.name = item["name"];
      call.arguments = Json::parse(item["arguments"].get<std::string>());
      reply.tool_calls.push_back(std::move(call));
    }
  }
  conversation.push_back(std::move(reply));
  s.turns = std::move(conversation);
  // The KV holds the prompt and the reply, less the token it stopped on
  // (never fed back), as `rowlm chat` keeps it.
  std::vector<int32_t> generated = result.token_ids;
  if (result.finish == FinishReason::Stop && !generated.empty() && !result.stop.empty() &&
      engine.tokenizer().token_to_id(result.stop) == generated.back())
    generated.pop_back();
  s.kv_text = std::move(prompt_text) + engine.tokenizer().decode(generated, /*skip_special_tokens=*/false);
  s.kv_ids = std::move(prompt_ids);
  s.kv_ids.insert(s.kv_ids.end(), generated.begin(), generated.end());
  responses.put(std::move(s));
}

bool HttpServer::Impl::authorized(const httplib::Request& req) const {
  if (options.api_key.empty()) return true;
  // RFC 7235: the scheme is case-insensitive ("bearer KEY" is as good).
  const std::string auth = req.get_header_value("Authorization");
  const std::size_t space = auth.find(' ');
  if (space != std::string::npos && std::equal(auth.begin(), auth.begin() + std::ptrdiff_t(space), "bearer", "bearer" + 6,
                                               [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; })) {
    if (same_secret(std::string_view(auth).substr(space + 1), options.api_key)) return true;
  }
  return req.has_header("x-api-key") && same_secret(req.get_header_value("x-api-key"), options.api_key);
}

void HttpServer::Impl::install() {
  // Connections, timeouts and the body limit are the front door's
  // (front_door.h); the router sees whole requests only.
  http.set_payload_max_length(options.max_body_bytes);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!req.path.starts_with("/v1/") || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, dialect_of(req),
               ApiError(401, "missing or wrong API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')", "",
                        "invalid_api_key"));
    metrics.count_request(endpoint_label(req.path), Outcome::kUnauthorized);
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    switch (res.status) {
      case 404: message = "no route for " + req.method + " " + req.path; break;
      case 413: message = "the request body is larger than the limit of " + std::to_string(options.max_body_bytes) + " bytes"; break;
      case 400: message = "malformed HTTP request"; break;
      default: message = "HTTP error " + std::to_string(res.status); break;
    }
    send_error(res, dialect_of(req), ApiError(res.status, message));
    if (res.status == 413) metrics.count_request(endpoint_label(req.path), Outcome::kRejected);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    send_error(res, dialect_of(req), ApiError(500, what));
  });
  if (options.log_requests) {
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s %s -> %d\n", req.remote_addr.c_str(), req.method.c_str(), req.path.c_str(),
                   res.status);
    });
  }

  http.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
    generate(q, r, Endpoint::kChatCompletions);
  });
  http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
    generate(q, r, Endpoint::kCompletions);
  });
  http.Post("/v1/messages", [this](const httplib::Request& q, httplib::Response& r) {
    generate(q, r, Endpoint::kMessages);
  });
  http.Post("/v1/responses", [this](const httplib::Request& q, httplib::Response& r) {
    generate(q, r, Endpoint::kResponses);
  });
  auto response_not_found = [](const std::string& id) {
    return ApiError(404, "Response with id '" + id + "' not found (never stored, expired or evicted).", "response_id");
  };
  http.Get(R"(/v1/responses/([^/]+))", [this, response_not_found](const httplib::Request& req, httplib::Response& res) {
    const auto stored = responses.get(req.matches[1]);
    if (!stored) return send_error(res, Dialect::kOpenAI, response_not_found(req.matches[1]));
    res.set_content(json_text(stored->response), "application/json");
  });
  http.Delete(R"(/v1/responses/([^/]+))", [this, response_not_found](const httplib::Request& req, httplib::Response& res) {
    if (!responses.erase(req.matches[1])) return send_error(res, Dialect::kOpenAI, response_not_found(req.matches[1]));
    res.set_content(json_text({{"id", std::string(req.matches[1])}, {"object", "response"}, {"deleted", true}}),
                    "application/json");
  });
  if (options.chat_page) {
    // Outside /v1/, so no API key: the page asks for the key and sends it.
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      const ui::ChatPage page = ui::chat_page();
      res.set_header("Content-Security-Policy", std::string(page.content_security_policy));
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(page.html.data(), page.html.size(), "text/html; charset=utf-8");
    });
  }
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = !draining.load();
    res.status = ok ? 200 : 503;
    res.set_content(json_text({{"status", ok ? "ok" : "shutting_down"}}), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(engine.stats(), engine.model_info().device), "text/plain; version=0.0.4; charset=utf-8");
  });
  auto model_entry = [this](Dialect d) -> Json {
    if (d == Dialect::kAnthropic) {
      char created[32];
      std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&started));
      return {{"type", "model"}, {"id", model.name}, {"display_name", model.name}, {"created_at", created}};
    }
    return {{"id", model.name}, {"object", "model"}, {"created", int64_t(started)}, {"owned_by", "rowlm"},
            {"max_model_len", model.context_length}, {"device", engine.model_info().device}};
  };
  http.Get("/v1/models", [this, model_entry](const httplib::Request& req, httplib::Response& res) {
    const Dialect d = dialect_of(req);
    Json list = Json::array({model_entry(d)});
    Json body = d == Dialect::kAnthropic
                    ? Json{{"data", list}, {"has_more", false}, {"first_id", model.name}, {"last_id", model.name}}
                    : Json{{"object", "list"}, {"data", list}};
    res.set_content(json_text(body), "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [this, model_entry](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != model.name) {
      send_error(res, dialect_of(req), ApiError(404, "model '" + std::string(req.matches[1]) + "' is not served here",
                                                "model", "model_not_found"));
      return;
    }
    res.set_content(json_text(model_entry(dialect_of(req))), "application/json");
  });
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const auto received = Clock::now();
  const Dialect dialect = endpoint == Endpoint::kMessages ? Dialect::kAnthropic : Dialect::kOpenAI;
  const std::string name = endpoint_name(endpoint);
  auto in_flight_guard = std::make_shared<InFlight>(in_flight, metrics);
  const std::shared_ptr<Connection> connection = connection_of(req);
  try {
    if (draining) throw ApiError(503, "the server is shutting down");
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw ApiError(400, "body: not valid JSON", "body");
    const int64_t vocab = model.vocab_size;
    // The Responses API continues a stored conversation.
    std::optional<ResponsesRequest> responses_request;
    std::shared_ptr<const StoredResponse> previous;
    if (endpoint == Endpoint::kResponses) {
      if (const auto id = previous_response_id_of(body)) {
        previous = responses.get(*id);
        if (!previous)
          throw ApiError(400, "previous_response_id: no stored response '" + *id + "' (never stored, expired or evicted)",
                         "previous_response_id", "previous_response_not_found");
      }
      responses_request = parse_responses_request(body, vocab, previous ? previous->turns : std::vector<ChatTurn>{});
    }
    const GenerationRequest request = endpoint == Endpoint::kChatCompletions ? parse_chat_completion_request(body, vocab)
                                      : endpoint == Endpoint::kCompletions   ? parse_completion_request(body, vocab)
                                      : endpoint == Endpoint::kMessages      ? parse_messages_request(body, vocab)
                                                                             : responses_request->generation;
    PreparedGeneration prepared =
        prepare_generation(request, model, previous ? std::optional<KvReuse>(KvReuse{previous->kv_ids, previous->kv_text})
                                                    : std::nullopt);
    ReplyContext& rc = prepared.reply;
    rc.id = ids.next(endpoint == Endpoint::kChatCompletions ? "chatcmpl-"
                     : endpoint == Endpoint::kCompletions   ? "cmpl-"
                     : endpoint == Endpoint::kMessages      ? "msg_"
                                                            : "resp_");
    rc.created = int64_t(std::time(nullptr));
    rc.make_tool_call_id = [this, dialect] { return ids.next(dialect == Dialect::kAnthropic ? "toolu_" : "call_"); };
    const std::vector<int64_t> prompt_tokens = rc.prompt_tokens;
    const std::size_t n = rc.n;
    std::function<void(const Generation&)> store_response;  // a Responses API reply with store: true
    std::shared_ptr<ReplyWriter> writer;
    if (responses_request) {
      std::shared_ptr<ResponsesReplyWriter> rw = make_responses_writer(std::move(rc), responses_request->echo);
      if (responses_request->store) {
        std::vector<ChatTurn> conversation = previous ? previous->turns : std::vector<ChatTurn>{};
        conversation.insert(conversation.end(), responses_request->input.begin(), responses_request->input.end());
        store_response = [this, rw, conversation = std::move(conversation), prompt_ids = prepared.requests[0].prompt_ids,
                          prompt_text = prepared.prompt_text](const Generation& g) mutable {
          keep_response(*rw, g.result(0), std::move(conversation), std::move(prompt_ids), std::move(prompt_text));
        };
      }
      writer = std::move(rw);
    } else {
      writer = endpoint == Endpoint::kChatCompletions ? make_chat_completion_writer(std::move(rc))
               : endpoint == Endpoint::kCompletions   ? make_completion_writer(std::move(rc))
                                                      : make_messages_writer(std::move(rc));
    }
    auto generation =
        std::make_shared<Generation>(engine, std::move(prepared.requests), received, metrics, std::move(prepared.budget));

    // Token totals and the outcome, once the reply is complete.
    auto account = [this, name, received, prompt_tokens, n](const Generation& g, Outcome outcome) {
      int64_t prompt = 0, generated = 0, cached = 0;
      for (int64_t p : prompt_tokens) prompt += p;
      for (std::size_t i = 0; i < g.size(); ++i) {
        if (outcome == Outcome::kCancelled) break;
        generated += g.result(i).usage.completion_tokens;
        if (i % n == 0) cached += g.result(i).usage.cached_prompt_tokens;
      }
      metrics.add_tokens(prompt, generated, cached);
      metrics.observe_request_latency(std::chrono::duration<double>(Clock::now() - received).count());
      metrics.count_request(name, outcome);
    };

    // A client that hangs up cancels its requests at once, whether they
    // wait in the queue, stream or are being computed whole.
    auto on_hang_up = [generation] { generation->cancel(); };
    if (!request.stream) {
      std::optional<Connection::Watch> watch;
      if (connection) watch.emplace(connection, on_hang_up);
      Generation::Event event;
      while (generation->next(event)) {
      }
      if (connection && connection->hung_up()) {
        account(*generation, Outcome::kCancelled);
        return;
      }
      std::vector<const RequestResult*> results;
      for (std::size_t i = 0; i < generation->size(); ++i) {
        const RequestResult& r = generation->result(i);
        if (result_failed(r)) {
          account(*generation, Outcome::kServerError);
          send_error(res, dialect, ApiError(r.finish == FinishReason::Cancelled ? 503 : 500, failure_message(r)));
          return;
        }
        results.push_back(&r);
      }
      res.set_content(json_text(writer->body(results)), "application/json");
      if (store_response) store_response(*generation);
      account(*generation, Outcome::kSuccess);
      return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [generation, writer, account, in_flight_guard, store_response,
         watch = connection ? std::make_shared<Connection::Watch>(connection, on_hang_up) : nullptr,
         stream_interval = std::chrono::milliseconds(options.stream_interval_ms)](std::size_t, httplib::DataSink& sink) {
          auto send = [&sink](const std::string& bytes) { return bytes.empty() || sink.write(bytes.data(), bytes.size()); };
          // A write fails once the client has gone: cancel at once, so the
          // engine frees the rows' KV at its next step.
          auto client_gone = [&] {
            generation->cancel();
            account(*generation, Outcome::kCancelled);
            return false;
          };
          if (!send(writer->stream_start())) return client_gone();
          bool failed = false, first = true;
          std::string pending;
          auto last_write = Clock::now();
          Generation::Event event;
          while (generation->next(event)) {
            if (event.finished) {
              failed = failed || result_failed(generation->result(event.choice));
              pending += writer->stream_finish(event.choice, generation->result(event.choice));
            } else {
              pending += writer->stream_token(event.choice, event.token);
            }
            const auto now = Clock::now();
            // Until some text has gone out (a token may add none while it
            // could start a stop string), every event is written at once.
            if (first || event.finished || now - last_write >= stream_interval) {
              if (!send(pending)) return client_gone();
              first = first && pending.empty();
              pending.clear();
              last_write = now;
            }
          }
          if (!send(pending + writer->stream_end())) return client_gone();
          sink.done();
          if (store_response && !failed) store_response(*generation);
          account(*generation, failed ? Outcome::kServerError : Outcome::kSuccess);
          return true;
        });
  } catch (const QueueFull& e) {
    res.set_header("Retry-After", "1");
    send_error(res, dialect, ApiError(429, std::string("the server is busy: ") + e.what() + "; retry later"));
    metrics.count_request(name, Outcome::kRejected);
  } catch (const ApiError& e) {
    send_error(res, dialect, e);
    metrics.count_request(name, outcome_of_status(e.status()));
  } catch (const Error& e) {
    // The engine refused the request. Its request check already ran in
    // prepare_generation (engine/validate_request.h), so this is what only
    // the engine knows, such as having shut down.
    send_error(res, dialect, ApiError(400, e.what()));
    metrics.count_request(name, Outcome::kClientError);
  }
}

HttpServer::HttpServer(Engine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const ServerOptions& o = impl_->options;
  if (o.port < 0 || o.port > 65535) throw Error("--port must be in [0, 65535], got " + std::to_string(o.port));
  return impl_->door->bind();
}

void HttpServer::run() { impl_->door->run(); }

void HttpServer::stop_accepting() {
  impl_->draining = true;
  impl_->door->stop();
}

bool HttpServer::wait_idle(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (impl_->in_flight.load() > 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

const ServerOptions& HttpServer::options() const { return impl_->options; }

}  // namespace rowlm::server
