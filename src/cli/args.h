#pragma once
// Command-line parsing for rowlm's subcommands: declared options and
// positionals, generated --help, and errors that name the bad argument.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rowlm::cli {

class Args {
 public:
  Args(std::string command, std::string summary);

  // Declarations. `value_name` empty means a boolean flag.
  Args& positional(const std::string& name, const std::string& help, bool required = true);
  Args& option(const std::string& name, const std::string& value_name, const std::string& help,
               std::optional<std::string> default_value = std::nullopt);
  Args& flag(const std::string& name, const std::string& help);

  // Parses argv (without the program and command names). Returns false if
  // --help was given (the help text was printed). Throws rowlm::Error on
  // unknown options, missing values or missing positionals.
  bool parse(const std::vector<std::string>& argv);

  std::string help() const;

  bool has(const std::string& name) const;  // option given (or defaulted) / flag set
  std::string get(const std::string& name) const;
  std::optional<std::string> get_opt(const std::string& name) const;
  // Every value given for an option that may repeat (--stop a --stop b).
  std::vector<std::string> get_all(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  std::vector<int32_t> get_int_list(const std::string& name) const;  // "1,2,3"
  bool flag_set(const std::string& name) const;

 private:
  struct Spec {
    std::string name, value_name, help;
    std::optional<std::string> default_value;
    bool is_flag = false;
  };
  struct Pos {
    std::string name, help;
    bool required;
  };
  const Spec* find(const std::string& name) const;

  std::string command_, summary_;
  std::vector<Spec> options_;
  std::vector<Pos> positionals_;
  std::map<std::string, std::string> values_;          // the last value of each
  std::map<std::string, std::vector<std::string>> all_;  // every value given
};

// Parses an integer or a float with a message naming the option on failure.
int64_t parse_int(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);
std::vector<int32_t> parse_int_list(const std::string& text, const std::string& what);

}  // namespace rowlm::cli
