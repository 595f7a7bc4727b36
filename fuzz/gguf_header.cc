// A GGUF image of any bytes: a rowlm::Error, or a file whose every tensor's
// bytes lie inside the image, after its header (checked here against the
// image's own bounds), with whole blocks for the elements it claims, and
// whose typed metadata reads back without throwing anything but an Error.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto owner = std::make_shared<const std::string>(reinterpret_cast<const char*>(data), size);
  const auto* begin = reinterpret_cast<const std::byte*>(owner->data());
  try {
    const auto file =
        rowlm::gguf::File::parse(std::as_bytes(std::span(owner->data(), owner->size())), owner, "fuzz.gguf");
    if (size < 24) std::abort();  // magic, version and the two counts
    for (const auto& t : file.tensors()) {
      if (t.bytes.data() < begin + 24 || t.bytes.data() + t.bytes.size() > begin + size) std::abort();
      if (file.find_tensor(t.name) != &t) std::abort();
      static_cast<void>(t.shape());
      static_cast<void>(t.numel());
    }
    for (const auto& [key, v] : file.metadata()) {
      try {  // every typed read of every key: a value or an Error
        static_cast<void>(file.get_string(key));
      } catch (const rowlm::Error&) {
      }
      try {
        static_cast<void>(file.get_floats(key));
      } catch (const rowlm::Error&) {
      }
    }
  } catch (const rowlm::Error&) {
  }
  return 0;
}
