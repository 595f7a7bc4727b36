#include "io/safetensors.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"
#include "io/temp_dir.h"
#include "io/tensor_test_util.h"

namespace rowlm {
namespace {

using json = nlohmann::json;

constexpr DType kAllDtypes[] = {DType::F32, DType::BF16, DType::F16, DType::U32, DType::I32, DType::U8, DType::I64};

using tensor_testing::random_tensor;
using tensor_testing::same_bytes;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A safetensors image: the 8-byte length, `header` as given, then `data`.
std::string image(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

SafetensorsFile parse_image(const std::string& bytes) {
  auto owner = std::make_shared<const std::string>(bytes);
  return SafetensorsFile::parse(std::as_bytes(std::span(owner->data(), owner->size())), owner, "mem.safetensors");
}

// The message of the rowlm::Error that parsing `bytes` throws ("" if none).
std::string parse_error(const std::string& bytes) {
  try {
    parse_image(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripPreservesTensorsAndMetadata) {
  TempDir dir;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    NamedTensors tensors;
    const int count = int(rng() % 8);
    for (int i = 0; i < count; ++i) {
      Shape shape(rng() % 4);
      for (auto& d : shape) d = int64_t(rng() % 6);  // zero-size dims included
      tensors.emplace_back("t" + std::to_string(i) + ".weight", random_tensor(kAllDtypes[rng() % 7], shape, rng));
    }
    std::map<std::string, std::string> metadata;
    if (trial % 2) metadata = {{"format", "pt"}, {"note", "trial " + std::to_string(trial)}};
    const std::string path = dir.file("rt" + std::to_string(trial) + ".safetensors");
    write_safetensors(path, tensors, metadata);

    const SafetensorsFile file = SafetensorsFile::open(path);
    ASSERT_EQ(file.size(), tensors.size());
    EXPECT_EQ(file.metadata(), metadata);
    for (const auto& [name, expected] : tensors) {
      ASSERT_TRUE(file.contains(name)) << name;
      const Tensor got = file.tensor(name);
      EXPECT_TRUE(same_bytes(got, expected)) << name;
      // A view, not a copy: asking twice gives the same bytes in the mapping.
      if (got.nbytes()) {
        EXPECT_EQ(got.raw(), file.tensor(name).raw()) << name;
      }
      EXPECT_EQ(reinterpret_cast<uintptr_t>(got.raw()) % dtype_size(got.dtype()), 0u) << name;
    }
  }
}

// The layout the reference implementation insists on, read independently.
TEST(Safetensors, WriterProducesReferenceLayout) {
  TempDir dir;
  std::mt19937 rng(11);
  NamedTensors tensors = {{"a", random_tensor(DType::U8, {3}, rng)},
                          {"b", random_tensor(DType::F32, {2, 3}, rng)},
                          {"c", random_tensor(DType::BF16, {5}, rng)},
                          {"d", random_tensor(DType::I64, {1}, rng)}};
  const std::string path = dir.file("layout.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}});
  const std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const json header = json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    const DType dtype = name == "a" ? DType::U8 : name == "b" ? DType::F32 : name == "c" ? DType::BF16 : DType::I64;
    EXPECT_EQ(begin % dtype_size(dtype), 0u) << name;
    ranges.emplace_back(begin, end);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t expect = 0;
  for (const auto& [b, e] : ranges) {
    EXPECT_EQ(b, expect);  // no gaps, no overlaps
    expect = e;
  }
  EXPECT_EQ(8 + n + expect, bytes.size());
}

TEST(Safetensors, WriterRefusesDuplicateAndReservedNames) {
  TempDir dir;
  Tensor t(DType::F32, {1});
  EXPECT_THROW(write_safetensors(dir.file("x.safetensors"), {{"a", t}, {"a", t}}), Error);
  EXPECT_THROW(write_safetensors(dir.file("x.safetensors"), {{"__metadata__", t}}), Error);
}

struct BadFile {
  const char* what;
  std::string bytes;
  std::vector<std::string> message_has;
};

TEST(Safetensors, RejectsMalformedFilesWithNamedErrors) {
  const std::string f32x2(8, '\0');
  const std::vector<BadFile> cases = {
      {"empty file", "", {"too short"}},
      {"7 bytes", std::string(7, '\0'), {"too short"}},
      {"header length past the end", image("{}").substr(0, 9), {"runs past the end"}},
      {"absurd header length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", {"not plausible"}},
      {"header not JSON", image("{\"a\": "), {"not valid JSON"}},
      {"header not UTF-8 JSON", image("\xff\xfe{}"), {"not valid JSON"}},
      {"header an array", image("[1, 2]"), {"not a JSON object"}},
      {"entry not an object", image(R"({"w": 3})"), {"'w'", "not an object"}},
      {"missing dtype", image(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", f32x2), {"'w'", "missing dtype"}},
      {"missing shape", image(R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", f32x2), {"'w'", "missing shape"}},
      {"missing offsets", image(R"({"w": {"dtype": "F32", "shape": [2]}})", f32x2), {"'w'", "missing data_offsets"}},
      {"dtype not a string", image(R"({"w": {"dtype": 1, "shape": [2], "data_offsets": [0, 8]}})", f32x2),
       {"'w'", "dtype is not a string"}},
      {"unknown dtype", image(R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", f32x2),
       {"'w'", "unsupported dtype 'F64'"}},
      {"negative dim", image(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", f32x2),
       {"'w'", "not a non-negative integer"}},
      {"fractional dim", image(R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", f32x2),
       {"'w'", "not a non-negative integer"}},
      {"shape not an array", image(R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", f32x2),
       {"'w'", "shape is not an array"}},
      {"size mismatch", image(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", f32x2),
       {"'w'", "needs 12 bytes", "span 8"}},
      {"overflowing shape",
       image(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 8]}})", f32x2),
       {"'w'", "more bytes than the file holds"}},
      {"offsets reversed", image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", f32x2),
       {"'w'", "reversed"}},
      {"offsets past the data", image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", f32x2),
       {"'w'", "run past the data region"}},
      {"negative offset", image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-1, 7]}})", f32x2),
       {"'w'", "not non-negative integers"}},
      {"three offsets", image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}})", f32x2),
       {"'w'", "not a pair"}},
      {"overlap",
       image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                 "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
             f32x2),
       {"'b'", "overlaps tensor 'a'"}},
      {"duplicate name",
       image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                 "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
             f32x2),
       {"'a'", "listed twice"}},
      {"metadata not strings", image(R"({"__metadata__": {"format": 1}})"), {"__metadata__", "'format'"}},
      {"metadata not an object", image(R"({"__metadata__": [1]})"), {"__metadata__"}},
  };
  for (const BadFile& c : cases) {
    const std::string message = parse_error(c.bytes);
    ASSERT_FALSE(message.empty()) << c.what << ": accepted";
    EXPECT_NE(message.find("mem.safetensors"), std::string::npos) << c.what << ": " << message;
    for (const std::string& part : c.message_has) {
      EXPECT_NE(message.find(part), std::string::npos) << c.what << ": '" << message << "' lacks '" << part << "'";
    }
  }
}

TEST(Safetensors, AcceptsWhatTheFormatAllows) {
  // Header padding spaces, null metadata, a scalar, an empty tensor, gaps and
  // trailing bytes in the data region, and tensors listed out of order.
  const auto file = parse_image(image(R"({"__metadata__": null,
      "s": {"dtype": "F32", "shape": [], "data_offsets": [8, 12]},
      "e": {"dtype": "BF16", "shape": [0, 3], "data_offsets": [12, 12]},
      "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}      )",
                                      std::string("\x01\x02\0\0\0\0\0\0\0\0\x80\x3f\0\0\0\0", 16)));
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "e", "s"}));
  EXPECT_EQ(file.tensor("s").data<float>()[0], 1.0f);
  EXPECT_EQ(file.tensor("s").rank(), 0);
  EXPECT_EQ(file.tensor("e").numel(), 0);
  EXPECT_EQ(file.tensor("a").data<uint8_t>()[1], 2);
  try {
    file.tensor("missing");
    ADD_FAILURE() << "missing tensor returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mem.safetensors: no tensor named 'missing'"), std::string::npos);
  }
}

TEST(Safetensors, MisalignedDataIsCopiedNotViewed) {
  // A 9-byte header puts the data at an odd address relative to the buffer.
  const std::string data("\0\0\x80\x3f\0\0\0\x40", 8);  // 1.0f, 2.0f
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes = image(header + " ", data);
  ASSERT_NE((8 + header.size() + 1) % 4, 0u);
  const auto file = parse_image(bytes);
  const Tensor w = file.tensor("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.raw()) % 4, 0u);
  EXPECT_EQ(w.data<float>()[0], 1.0f);
  EXPECT_EQ(w.data<float>()[1], 2.0f);
}

TEST(Safetensors, DeeplyNestedHeaderIsAnErrorNotACrash) {
  const int depth = 200000;
  const std::string nested = std::string(depth, '[') + std::string(depth, ']');
  EXPECT_NE(parse_error(image(nested)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(parse_error(image("{\"w\": " + nested + "}")).find("'w'"), std::string::npos);
}

// Fuzz: damage a valid file in many ways. Each result must be either a
// rowlm::Error or a file whose every tensor lies inside the buffer.
TEST(Safetensors, DamagedFilesNeverEscapeTheBuffer) {
  std::mt19937 rng(1234);
  TempDir dir;
  const std::string path = dir.file("base.safetensors");
  write_safetensors(path,
                    {{"a", random_tensor(DType::F32, {3, 4}, rng)},
                     {"b", random_tensor(DType::BF16, {5}, rng)},
                     {"c", random_tensor(DType::I64, {2}, rng)},
                     {"d", random_tensor(DType::U8, {7}, rng)}},
                    {{"format", "pt"}});
  const std::string base = read_file(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(base[i]);
  const std::string header = base.substr(8, header_len), data = base.substr(8 + header_len);
  const std::vector<std::string> numbers = {"0", "1", "-1", "7", "4096", "9223372036854775807",
                                            "18446744073709551615", "18446744073709551616", "1e3", "2.5", "null"};
  const std::vector<std::string> dtypes = {"\"F32\"", "\"BF16\"", "\"I64\"", "\"U8\"", "\"F64\"", "\"\"", "3"};

  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes;
    switch (iter % 4) {
      case 0: {  // random byte damage anywhere
        bytes = base;
        for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) bytes[rng() % bytes.size()] = char(rng());
        break;
      }
      case 1:  // truncation
        bytes = base.substr(0, rng() % base.size());
        break;
      case 2: {  // a number in the header replaced; length prefix kept right
        std::string h = header;
        std::vector<std::size_t> starts;
        for (std::size_t i = 0; i < h.size(); ++i) {
          if (std::isdigit(uint8_t(h[i])) && (i == 0 || !std::isdigit(uint8_t(h[i - 1])))) starts.push_back(i);
        }
        for (int k = 0, n = 1 + int(rng() % 3); k < n && !starts.empty(); ++k) {
          const std::size_t at = starts[rng() % starts.size()];
          std::size_t end = at;
          while (end < h.size() && std::isdigit(uint8_t(h[end]))) ++end;
          h.replace(at, end - at, numbers[rng() % numbers.size()]);
          starts.clear();
          for (std::size_t i = 0; i < h.size(); ++i) {
            if (std::isdigit(uint8_t(h[i])) && (i == 0 || !std::isdigit(uint8_t(h[i - 1])))) starts.push_back(i);
          }
        }
        bytes = image(h, data);
        break;
      }
      default: {  // a dtype swapped
        std::string h = header;
        const std::size_t at = h.find("\"dtype\":", rng() % h.size());
        if (at != std::string::npos) {
          const std::size_t v = at + 8, end = h.find(',', v);
          h.replace(v, end - v, dtypes[rng() % dtypes.size()]);
        }
        bytes = image(h, data);
        break;
      }
    }
    auto owner = std::make_shared<const std::string>(bytes);
    const auto* lo = reinterpret_cast<const std::byte*>(owner->data());
    const auto* hi = lo + owner->size();
    try {
      const auto file = SafetensorsFile::parse(std::as_bytes(std::span(owner->data(), owner->size())), owner, "fuzz");
      for (const std::string& name : file.names()) {
        const SafetensorsEntry* e = file.find(name);
        ASSERT_EQ(e->end - e->begin, std::size_t(shape_numel(e->shape)) * dtype_size(e->dtype));
        const Tensor t = file.tensor(name);
        const auto* p = static_cast<const std::byte*>(t.raw());
        if (p >= lo && p <= hi) {  // a view: it must end inside the buffer
          EXPECT_LE(p + t.nbytes(), hi) << name;
        }
      }
      ++accepted;
    } catch (const Error&) {
      ++rejected;
    }
  }
  // Both outcomes occur, so the damage reached the validation paths.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(rejected, 500);
}

TEST(MappedFile, ErrorsNameThePath) {
  TempDir dir;
  try {
    MappedFile::open(dir.file("absent.safetensors"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.safetensors"), std::string::npos);
  }
  EXPECT_THROW(MappedFile::open(dir.path()), Error);
  // A FIFO named like a weights file is refused at once (no writer needed).
  ASSERT_EQ(::mkfifo(dir.file("model.safetensors").c_str(), 0600), 0);
  try {
    SafetensorsFile::open(dir.file("model.safetensors"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors is not a regular file"), std::string::npos) << e.what();
  }
  std::ofstream(dir.file("empty")).close();
  EXPECT_EQ(MappedFile::open(dir.file("empty"))->size(), 0u);
  EXPECT_NE(parse_error(""), "");
  try {
    SafetensorsFile::open(dir.file("empty"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty: too short"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rowlm
