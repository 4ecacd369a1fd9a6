// A command of the command line, declared once: its operands, its flags (name, value, range,
// help) and what it does. One parser reads every command's flags from its declaration, and the
// help and the overview are written from it, so a flag cannot be parsed one way and documented
// another.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace memfine::cli {

struct Flag {
  std::string name;   // "--out"
  std::string value;  // what follows it in the usage ("DIR"); empty: a switch
  std::string help;
  int values = 1;  // how many words follow it (compare's --strategies X Y: 2)
  // An integer flag: a whole decimal number in [lo, hi] ("1e3", "2x" and values past it refused).
  bool integer = false;
  int64_t lo = 0, hi = 0;
};

// What the parser read: operands in order, each flag's words (a switch: none) by name.
struct Args {
  std::vector<std::string> operands;
  std::map<std::string, std::vector<std::string>> flags;
  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
  std::string text(const std::string& flag, const std::string& fallback = "") const;
  int64_t integer(const std::string& flag, int64_t fallback) const;
};

struct Command {
  std::string name;
  std::string operands;  // the usage's operands ("FILE.yaml", "DIR...")
  std::string summary;   // the overview's line
  std::string about;     // the help's paragraphs; a last one "exit status: ..." goes after the flags
  std::vector<Flag> flags;
  size_t min_operands = 0, max_operands = 0;
  std::function<int(const Args&)> run;
};

// A command line that does not fit its declaration: exit 2 with the command's help.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Reads `words` against `c`'s flags: throws UsageError naming the word and what was expected.
Args parse(const Command& c, const std::vector<std::string>& words);

// `memfine <command> --help`: the usage line, the prose, the flags.
std::string help(const Command& c);

}  // namespace memfine::cli
