// tokenizer.json loading and encoding: any document is a rowlm::Error or a
// tokenizer; a tokenizer encodes any text (the input's tail after a 0xff
// byte) to ids inside its vocabulary, which decode without error.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const std::size_t cut = all.find('\xff');
  const std::string json = all.substr(0, cut);
  const std::string text = cut == std::string::npos ? "Hello, world! 123 \xe2\x82\xac" : all.substr(cut + 1);
  try {
    const rowlm::Tokenizer tok = rowlm::Tokenizer::from_json(json);
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(text, true);
    } catch (const rowlm::Error&) {
      return 0;  // e.g. text that is not UTF-8
    }
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    try {
      static_cast<void>(tok.decode(ids));
    } catch (const rowlm::Error&) {
      std::abort();  // ids it made itself are tokens
    }
  } catch (const rowlm::Error&) {
  }
  return 0;
}
