#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/temp_dir.h"
#include "io/tensor_test_util.h"

namespace rowlm {
namespace {

using tensor_testing::random_tensor;
using tensor_testing::same_bytes;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string error_of(const std::string& dir) {
  try {
    Checkpoint::open(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

NamedTensors some_tensors(std::mt19937& rng, int n) {
  NamedTensors out;
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::U32};
  for (int i = 0; i < n; ++i) {
    out.emplace_back("model.layers." + std::to_string(i) + ".w",
                     random_tensor(dtypes[i % 4], {int64_t(1 + rng() % 4), int64_t(1 + rng() % 5)}, rng));
  }
  return out;
}

// Writes `tensors` as shards (tensor i goes to shard i % shards) plus an index.
void write_sharded(const TempDir& dir, const NamedTensors& tensors, int shards) {
  std::string index = R"({"metadata": {"total_size": 0}, "weight_map": {)";
  std::vector<NamedTensors> parts(shards);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const int s = int(i) % shards;
    parts[s].push_back(tensors[i]);
    index += (i ? ", " : "") + std::string("\"") + tensors[i].first + "\": \"model-0000" + std::to_string(s + 1) +
             "-of-0000" + std::to_string(shards) + ".safetensors\"";
  }
  index += "}}";
  for (int s = 0; s < shards; ++s) {
    write_safetensors(dir.file("model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors"),
                      parts[s]);
  }
  write_text(dir.file("model.safetensors.index.json"), index);
}

void expect_holds_exactly(const Checkpoint& ck, const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) {
    names.push_back(name);
    ASSERT_TRUE(ck.contains(name)) << name;
    EXPECT_TRUE(same_bytes(ck.tensor(name), t)) << name;
    EXPECT_EQ(ck.find(name)->shape, t.shape());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(ck.names(), names);
}

TEST(Checkpoint, SingleShardedAndUnindexedLayoutsHoldTheSameTensors) {
  std::mt19937 rng(3);
  const NamedTensors tensors = some_tensors(rng, 9);
  {
    TempDir dir;
    write_safetensors(dir.file("model.safetensors"), tensors);
    const Checkpoint ck = Checkpoint::open(dir.path());
    expect_holds_exactly(ck, tensors);
    EXPECT_EQ(ck.listing(), dir.file("model.safetensors"));
  }
  {
    TempDir dir;
    write_sharded(dir, tensors, 3);
    const Checkpoint ck = Checkpoint::open(dir.path());
    expect_holds_exactly(ck, tensors);
    EXPECT_EQ(ck.listing(), dir.file("model.safetensors.index.json"));
    EXPECT_EQ(ck.file_of(tensors[4].first), dir.file("model-00002-of-00003.safetensors"));
    EXPECT_EQ(ck.file_of("absent"), ck.listing());
  }
  {
    TempDir dir;
    write_safetensors(dir.file("a.safetensors"), NamedTensors(tensors.begin(), tensors.begin() + 4));
    write_safetensors(dir.file("b.safetensors"), NamedTensors(tensors.begin() + 4, tensors.end()));
    expect_holds_exactly(Checkpoint::open(dir.path()), tensors);
  }
}

TEST(Checkpoint, SingleFileWinsOverAnIndex) {
  std::mt19937 rng(4);
  const NamedTensors tensors = some_tensors(rng, 2);
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), tensors);
  write_text(dir.file("model.safetensors.index.json"), "not json");
  expect_holds_exactly(Checkpoint::open(dir.path()), tensors);
}

TEST(Checkpoint, ViewsOutliveTheCheckpoint) {
  std::mt19937 rng(5);
  const NamedTensors tensors = some_tensors(rng, 4);
  TempDir dir;
  write_sharded(dir, tensors, 2);
  Tensor view;
  std::shared_ptr<const void> storage;
  {
    const Checkpoint ck = Checkpoint::open(dir.path());
    view = ck.tensor(tensors[1].first);
    storage = ck.storage();
  }
  EXPECT_TRUE(same_bytes(view, tensors[1].second));
  EXPECT_NE(storage, nullptr);
}

TEST(Checkpoint, BadIndexesGiveErrorsNamingTheProblem) {
  std::mt19937 rng(6);
  const NamedTensors tensors = some_tensors(rng, 2);
  struct Case {
    const char* what;
    std::string index;
    std::vector<std::string> message_has;
  };
  const std::vector<Case> cases = {
      {"bad JSON", "{\"weight_map\": ", {"not valid JSON"}},
      {"not an object", "[]", {"not a JSON object"}},
      {"no weight_map", "{\"metadata\": {}}", {"missing weight_map"}},
      {"weight_map not an object", "{\"weight_map\": []}", {"weight_map is not an object"}},
      {"entry not a string", R"({"weight_map": {"x": 3}})", {"'x'", "not a file name"}},
      {"escaping shard name", R"({"weight_map": {"x": "../model-1.safetensors"}})", {"'x'", "../model-1"}},
      {"missing shard", R"({"weight_map": {"x": "model-9.safetensors"}})", {"model-9.safetensors", "'x'", "missing"}},
      {"tensor absent from shard", R"({"weight_map": {"ghost": "shard.safetensors"}})",
       {"'ghost'", "shard.safetensors", "does not contain it"}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    write_safetensors(dir.file("shard.safetensors"), tensors);
    write_text(dir.file("model.safetensors.index.json"), c.index);
    const std::string message = error_of(dir.path());
    ASSERT_FALSE(message.empty()) << c.what;
    EXPECT_NE(message.find("model.safetensors.index.json"), std::string::npos) << c.what << ": " << message;
    for (const std::string& part : c.message_has) {
      EXPECT_NE(message.find(part), std::string::npos) << c.what << ": '" << message << "' lacks '" << part << "'";
    }
  }
}

TEST(Checkpoint, DirectoryProblemsAreErrors) {
  TempDir dir;
  EXPECT_NE(error_of(dir.path()).find("no model.safetensors"), std::string::npos);
  EXPECT_NE(error_of(dir.file("nope")).find("is not a directory"), std::string::npos);
  // A damaged shard names its own file.
  write_text(dir.file("model.safetensors"), "garbage");
  EXPECT_NE(error_of(dir.path()).find(dir.file("model.safetensors") + ": too short"), std::string::npos);

  std::mt19937 rng(8);
  TempDir twice;
  const NamedTensors tensors = some_tensors(rng, 2);
  write_safetensors(twice.file("a.safetensors"), tensors);
  write_safetensors(twice.file("b.safetensors"), tensors);
  EXPECT_NE(error_of(twice.path()).find("is in both"), std::string::npos);
}

TEST(Checkpoint, DetectsEachTextPrefix) {
  std::mt19937 rng(9);
  for (const std::string prefix : {"model.", "model.language_model.", "language_model.model."}) {
    TempDir dir;
    write_safetensors(dir.file("model.safetensors"),
                      {{prefix + "embed_tokens.weight", random_tensor(DType::BF16, {4, 2}, rng)},
                       {"model.vision_tower.patch.weight", random_tensor(DType::BF16, {2, 2}, rng)}});
    EXPECT_EQ(detect_text_prefix(Checkpoint::open(dir.path())), prefix);
  }
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), {{"transformer.wte.weight", random_tensor(DType::F32, {2}, rng)}});
  try {
    detect_text_prefix(Checkpoint::open(dir.path()));
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* tried : {"model.embed_tokens.weight", "model.language_model.embed_tokens.weight",
                              "language_model.model.embed_tokens.weight"}) {
      EXPECT_NE(message.find(tried), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace rowlm
