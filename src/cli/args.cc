#include "cli/args.h"

#include <charconv>
#include <iostream>

#include "core/error.h"

namespace rowlm::cli {

int64_t parse_int(const std::string& text, const std::string& what) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end)
    throw Error(what + ": expected an integer, got '" + text + "'");
  return v;
}

double parse_double(const std::string& text, const std::string& what) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end)
    throw Error(what + ": expected a number, got '" + text + "'");
  return v;
}

std::vector<int32_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int32_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const int64_t v = parse_int(item, what);
    if (v < INT32_MIN || v > INT32_MAX) throw Error(what + ": " + item + " is out of range");
    out.push_back(int32_t(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Args::Args(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

Args& Args::positional(const std::string& name, const std::string& help, bool required) {
  positionals_.push_back({name, help, required});
  return *this;
}

Args& Args::option(const std::string& name, const std::string& value_name, const std::string& help,
                   std::optional<std::string> default_value) {
  options_.push_back({name, value_name, help, std::move(default_value), false});
  return *this;
}

Args& Args::flag(const std::string& name, const std::string& help) {
  options_.push_back({name, "", help, std::nullopt, true});
  return *this;
}

const Args::Spec* Args::find(const std::string& name) const {
  for (const auto& s : options_)
    if (s.name == name) return &s;
  return nullptr;
}

bool Args::parse(const std::vector<std::string>& argv) {
  std::size_t next_positional = 0;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << help();
      return false;
    }
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string name = a.substr(2), value;
      bool inline_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
      const Spec* spec = find(name);
      if (!spec) throw Error(command_ + ": unknown option --" + name + " (see rowlm " + command_ + " --help)");
      if (spec->is_flag) {
        if (inline_value) throw Error(command_ + ": --" + name + " takes no value");
        values_[name] = "1";
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw Error(command_ + ": --" + name + " needs a value " + spec->value_name);
        value = argv[++i];
      }
      values_[name] = value;
      all_[name].push_back(value);
      continue;
    }
    if (next_positional >= positionals_.size())
      throw Error(command_ + ": unexpected argument '" + a + "' (see rowlm " + command_ + " --help)");
    values_[positionals_[next_positional++].name] = a;
  }
  for (std::size_t p = next_positional; p < positionals_.size(); ++p)
    if (positionals_[p].required)
      throw Error(command_ + ": missing " + positionals_[p].name + " (see rowlm " + command_ + " --help)");
  for (const auto& s : options_)
    if (s.default_value && !values_.count(s.name)) values_[s.name] = *s.default_value;
  return true;
}

std::string Args::help() const {
  std::string out = "usage: rowlm " + command_;
  for (const auto& p : positionals_) out += p.required ? " " + p.name : " [" + p.name + "]";
  if (!options_.empty()) out += " [options]";
  out += "\n\n" + summary_ + "\n";
  if (!positionals_.empty()) {
    out += "\narguments:\n";
    for (const auto& p : positionals_) out += "  " + p.name + "\n      " + p.help + "\n";
  }
  if (!options_.empty()) {
    out += "\noptions:\n";
    for (const auto& s : options_) {
      out += "  --" + s.name + (s.is_flag ? "" : " " + s.value_name) + "\n      " + s.help;
      if (s.default_value) out += " (default: " + *s.default_value + ")";
      out += "\n";
    }
  }
  return out;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  auto it = all_.find(name);
  return it == all_.end() ? std::vector<std::string>{} : it->second;
}

bool Args::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw Error(command_ + ": --" + name + " is required");
  return it->second;
}

std::optional<std::string> Args::get_opt(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

int64_t Args::get_int(const std::string& name) const { return parse_int(get(name), "--" + name); }
double Args::get_double(const std::string& name) const { return parse_double(get(name), "--" + name); }
std::vector<int32_t> Args::get_int_list(const std::string& name) const {
  return parse_int_list(get(name), "--" + name);
}
bool Args::flag_set(const std::string& name) const { return values_.count(name) > 0; }

}  // namespace rowlm::cli
