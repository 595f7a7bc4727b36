// rowlm tokenize / rowlm detokenize: text to token ids and back with a
// model's tokenizer.json, one string (--text / --ids) or a JSON-lines stream
// (--jsonl) at a time.

#include "cli/tokenize.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "engine/model_files.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::cli {

namespace {

using nlohmann::json;

// Strings may carry any bytes a user typed; tokens' text can be invalid
// UTF-8 only where the tokenizer's decoder lets it be, so replace rather
// than fail when printing.
std::string to_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool is_blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

json parse_line(const std::string& line, std::size_t number) {
  try {
    return json::parse(line);
  } catch (const json::parse_error& e) {
    throw Error("stdin line " + std::to_string(number) + ": invalid JSON (" + e.what() + ")");
  }
}

// A tokenizer.json, a model directory or a GGUF file.
Tokenizer tokenizer_at(const std::string& path) {
  auto tok = load_model_tokenizer(path);
  if (!tok) throw Error(path + " has no tokenizer");
  return std::move(*tok);
}

}  // namespace

int tokenize_command(const std::vector<std::string>& argv) {
  Args args("tokenize", "Prints the token ids of a text: {\"ids\":[...]}.");
  args.option("tokenizer", "PATH", "a tokenizer.json, a GGUF file, or a model directory (or ORG/REPO in the Hub cache) holding one")
      .option("text", "STR", "the text to tokenize")
      .flag("jsonl", "read one JSON string per line from stdin; print one JSON id array per line")
      .flag("no-special", "do not add the tokenizer's special tokens (e.g. <bos>)");
  if (!args.parse(argv)) return 0;
  const bool jsonl = args.flag_set("jsonl");
  if (jsonl == args.has("text")) throw Error("tokenize: give either --text or --jsonl");
  const Tokenizer tok = tokenizer_at(resolve_model(args.get("tokenizer"), false).dir);
  const bool add_special = !args.flag_set("no-special");
  if (!jsonl) {
    std::cout << to_json({{"ids", tok.encode(args.get("text"), add_special)}}) << "\n";
    return 0;
  }
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    if (is_blank(line)) continue;  // as rowlm batch does
    const json j = parse_line(line, number);
    if (!j.is_string())
      throw Error("stdin line " + std::to_string(number) + ": expected a JSON string, got " + j.type_name());
    std::cout << to_json(tok.encode(j.get<std::string>(), add_special)) << std::endl;
  }
  return 0;
}

int detokenize_command(const std::vector<std::string>& argv) {
  Args args("detokenize", "Prints the text of token ids: {\"text\":\"...\"}.");
  args.option("tokenizer", "PATH", "a tokenizer.json, a GGUF file, or a model directory (or ORG/REPO in the Hub cache) holding one")
      .option("ids", "LIST", "comma-separated token ids, e.g. 2,9259,1902")
      .flag("jsonl", "read one JSON id array per line from stdin; print one JSON string per line")
      .flag("skip-special", "leave out special tokens (e.g. <bos>)");
  if (!args.parse(argv)) return 0;
  const bool jsonl = args.flag_set("jsonl");
  if (jsonl == args.has("ids")) throw Error("detokenize: give either --ids or --jsonl");
  const Tokenizer tok = tokenizer_at(resolve_model(args.get("tokenizer"), false).dir);
  const bool skip = args.flag_set("skip-special");
  if (!jsonl) {
    const std::string list = args.get("ids");
    const std::vector<int32_t> ids = list.empty() ? std::vector<int32_t>{} : parse_int_list(list, "--ids");
    std::cout << to_json({{"text", tok.decode(ids, skip)}}) << "\n";
    return 0;
  }
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    if (is_blank(line)) continue;  // as rowlm batch does
    const json j = parse_line(line, number);
    const std::string where = "stdin line " + std::to_string(number);
    if (!j.is_array()) throw Error(where + ": expected a JSON array of token ids, got " + j.type_name());
    std::vector<int32_t> ids;
    for (const json& v : j) {
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
        throw Error(where + ": " + v.dump() + " is not a token id");
      ids.push_back(v.get<int32_t>());
    }
    try {
      std::cout << to_json(tok.decode(ids, skip)) << std::endl;
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
  }
  return 0;
}

}  // namespace rowlm::cli
