// The HTTP layer end to end on a loopback socket, over a FakeEngine: routes,
// auth, error shapes, streaming framing, disconnects, queue limits and
// shutdown. (The real engine and the official SDKs are exercised by the
// integration tests in tests/server/.)

#include "server/server.h"

#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/fake_engine.h"

namespace rowlm::server {
namespace {

using Json = nlohmann::json;
using testing::FakeEngine;
using namespace std::chrono_literals;

const std::string kModelDir = std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny";

class ServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions options = {}) {
    options.port = 0;
    options.log_requests = false;
    options.http_threads = 16;
    server_ = std::make_unique<HttpServer>(engine_, options);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (server_) {
      server_->stop_accepting();
      engine_.shutdown();
      thread_.join();
    }
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const Json& body, httplib::Headers headers = {}) const {
    return client().Post(path.c_str(), headers, body.dump(), "application/json");
  }
  static Json chat(bool stream = false) {
    return {{"model", "rowlm-tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"stream", stream}};
  }
  // The data of every SSE event in a body.
  static std::vector<std::string> sse_data(const std::string& body) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while (true) {
      const std::size_t end = body.find("\n\n", pos);
      if (end == std::string::npos) break;
      std::string block = body.substr(pos, end - pos);
      if (block.starts_with("event: ")) block = block.substr(block.find('\n') + 1);
      EXPECT_TRUE(block.starts_with("data: ")) << block;
      out.push_back(block.substr(6));
      pos = end + 2;
    }
    EXPECT_EQ(pos, body.size()) << "trailing bytes after the last event";
    return out;
  }
  template <typename Pred>
  static bool eventually(Pred pred) {
    for (int i = 0; i < 500; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return pred();
  }

  FakeEngine engine_{kModelDir};
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(ServerTest, ChatCompletionWholeAndStreamed) {
  start();
  auto r = post("/v1/chat/completions", chat());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json body = Json::parse(r->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "rowlm-tiny");
  EXPECT_EQ(body["choices"][0]["message"]["content"], engine_.reply);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  // The chat was rendered with the model's format and tokenized without
  // adding BOS again; its end-of-turn token stops the reply.
  const Request sent = engine_.last_request();
  EXPECT_EQ(engine_.tokenizer().decode(sent.prompt_ids), "<bos><|turn>user\nHi<turn|>\n<|turn>model\n");
  EXPECT_EQ(body["usage"]["prompt_tokens"], sent.prompt_ids.size());
  EXPECT_NE(std::find(sent.sampling.stop_token_ids.begin(), sent.sampling.stop_token_ids.end(), 106),
            sent.sampling.stop_token_ids.end());

  Json streamed = chat(true);
  streamed["stream_options"] = {{"include_usage", true}};
  r = post("/v1/chat/completions", streamed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->get_header_value("Content-Type").starts_with("text/event-stream"));
  const auto events = sse_data(r->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i]);
    for (const Json& ch : chunk["choices"]) text += ch["delta"].value("content", "");
  }
  EXPECT_EQ(text, engine_.reply);
  EXPECT_EQ(Json::parse(events[events.size() - 2])["usage"]["completion_tokens"],
            engine_.tokenizer().encode(engine_.reply, false).size());
}

TEST_F(ServerTest, SeveralChoicesStreamSideBySide) {
  engine_.token_interval = 1ms;
  start();
  Json body = chat(true);
  body["n"] = 3;
  body["seed"] = 7;
  const auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  std::vector<std::string> text(3);
  for (const std::string& e : sse_data(r->body)) {
    if (e == "[DONE]") continue;
    const Json chunk = Json::parse(e);
    for (const Json& ch : chunk["choices"]) text.at(ch["index"].get<std::size_t>()) += ch["delta"].value("content", "");
  }
  for (const std::string& t : text) EXPECT_EQ(t, engine_.reply);
  EXPECT_EQ(engine_.submitted.load(), 3);
  EXPECT_EQ(engine_.last_request().sampling.seed, 9u);  // choice j gets seed + j
}

TEST_F(ServerTest, CompletionsAndMessages) {
  start();
  auto r = post("/v1/completions", {{"model", "rowlm-tiny"}, {"prompt", "In the beginning"}, {"max_tokens", 3},
                                    {"echo", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json body = Json::parse(r->body);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(body["choices"][0]["text"].get<std::string>().starts_with("In the beginning And"));
  // A text prompt gets the tokenizer's special tokens (BOS).
  EXPECT_EQ(engine_.last_request().prompt_ids.front(), 2);

  r = post("/v1/messages", {{"model", "rowlm-tiny"}, {"max_tokens", 64}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  body = Json::parse(r->body);
  EXPECT_EQ(body["type"], "message");
  EXPECT_EQ(body["content"][0]["text"], engine_.reply);
  EXPECT_EQ(body["stop_reason"], "end_turn");
}

TEST_F(ServerTest, ToolCallsComeBackParsed) {
  engine_.reply = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";
  start();
  Json body = chat();
  body["tools"] = {{{"type", "function"},
                    {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
  auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json m = Json::parse(r->body)["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()), Json({{"city", "Paris"}}));
  // Gemma 4 stops at <|tool_response> once it has called.
  const auto stops = engine_.last_request().sampling.stop_token_ids;
  EXPECT_NE(std::find(stops.begin(), stops.end(), 50), stops.end());
}

TEST_F(ServerTest, ErrorsAreJsonInTheEndpointsShape) {
  start(ServerOptions{.max_body_bytes = 4096});
  struct Case {
    std::string path, body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "{not json", 400, "body"},
      {"/v1/chat/completions", R"({"model":"rowlm-tiny","messages":[{"role":"user","content":5}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", R"({"model":"other","messages":[{"role":"user","content":"x"}]})", 404, "model"},
      {"/v1/chat/completions", R"({"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"temperature":9})", 400, "temperature"},
      {"/v1/completions", R"({"model":"rowlm-tiny","prompt":"x","max_tokens":5000})", 400, "max_tokens"},
      {"/v1/chat/completions", std::string(8000, ' '), 413, ""},
      {"/v1/nothing", "{}", 404, ""},
  };
  for (const Case& c : cases) {
    const auto r = client().Post(c.path.c_str(), c.body, "application/json");
    ASSERT_TRUE(r) << c.path;
    EXPECT_EQ(r->status, c.status) << c.body.substr(0, 80);
    const Json err = Json::parse(r->body);
    EXPECT_TRUE(err["error"]["message"].is_string()) << r->body;
    if (!c.param.empty()) {
      EXPECT_EQ(err["error"]["param"], c.param) << r->body;
    }
  }
  const auto r = client().Post("/v1/messages", R"({"model":"rowlm-tiny","messages":[]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const Json err = Json::parse(r->body);
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
  // Still serving.
  EXPECT_EQ(post("/v1/chat/completions", chat())->status, 200);
}

TEST_F(ServerTest, PromptLongerThanTheContext) {
  engine_.set_max_position(32);
  start();
  Json body = chat();
  body["messages"][0]["content"] = std::string(400, 'a') + " and more words to fill the context";
  const auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "messages");
  EXPECT_EQ(engine_.submitted.load(), 0);
}

TEST_F(ServerTest, ApiKey) {
  start(ServerOptions{.api_key = "sekrit"});
  EXPECT_EQ(post("/v1/chat/completions", chat())->status, 401);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "Bearer sekri"}})->status, 401);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "Bearer sekrit"}})->status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"x-api-key", "sekrit"}})->status, 200);
  const auto r = post("/v1/messages", {{"model", "rowlm-tiny"}}, {{"x-api-key", "nope"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "authentication_error");
  EXPECT_EQ(client().Get("/health")->status, 200);  // probes need no key
  EXPECT_EQ(client().Get("/v1/models")->status, 401);
  // Refusals are counted per endpoint, other paths under one label.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(post("/v1/probe" + std::to_string(i), {})->status, 401);
  const std::string m = client().Get("/metrics")->body;
  EXPECT_NE(m.find("rowlm_http_requests_total{endpoint=\"chat_completions\",outcome=\"unauthorized\"} 3"),
            std::string::npos) << m;
  EXPECT_NE(m.find("rowlm_http_requests_total{endpoint=\"other\",outcome=\"unauthorized\"} 4"), std::string::npos)
      << m;  // /v1/models and the three probes
  EXPECT_EQ(m.find("probe"), std::string::npos);
}

TEST_F(ServerTest, FullQueueGets429WithRetryAfter) {
  engine_.capacity = 0;
  start();
  const auto r = post("/v1/chat/completions", chat());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "rate_limit_error");
  // Of several choices, the ones submitted before the refusal are cancelled.
  engine_.capacity = 2;
  Json body = chat();
  body["n"] = 3;
  EXPECT_EQ(post("/v1/chat/completions", body)->status, 429);
  EXPECT_TRUE(eventually([&] { return engine_.active.load() == 0; }));
  EXPECT_EQ(engine_.cancelled.load(), 2);
}

// A client that hangs up mid-stream cancels its request at once, and the
// server goes on serving.
TEST_F(ServerTest, DisconnectMidStreamCancels) {
  engine_.token_interval = 20ms;  // about two seconds of tokens
  start();
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = chat(true).dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, std::size_t, uint64_t, uint64_t) { return ++chunks < 3; };
  const auto r = client().send(req);
  EXPECT_FALSE(r);  // we hung up
  EXPECT_TRUE(eventually([&] { return engine_.cancelled.load() == 1; }));
  EXPECT_EQ(engine_.active.load(), 0);
  const auto metrics = client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("rowlm_http_requests_total{endpoint=\"chat_completions\",outcome=\"cancelled\"} 1"),
            std::string::npos)
      << metrics->body;
  engine_.token_interval = 0ms;
  EXPECT_EQ(post("/v1/chat/completions", chat())->status, 200);
}

// With a stream interval, the first token still leaves at once (its bytes
// arrive while the engine is still generating), the rest in groups, and the
// reply's events are the same as when every token is written alone.
TEST_F(ServerTest, StreamIntervalSendsTheFirstTokenAtOnceAndTheSameEvents) {
  engine_.reply = " And the king said unto him";
  engine_.token_interval = 100ms;
  start(ServerOptions{.stream_interval_ms = 10000});
  std::string body;
  bool first_content_while_generating = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = chat(true).dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, std::size_t size, uint64_t, uint64_t) {
    body.append(data, size);
    if (!first_content_while_generating && body.find("\"content\":\" And") != std::string::npos)
      first_content_while_generating = engine_.finished.load() == 0;
    return true;
  };
  ASSERT_TRUE(client().send(req));
  EXPECT_TRUE(first_content_while_generating) << body;

  auto texts = [](const std::string& sse) {
    std::vector<std::string> out;
    for (const std::string& e : sse_data(sse)) {
      if (e == "[DONE]") {
        out.push_back(e);
        continue;
      }
      const Json chunk = Json::parse(e);
      for (const Json& ch : chunk["choices"])
        out.push_back(ch["delta"].value("content", "") + "|" + ch.value("finish_reason", Json()).dump());
    }
    return out;
  };
  // The same engine behind a second server that writes every token alone.
  engine_.token_interval = 0ms;
  HttpServer every_token(engine_, ServerOptions{.port = 0, .http_threads = 4, .log_requests = false});
  const int port = every_token.bind();
  std::thread serving([&] { every_token.run(); });
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  const auto r = c.Post("/v1/chat/completions", chat(true).dump(), "application/json");
  every_token.stop_accepting();
  serving.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(texts(body), texts(r->body));
  EXPECT_GE(texts(body).size(), 5u);
}

// Shutdown: no new connections; the request in flight runs to its end.
TEST_F(ServerTest, StopAcceptingLetsRunningRequestsFinish) {
  engine_.token_interval = 10ms;
  start();
  std::string body;
  std::thread streaming([&] {
    const auto r = post("/v1/chat/completions", chat(true));
    if (r) body = r->body;
  });
  ASSERT_TRUE(eventually([&] { return engine_.active.load() == 1; }));
  server_->stop_accepting();
  EXPECT_TRUE(server_->wait_idle(10s));
  streaming.join();
  EXPECT_TRUE(body.ends_with("data: [DONE]\n\n")) << body;
  thread_.join();  // run() returned
  server_.reset();
  EXPECT_FALSE(client().Get("/health"));  // nothing listens
}

TEST_F(ServerTest, ModelsHealthMetrics) {
  start(ServerOptions{.model_name = "tiny"});
  Json models = Json::parse(client().Get("/v1/models")->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  httplib::Headers anthropic = {{"anthropic-version", "2023-06-01"}};
  models = Json::parse(client().Get("/v1/models", anthropic)->body);
  EXPECT_EQ(models["data"][0]["type"], "model");
  EXPECT_EQ(client().Get("/v1/models/tiny")->status, 200);
  EXPECT_EQ(client().Get("/v1/models/other")->status, 404);
  EXPECT_EQ(Json::parse(client().Get("/health")->body)["status"], "ok");
  const auto m = client().Get("/metrics");
  EXPECT_TRUE(m->get_header_value("Content-Type").starts_with("text/plain; version=0.0.4"));
  EXPECT_NE(m->body.find("# TYPE rowlm_time_to_first_token_seconds histogram"), std::string::npos);
}

}  // namespace
}  // namespace rowlm::server
