#include "server/sse.h"

#include <random>

#include <gtest/gtest.h>

namespace rowlm::server {
namespace {

using Json = nlohmann::json;

// An event-stream reader per the WHATWG rules for what the server sends:
// events end at a blank line; "field: value" lines; data lines joined by \n.
struct SseEvent {
  std::string event, data;
};
std::vector<SseEvent> read_events(const std::string& stream, std::string* rest) {
  std::vector<SseEvent> out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t end = stream.find("\n\n", pos);
    if (end == std::string::npos) break;
    SseEvent e;
    std::size_t line_start = pos;
    bool first_data = true;
    while (line_start < end) {
      std::size_t line_end = stream.find('\n', line_start);
      if (line_end > end) line_end = end;
      const std::string line = stream.substr(line_start, line_end - line_start);
      const std::size_t colon = line.find(": ");
      const std::string field = line.substr(0, colon), value = line.substr(colon + 2);
      if (field == "event") e.event = value;
      if (field == "data") e.data += (first_data ? "" : "\n") + value, first_data = false;
      line_start = line_end + 1;
    }
    out.push_back(e);
    pos = end + 2;
  }
  *rest = stream.substr(pos);
  return out;
}

std::string random_text(std::mt19937& rng) {
  static const char* pieces[] = {"a", "\n", "\r\n", "\n\n", "data: x", "\"", "\\", "é", "😀", "\t", "[DONE]", " "};
  std::string s;
  for (int i = std::uniform_int_distribution<int>(0, 12)(rng); i > 0; --i)
    s += pieces[std::uniform_int_distribution<int>(0, 11)(rng)];
  return s;
}

// Whatever text a value carries (line breaks, blank lines, quotes), one
// event carries exactly that value: the stream splits into the events sent,
// each data field parses back to the value.
TEST(Sse, EventsCarryTheirValueWhatever) {
  std::mt19937 rng(11);
  std::string stream;
  std::vector<Json> sent;
  for (int i = 0; i < 300; ++i) {
    Json v = {{"text", random_text(rng)}, {"n", i}, {"nested", {{"k", random_text(rng)}}}};
    sent.push_back(v);
    stream += i % 2 ? sse_data(v) : sse_event("content_block_delta", v);
  }
  stream += kSseDone;
  std::string rest;
  const auto events = read_events(stream, &rest);
  EXPECT_TRUE(rest.empty());
  ASSERT_EQ(events.size(), sent.size() + 1);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(Json::parse(events[i].data), sent[i]);
    EXPECT_EQ(events[i].event, i % 2 ? "" : "content_block_delta");
  }
  EXPECT_EQ(events.back().data, "[DONE]");
}

TEST(Sse, InvalidUtf8BecomesReplacementCharacters) {
  const std::string half = "\xE2\x82";  // two of the three bytes of "€"
  const std::string text = json_text({{"token", half}});
  EXPECT_EQ(Json::parse(text)["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(sse_data({{"k", "v"}}), "data: {\"k\":\"v\"}\n\n");
  EXPECT_EQ(sse_event("ping", {{"type", "ping"}}), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
}

}  // namespace
}  // namespace rowlm::server
