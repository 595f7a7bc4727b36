// rowlm batch: many requests through one continuous batch, from JSON lines.
// Requests join at their arrival_step, so a schedule is reproducible; each
// result is what the request would give alone.
//
// Nothing is lost: a bad line gets an error record and the others run; each
// result is written (and flushed) as its request finishes, so a killed run
// keeps what it finished and --resume continues it; the output file is not
// touched before the model has loaded.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/request_options.h"
#include "cli/runtime.h"
#include "core/error.h"

namespace rowlm::cli {

namespace {

using Json = nlohmann::json;

// One input line: a request to run, or why it cannot run.
struct Item {
  Json id;
  std::optional<BatchLine> line;
  std::string error;
  std::shared_ptr<RequestHandle> handle;
  bool written = false;
};

// The results: stdout, or a file opened at the first line written, never
// before (a wrong model path must not empty an existing file); appended to
// with --resume.
class ResultWriter {
 public:
  ResultWriter(std::string path, bool append) : path_(std::move(path)), append_(append) {}

  void write(const Json& line) {
    std::ostream& out = stream();
    out << line.dump() << "\n";
    out.flush();
    if (!out) throw Error("cannot write " + path_);
  }

 private:
  std::ostream& stream() {
    if (path_ == "-") return std::cout;
    if (!file_.is_open()) {
      file_.open(path_, append_ ? std::ios::app : std::ios::trunc);
      if (!file_) throw Error("cannot open " + path_ + " for writing");
    }
    return file_;
  }

  std::string path_;
  bool append_;
  std::ofstream file_;
};

// The ids of the results a previous run wrote to `path`. A last line that a
// kill cut short is removed first, so appended results start on a line of
// their own.
std::set<std::string> ids_already_done(const std::string& path) {
  std::set<std::string> done;
  std::ifstream in(path, std::ios::binary);
  if (!in) return done;  // nothing done yet
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const std::size_t complete = all.rfind('\n') == std::string::npos ? 0 : all.rfind('\n') + 1;
  in.close();
  if (complete < all.size()) std::filesystem::resize_file(path, complete);
  std::istringstream lines(all.substr(0, complete));
  for (std::string l; std::getline(lines, l);) {
    const Json j = Json::parse(l, nullptr, false);
    if (j.is_object() && j.contains("id")) done.insert(j["id"].dump());
  }
  return done;
}

std::vector<Item> read_items(const std::string& in_path) {
  std::ifstream file;
  if (in_path != "-") {
    file.open(in_path);
    if (!file) throw Error("cannot open " + in_path);
  }
  std::istream& in = in_path == "-" ? std::cin : file;
  std::vector<Item> items;
  std::string text;
  for (int n = 1; std::getline(in, text); ++n) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = (in_path == "-" ? std::string("stdin") : in_path) + " line " + std::to_string(n);
    Item item;
    item.id = n;  // the line number when no id is given
    const Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded()) {
      item.error = where + ": invalid JSON";
    } else {
      if (j.is_object() && j.contains("id") && !j["id"].is_null()) item.id = j["id"];
      try {
        item.line = parse_batch_line(j, where);
      } catch (const Error& e) {
        item.error = e.what();
      }
    }
    items.push_back(std::move(item));
  }
  return items;
}

Json error_line(const Item& item) {
  return {{"id", item.id}, {"finish_reason", "error"}, {"error", item.error}};
}

}  // namespace

int run_batch(const std::vector<std::string>& argv) {
  Args args("batch", "Runs every request of a JSON-lines file through one continuous batch and writes one JSON\n"
                     "result per request, with its id, as it finishes. Input fields: id, prompt (text) or ids,\n"
                     "max_tokens, temperature (default 1), top_p, top_k, min_p, seed, stop, logprobs,\n"
                     "presence_penalty, frequency_penalty, repetition_penalty, logit_bias, ignore_eos,\n"
                     "arrival_step (the engine step at which the request is submitted; default 0, at most\n"
                     "1000000), json_schema (a JSON Schema the output is held to: constrained decoding).\n"
                     "A bad line gets an error result and the others run.");
  add_model_argument(args)
      .option("input", "FILE", "requests, one JSON object per line ('-' = stdin)")
      .option("output", "FILE", "results, one JSON object per line ('-' = stdout)", "-")
      .flag("resume", "keep the results already in --output FILE and run only the requests whose id is not there");
  add_engine_options(args);
  if (!args.parse(argv)) return 0;

  const std::string out_path = args.get("output");
  const bool resume = args.flag_set("resume");
  if (resume && out_path == "-") throw Error("--resume needs --output FILE (the results to continue)");
  std::vector<Item> items = read_items(args.get("input"));
  std::size_t skipped = 0;
  if (resume) {
    const std::set<std::string> done = ids_already_done(out_path);
    std::erase_if(items, [&](const Item& item) { return done.count(item.id.dump()) > 0; });
    skipped = done.size();
  }

  EngineOptions opt = engine_options_from(args, model_source_from(args).dir, /*background=*/false);
  opt.max_waiting = std::max<int>(opt.max_waiting, int(items.size()));
  auto engine = open_engine(opt);  // before the output is touched
  ResultWriter out(out_path, resume);
  if (resume) std::fprintf(stderr, "resuming: %zu results already in %s\n", skipped, out_path.c_str());

  int64_t generated = 0, failed = 0;
  std::size_t written = 0;
  auto write_error = [&](Item& item) {
    std::fprintf(stderr, "%s\n", item.error.c_str());
    out.write(error_line(item));
    item.written = true;
    ++failed;
    ++written;
  };
  for (Item& item : items)
    if (!item.line) write_error(item);

  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  for (int64_t step = 0;; ++step) {
    std::size_t waiting = 0;
    int64_t next_arrival = -1;
    for (Item& item : items) {
      if (!item.line || item.handle || item.written) continue;
      if (item.line->arrival_step > step) {
        ++waiting;
        next_arrival = next_arrival < 0 ? item.line->arrival_step : std::min(next_arrival, item.line->arrival_step);
        continue;
      }
      try {
        item.handle = engine->submit(item.line->request);
      } catch (const Error& e) {
        item.error = e.what();  // reported in its output line; the others go on
        write_error(item);
      }
    }
    const bool more = engine->step();
    for (Item& item : items) {
      if (!item.handle || item.written || !item.handle->done()) continue;
      const RequestResult r = item.handle->result();
      Json line = {{"id", item.id}};
      line.update(result_json(r, item.line->request.sampling.logprobs.value_or(0) > 0));
      out.write(line);
      item.written = true;
      ++written;
      generated += r.usage.completion_tokens;
      failed += r.finish == FinishReason::Error;
    }
    if (!more && waiting == 0) break;
    // An idle engine's steps change nothing: go straight to the next arrival.
    if (!more && next_arrival > step + 1) step = next_arrival - 1;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(1)) {
      const auto s = engine->stats();
      std::fprintf(stderr, "step %lld: %zu/%zu done, %lld running, %lld waiting, %.1f tokens/s\n", (long long)step,
                   written, items.size(), (long long)s.running, (long long)s.waiting,
                   double(s.generated_tokens) / std::chrono::duration<double>(now - start).count());
      last_report = now;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "%zu requests (%lld failed), %lld tokens generated in %.2f s (%.1f tokens/s)\n", items.size(),
               (long long)failed, (long long)generated, secs, double(generated) / secs);
  if (const EngineStats s = engine->stats(); s.draft_proposed > 0)
    std::fprintf(stderr, "speculative decoding: %lld tokens drafted, %lld accepted (%.1f%%)\n",
                 (long long)s.draft_proposed, (long long)s.draft_accepted,
                 100.0 * double(s.draft_accepted) / double(s.draft_proposed));
  return failed ? 1 : 0;
}

}  // namespace rowlm::cli
