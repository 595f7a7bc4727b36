#include "tokenizer/post_processors.h"

namespace rowlm::tok {

namespace {

class Template final : public PostProcessor {
 public:
  // `single`: the template for one sequence, as ids to insert with -1
  // standing for the sequence itself.
  explicit Template(std::vector<int32_t> single) : single_(std::move(single)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<int32_t> out;
    out.reserve(ids.size() + single_.size());
    for (int32_t x : single_) {
      if (x < 0) out.insert(out.end(), ids.begin(), ids.end());
      else out.push_back(x);
    }
    ids = std::move(out);
  }

 private:
  std::vector<int32_t> single_;
};

class PassThrough final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&, bool) const override {}
};

class PostProcessorSequence final : public PostProcessor {
 public:
  explicit PostProcessorSequence(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& p : parts_) p->process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::unique_ptr<PostProcessor> make_template(const Json& j, const std::string& w) {
  const Json specials = j.value("special_tokens", Json::object());
  if (!specials.is_object()) throw Error(w + ": 'special_tokens' must be an object");
  const Json single = field<Json>(j, "single", w);
  if (!single.is_array()) throw Error(w + ": 'single' must be an array");
  std::vector<int32_t> ids;
  int sequences = 0;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const Json& item = single[i];
    const std::string iw = w + ".single[" + std::to_string(i) + "]";
    if (item.contains("Sequence")) {
      const auto name = field<std::string>(item["Sequence"], "id", iw + ".Sequence");
      if (name != "A") throw Error(iw + ": a single-sequence template can only use sequence A, not " + name);
      ids.push_back(-1);
      ++sequences;
    } else if (item.contains("SpecialToken")) {
      const auto name = field<std::string>(item["SpecialToken"], "id", iw + ".SpecialToken");
      auto it = specials.find(name);
      if (it == specials.end()) throw Error(iw + ": special token '" + name + "' is not in special_tokens");
      const auto token_ids = field<std::vector<int64_t>>(*it, "ids", w + ".special_tokens." + name);
      for (int64_t id : token_ids) {
        if (id < 0 || id > INT32_MAX) throw Error(w + ".special_tokens." + name + ": bad id " + std::to_string(id));
        ids.push_back(int32_t(id));
      }
    } else {
      throw Error(iw + ": expected a Sequence or a SpecialToken");
    }
  }
  if (sequences != 1) throw Error(w + ": 'single' must contain the sequence exactly once");
  return std::make_unique<Template>(std::move(ids));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, where);
  const std::string w = where + " (" + type + ")";
  if (type == "TemplateProcessing") return make_template(j, w);
  if (type == "ByteLevel") return std::make_unique<PassThrough>();
  if (type == "Sequence")
    return std::make_unique<PostProcessorSequence>(sequence_parts<PostProcessor>(
        j, "processors", where, w, [](const Json& e, const std::string& at) { return make_post_processor(e, at); }));
  throw Error(where + ": unsupported post_processor type '" + type +
              "' (rowlm supports TemplateProcessing, ByteLevel, Sequence)");
}

}  // namespace rowlm::tok
