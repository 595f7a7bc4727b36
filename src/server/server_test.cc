// The HTTP layer end to end on a loopback socket, over a FakeEngine: routes,
// auth, error shapes, streaming framing, disconnects, queue limits and
// shutdown. (The real engine and the official SDKs are exercised by the
// integration tests in tests/server/.)

#include "server/server.h"

#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

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

// A TCP client of raw bytes, connected from a loopback address of the
// caller's choice (127.0.0.0/8 is all loopback), for what httplib::Client
// cannot send: chunked bodies, trickled headers, many connections.
class RawClient {
 public:
  RawClient(int port, const char* source = "127.0.0.1") : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(std::uint16_t(port));
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0 &&
                 ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(std::size_t(n));
    }
    return true;
  }
  // What arrives until the server closes the connection or `timeout` passes;
  // `closed` says which.
  std::string read_until_closed(std::chrono::milliseconds timeout, bool* closed = nullptr) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (closed) *closed = false;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        if (closed) *closed = true;
        return out;
      }
      out.append(buf, std::size_t(n));
    }
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
};

// The chunked encoding of `body` in pieces of `piece` bytes.
std::string chunked(const std::string& body, std::size_t piece) {
  std::string out;
  for (std::size_t pos = 0; pos < body.size(); pos += piece) {
    const std::string part = body.substr(pos, piece);
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", part.size());
    out += size + part + "\r\n";
  }
  return out + "0\r\n\r\n";
}

// Enough descriptors for `n` connections, both ends in this process.
void allow_descriptors(rlim_t n) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < n) {
    limit.rlim_cur = std::min(n, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  ::getrlimit(RLIMIT_NOFILE, &limit);
  ASSERT_GE(limit.rlim_cur, n) << "this test needs " << n << " open descriptors (ulimit -n)";
}

class ServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions options = {}) {
    options.port = 0;
    options.log_requests = false;
    if (options.http_threads == ServerOptions{}.http_threads) options.http_threads = 16;
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

// ignore_eos passes the chat format's end-of-turn token, as it passes
// config.json's end-of-sequence ids; a stop the client names still ends.
TEST_F(ServerTest, IgnoreEosPassesTheEndOfTurnToken) {
  start();
  Json body = chat();
  body["ignore_eos"] = true;
  body["stop_token_ids"] = {7};
  auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Request sent = engine_.last_request();
  EXPECT_TRUE(sent.ignore_eos);
  EXPECT_EQ(sent.sampling.stop_token_ids, std::vector<int32_t>{7});
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

// Thinking: the system turn asks for it, the reply's reasoning comes back
// apart, and a budget ends the first engine request at the budget and
// continues it with the span closed.
TEST_F(ServerTest, ThinkingIsSplitAndItsBudgetClosesTheSpan) {
  engine_.reply = "<|channel>thought\nOne two three four five six<channel|>Done.";
  start();
  Json body = chat();
  body["reasoning_effort"] = "high";
  auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json m = Json::parse(r->body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "One two three four five six");
  EXPECT_EQ(m["content"], "Done.");
  const Request first_sent = engine_.last_request();
  EXPECT_EQ(engine_.tokenizer().decode(first_sent.prompt_ids),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
  EXPECT_FALSE(first_sent.skip_special_tokens);  // the markup is special tokens

  const int before = engine_.submitted.load();
  r = post("/v1/messages", {{"model", "rowlm-tiny"}, {"max_tokens", 64},
                            {"thinking", {{"type", "enabled"}, {"budget_tokens", 6}}},
                            {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(engine_.submitted.load(), before + 2);  // the budget's phase, then the answer
  const Json msg = Json::parse(r->body);
  const std::vector<int32_t> reply = engine_.tokenizer().encode(engine_.reply, false);
  const std::vector<int32_t> closer = engine_.tokenizer().encode("<channel|>", false);
  const Request second = engine_.last_request();
  std::vector<int32_t> want = first_sent.prompt_ids;
  want.insert(want.end(), reply.begin(), reply.begin() + 6);
  want.insert(want.end(), closer.begin(), closer.end());
  EXPECT_EQ(second.prompt_ids, want);
  EXPECT_EQ(second.sampling.max_tokens, 58);
  ASSERT_GE(msg["content"].size(), 2u) << msg.dump();
  EXPECT_EQ(msg["content"][0]["type"], "thinking");
  const std::string six = engine_.tokenizer().decode(std::span(reply.data(), 6));
  EXPECT_EQ(msg["content"][0]["thinking"], six.substr(six.find('\n') + 1));
  EXPECT_FALSE(msg["content"][0]["thinking"].get<std::string>().empty());
  EXPECT_EQ(msg["content"][1]["type"], "text");
  EXPECT_EQ(msg["usage"]["output_tokens"], 6 + int64_t(reply.size()));
  // The same streamed: the thinking block ends where the budget closed the
  // span, and the text block holds what the second request wrote.
  r = post("/v1/messages", {{"model", "rowlm-tiny"}, {"max_tokens", 64}, {"stream", true},
                            {"thinking", {{"type", "enabled"}, {"budget_tokens", 6}}},
                            {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_TRUE(r);
  std::string thinking, text;
  for (const std::string& e : sse_data(r->body)) {
    const Json j = Json::parse(e);
    if (j["type"] != "content_block_delta") continue;
    if (j["delta"]["type"] == "thinking_delta") thinking += j["delta"]["thinking"].get<std::string>();
    if (j["delta"]["type"] == "text_delta") text += j["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(thinking, msg["content"][0]["thinking"].get<std::string>());
  EXPECT_EQ(text, msg["content"][1]["text"].get<std::string>());

  // Streamed, the closer arrives between the phases and the answer follows it.
  Json streamed = chat(true);
  streamed["chat_template_kwargs"] = {{"enable_thinking", true}};
  streamed["max_tokens"] = 64;
  r = post("/v1/chat/completions", streamed);
  ASSERT_TRUE(r);
  std::string reasoning, content;
  for (const std::string& e : sse_data(r->body)) {
    if (e == "[DONE]") continue;
    const Json chunk = Json::parse(e);
    for (const Json& ch : chunk["choices"]) {
      reasoning += ch["delta"].value("reasoning_content", "");
      content += ch["delta"].value("content", "");
    }
  }
  EXPECT_EQ(reasoning, "One two three four five six");
  EXPECT_EQ(content, "Done.");
}

TEST_F(ServerTest, ThinkingWhereTheFormatHasNoneIsRefused) {
  start(ServerOptions{.chat_format = "llama3"});
  Json body = chat();
  body["reasoning_effort"] = "low";
  const auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "reasoning_effort") << r->body;
  body["reasoning_effort"] = "none";  // off is fine anywhere
  EXPECT_EQ(post("/v1/chat/completions", body)->status, 200);
}

// The Responses API over HTTP: a response, streamed and whole; a stored one
// continued by previous_response_id with its prompt and reply tokens first
// in the next prompt (so the prefix cache holds them); GET and DELETE.
TEST_F(ServerTest, ResponsesContinueAStoredConversation) {
  // (Gemma 4's history trims replies: one with space at an end could not keep its tokens.)
  engine_.reply = "And the king said unto him, What is this?";
  start();
  auto r = post("/v1/responses", {{"model", "rowlm-tiny"}, {"input", "Hi"}, {"instructions", "Be brief."}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json first = Json::parse(r->body);
  EXPECT_EQ(first["object"], "response");
  EXPECT_EQ(first["status"], "completed");
  EXPECT_TRUE(first["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(first["output"][0]["content"][0]["text"], engine_.reply);
  EXPECT_EQ(first["instructions"], "Be brief.");
  const Request first_sent = engine_.last_request();
  EXPECT_EQ(engine_.tokenizer().decode(first_sent.prompt_ids),
            "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
  EXPECT_EQ(first["usage"]["input_tokens"], first_sent.prompt_ids.size());

  // The same request, streamed: the events end with the same response.
  r = post("/v1/responses", {{"model", "rowlm-tiny"}, {"input", "Hi"}, {"stream", true}, {"store", false}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const auto events = sse_data(r->body);
  ASSERT_GE(events.size(), 8u);
  EXPECT_EQ(Json::parse(events.front())["type"], "response.created");
  const Json completed = Json::parse(events.back());
  EXPECT_EQ(completed["type"], "response.completed");
  std::string text;
  for (const std::string& e : events)
    if (const Json j = Json::parse(e); j["type"] == "response.output_text.delta") text += j["delta"].get<std::string>();
  EXPECT_EQ(text, engine_.reply);
  EXPECT_EQ(completed["response"]["output"][0]["content"][0]["text"], engine_.reply);
  const std::string unstored = completed["response"]["id"];
  EXPECT_EQ(client().Get("/v1/responses/" + unstored)->status, 404);  // store: false

  // Continued: instructions are not carried over, so the same ones are given again.
  r = post("/v1/responses", {{"model", "rowlm-tiny"}, {"input", "More?"}, {"instructions", "Be brief."},
                             {"previous_response_id", first["id"]}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json second = Json::parse(r->body);
  EXPECT_EQ(second["previous_response_id"], first["id"]);
  const Request second_sent = engine_.last_request();
  std::vector<int32_t> kv = first_sent.prompt_ids;
  const auto reply_ids = engine_.tokenizer().encode(engine_.reply, false);
  kv.insert(kv.end(), reply_ids.begin(), reply_ids.end());
  ASSERT_GT(second_sent.prompt_ids.size(), kv.size());
  EXPECT_TRUE(std::equal(kv.begin(), kv.end(), second_sent.prompt_ids.begin()));
  EXPECT_EQ(engine_.tokenizer().decode(second_sent.prompt_ids),
            "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n" +
                engine_.reply + "<turn|>\n<|turn>user\nMore?<turn|>\n<|turn>model\n");

  // GET returns what was sent; DELETE forgets it.
  auto got = client().Get("/v1/responses/" + first["id"].get<std::string>());
  ASSERT_TRUE(got);
  EXPECT_EQ(Json::parse(got->body), first);
  EXPECT_EQ(client().Delete("/v1/responses/" + first["id"].get<std::string>())->status, 200);
  got = client().Get("/v1/responses/" + first["id"].get<std::string>());
  EXPECT_EQ(got->status, 404);
  EXPECT_EQ(Json::parse(got->body)["error"]["type"], "not_found_error");
  r = post("/v1/responses", {{"model", "rowlm-tiny"}, {"input", "x"}, {"previous_response_id", first["id"]}});
  EXPECT_EQ(r->status, 400);
  const Json error = Json::parse(r->body)["error"];
  EXPECT_EQ(error["param"], "previous_response_id");
  EXPECT_EQ(error["code"], "previous_response_not_found");
}

// A stored function call answered by function_call_output: the tool's
// result reaches the prompt in the model's markup.
TEST_F(ServerTest, ResponsesToolCallRoundTrip) {
  engine_.reply = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";
  start();
  const Json tools = {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}};
  auto r = post("/v1/responses", {{"model", "rowlm-tiny"}, {"input", "Weather?"}, {"tools", tools}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json first = Json::parse(r->body);
  ASSERT_EQ(first["output"].size(), 1u) << first.dump();
  const Json call = first["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["arguments"].get<std::string>()), Json({{"city", "Paris"}}));
  r = post("/v1/responses", {{"model", "rowlm-tiny"}, {"tools", tools}, {"previous_response_id", first["id"]},
                             {"input", {{{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "sunny"}}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string prompt = engine_.tokenizer().decode(engine_.last_request().prompt_ids);
  EXPECT_TRUE(prompt.ends_with("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"
                               "<|tool_response>response:get_weather{value:<|\"|>sunny<|\"|>}<tool_response|>"))
      << prompt;
  // A call id the conversation never made is named.
  r = post("/v1/responses", {{"model", "rowlm-tiny"}, {"previous_response_id", first["id"]},
                             {"input", {{{"type", "function_call_output"}, {"call_id", "call_x"}, {"output", "?"}}}}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "input[0].call_id");
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

// With one model served, a request without `model` is served by it on every
// generation endpoint; a wrong name is a 404 naming it, in the endpoint's shape.
TEST_F(ServerTest, ModelMayBeLeftOutButNotMisnamed) {
  start();
  const Json chat_body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  const Json completion_body = {{"prompt", "In the beginning"}, {"max_tokens", 3}};
  const Json messages_body = {{"max_tokens", 64}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  struct Endpoint {
    std::string path;
    Json body;
    bool anthropic;
  };
  for (const Endpoint& e : {Endpoint{"/v1/chat/completions", chat_body, false},
                            Endpoint{"/v1/completions", completion_body, false},
                            Endpoint{"/v1/messages", messages_body, true}}) {
    SCOPED_TRACE(e.path);
    auto r = post(e.path, e.body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(Json::parse(r->body)["model"], "rowlm-tiny");  // the reply names the model that served it
    for (const char* wrong : {"gemma-7b", ""}) {
      Json body = e.body;
      body["model"] = wrong;
      r = post(e.path, body);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 404) << r->body;
      const Json err = Json::parse(r->body);
      const std::string message = err["error"]["message"];
      EXPECT_NE(message.find("'" + std::string(wrong) + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("rowlm-tiny"), std::string::npos) << message;
      EXPECT_EQ(err["error"]["type"], "not_found_error");
      if (e.anthropic) {
        EXPECT_EQ(err["type"], "error") << r->body;
      } else {
        EXPECT_EQ(err["error"]["param"], "model") << r->body;
        EXPECT_EQ(err["error"]["code"], "model_not_found") << r->body;
      }
    }
  }
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

// A prompt too long in bytes for any tokenization to fit is refused before
// it is tokenized: the refusal counts bytes, not tokens.
TEST_F(ServerTest, PromptTooLongToFitIsRefusedUntokenized) {
  engine_.set_max_position(32);
  start();
  Json body = chat();
  body["messages"][0]["content"] = std::string(2 << 20, 'a');
  auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "messages");
  EXPECT_NE(r->body.find("bytes of prompt cannot fit the model's context of 32 tokens"), std::string::npos) << r->body;
  r = post("/v1/completions", {{"model", "rowlm-tiny"}, {"prompt", {"ok", std::string(2 << 20, 'b')}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "prompt[1]");
  EXPECT_EQ(engine_.submitted.load(), 0);
}

TEST_F(ServerTest, ApiKey) {
  start(ServerOptions{.api_key = "sekrit"});
  EXPECT_EQ(post("/v1/chat/completions", chat())->status, 401);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "Bearer sekri"}})->status, 401);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "Bearer sekrit"}})->status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"x-api-key", "sekrit"}})->status, 200);
  // RFC 7235: the scheme is case-insensitive; the key is not.
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "bearer sekrit"}})->status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "BEARER sekrit"}})->status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "Bearer SEKRIT"}})->status, 401);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "Basic sekrit"}})->status, 401);
  const auto r = post("/v1/messages", {{"model", "rowlm-tiny"}}, {{"x-api-key", "nope"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "authentication_error");
  EXPECT_EQ(client().Get("/health")->status, 200);  // probes need no key
  EXPECT_EQ(client().Get("/v1/models")->status, 401);
  // Refusals are counted per endpoint, other paths under one label.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(post("/v1/probe" + std::to_string(i), {})->status, 401);
  const std::string m = client().Get("/metrics")->body;
  EXPECT_NE(m.find("rowlm_http_requests_total{endpoint=\"chat_completions\",outcome=\"unauthorized\"} 5"),
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
  EXPECT_TRUE(eventually([&] { return engine_.active.load() == 0; }));
  // The handler records the outcome after the engine saw the cancel: wait
  // for the state rather than read it once.
  std::string metrics;
  EXPECT_TRUE(eventually([&] {
    const auto m = client().Get("/metrics");
    metrics = m ? m->body : "";
    return metrics.find("rowlm_http_requests_total{endpoint=\"chat_completions\",outcome=\"cancelled\"} 1") !=
           std::string::npos;
  })) << metrics;
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

// A chunked body is bounded as it arrives: 413 in the endpoint's shape, the
// connection closed, nothing tokenized or submitted; within the limit it is
// served like any other.
TEST_F(ServerTest, ChunkedBodiesAreBoundedAsTheyArrive) {
  start(ServerOptions{.max_body_bytes = 4096});
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  {
    RawClient c(port_);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.send(head));
    // 64 KiB in 1 KiB chunks; the server stops reading after the fifth.
    const std::string big = chunked(std::string(64 << 10, ' '), 1024);
    c.send(big.substr(0, big.size() - 5));  // may fail once the server closed
    bool closed = false;
    const std::string reply = c.read_until_closed(5s, &closed);
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 413 ")) << reply.substr(0, 200);
    EXPECT_NE(reply.find("larger than the limit of 4096 bytes"), std::string::npos) << reply;
    EXPECT_NE(reply.find("Connection: close"), std::string::npos) << reply;
    EXPECT_TRUE(closed);
  }
  EXPECT_EQ(engine_.submitted.load(), 0);
  RawClient c(port_);
  ASSERT_TRUE(c.send(head + chunked(chat().dump(), 7) + "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"));
  const std::string replies = c.read_until_closed(10s);
  EXPECT_TRUE(replies.starts_with("HTTP/1.1 200 OK")) << replies;
  EXPECT_NE(replies.find(engine_.reply), std::string::npos) << replies;
  // The pipelined request after it was served on the same connection.
  EXPECT_NE(replies.find("{\"status\":\"ok\"}"), std::string::npos) << replies;
  EXPECT_EQ(engine_.submitted.load(), 1);
}

// Headers trickled a byte at a time meet the header deadline all the same.
TEST_F(ServerTest, HeaderDeadlineHoldsHoweverSlowlyTheBytesCome) {
  start(ServerOptions{.header_timeout_ms = 300});
  RawClient c(port_);
  const std::string head = "GET /health HTTP/1.1\r\nX-Slow: " + std::string(100, 'z');
  const auto begun = std::chrono::steady_clock::now();
  for (char ch : head) {  // 2 s of bytes, each well within any per-read timeout
    if (!c.send(std::string_view(&ch, 1))) break;  // the server closed
    std::this_thread::sleep_for(20ms);
  }
  bool closed = false;
  const std::string reply = c.read_until_closed(5s, &closed);
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 408 ")) << reply;
  EXPECT_LT(std::chrono::steady_clock::now() - begun, 8s);
  EXPECT_NE(reply.find("did not arrive in time"), std::string::npos) << reply;
  EXPECT_TRUE(closed);
}

// Connections per client address are bounded; other clients are not affected.
TEST_F(ServerTest, ConnectionsPerClientAreBounded) {
  start(ServerOptions{.max_connections_per_client = 4});
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::make_unique<RawClient>(port_, "127.0.0.2"));
  RawClient over(port_, "127.0.0.2");
  bool closed = false;
  const std::string reply = over.read_until_closed(5s, &closed);
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 429 ")) << reply;
  EXPECT_NE(reply.find("too many connections from 127.0.0.2"), std::string::npos) << reply;
  EXPECT_TRUE(closed);
  EXPECT_EQ(client().Get("/health")->status, 200);  // 127.0.0.1 is another client
  held.front()->close();
  // Once the server has seen that close, 127.0.0.2 may connect again.
  EXPECT_TRUE(eventually([&] {
    RawClient again(port_, "127.0.0.2");
    again.send("GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
    return again.read_until_closed(5s).starts_with("HTTP/1.1 200 ");
  }));
}

// 1,000 connections that trickle header lines hold no handler: /health and
// a generation request are answered while they are open, and each of them
// is closed at the header deadline.
TEST_F(ServerTest, SlowClientsCannotTakeTheServerDown) {
  allow_descriptors(2300);
  constexpr int kSlow = 1000, kAddresses = 10;
  start(ServerOptions{.header_timeout_ms = 3000, .max_connections_per_client = kSlow / kAddresses});
  // The first connection's deadline runs from here: until then, all are open.
  const auto opened = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < kSlow; ++i) {
    const std::string source = "127.0.0." + std::to_string(2 + i % kAddresses);
    slow.push_back(std::make_unique<RawClient>(port_, source.c_str()));
    ASSERT_TRUE(slow.back()->connected()) << i;
    ASSERT_TRUE(slow.back()->send("POST /v1/chat/completions HTTP/1.1\r\n"));
  }
  std::atomic<bool> trickling{true};
  std::thread trickle([&] {
    while (trickling) {  // one header line on every connection, every 200 ms
      for (auto& c : slow) c->send("X-Slow: 1\r\n");
      std::this_thread::sleep_for(200ms);
    }
  });
  auto timed = [](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    const int status = f();
    return std::pair{status, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()};
  };
  const auto [health, health_ms] = timed([&] {
    auto r = client().Get("/health");
    return r ? r->status : -1;
  });
  const auto [generated, generated_ms] = timed([&] {
    auto r = post("/v1/chat/completions", chat());
    return r ? r->status : -1;
  });
  const bool answered_while_open = std::chrono::steady_clock::now() - opened < 3000ms;
  EXPECT_EQ(health, 200);
  EXPECT_EQ(generated, 200);
  EXPECT_TRUE(answered_while_open) << "the slow connections were closed before the checks ran; the test proves nothing";
  std::printf("with %d slow connections: /health in %.1f ms, a chat completion in %.1f ms\n", kSlow, health_ms,
              generated_ms);
  // Each slow connection is refused at its deadline, trickle as it may.
  int timed_out = 0;
  for (auto& c : slow) timed_out += c->read_until_closed(10s).starts_with("HTTP/1.1 408 ");
  trickling = false;
  trickle.join();
  EXPECT_EQ(timed_out, kSlow);
}

// A client that hangs up during a non-streamed reply cancels its requests
// at once, every choice of it.
TEST_F(ServerTest, HangUpCancelsANonStreamedRequest) {
  engine_.token_interval = 100ms;  // about two seconds per choice
  start();
  Json body = chat();
  body["n"] = 8;
  {
    RawClient c(port_);
    const std::string json = body.dump();
    ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(json.size()) + "\r\n\r\n" + json));
    ASSERT_TRUE(eventually([&] { return engine_.active.load() == 8; }));
  }  // hangs up
  const auto hung_up = std::chrono::steady_clock::now();
  EXPECT_TRUE(eventually([&] { return engine_.cancelled.load() == 8; }));
  std::printf("8 choices cancelled %.1f ms after the hang-up\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - hung_up).count());
  EXPECT_EQ(engine_.finished.load(), 0);
  std::string metrics;
  EXPECT_TRUE(eventually([&] {
    const auto m = client().Get("/metrics");
    metrics = m ? m->body : "";
    return metrics.find("rowlm_http_requests_total{endpoint=\"chat_completions\",outcome=\"cancelled\"} 1") !=
           std::string::npos;
  })) << metrics;
}

}  // namespace
}  // namespace rowlm::server
