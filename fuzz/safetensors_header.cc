// A safetensors image of any bytes: a rowlm::Error, or a file whose every
// tensor lies inside the image's data region (checked here from the format:
// 8-byte little-endian header length, header, data) and can be viewed.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto owner = std::make_shared<const std::string>(reinterpret_cast<const char*>(data), size);
  try {
    const auto file = rowlm::SafetensorsFile::parse(std::as_bytes(std::span(owner->data(), owner->size())), owner,
                                                    "fuzz.safetensors");
    if (size < 8) std::abort();
    std::uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = header << 8 | data[i];
    if (header > size - 8) std::abort();
    const std::uint64_t region = size - 8 - header;
    for (const auto& name : file.names()) {
      const auto* entry = file.find(name);
      if (!entry || entry->begin > entry->end || entry->end > region) std::abort();
      static_cast<void>(file.tensor(name));
    }
  } catch (const rowlm::Error&) {
  }
  return 0;
}
