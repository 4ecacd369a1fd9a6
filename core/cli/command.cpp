#include "core/cli/command.h"

#include <algorithm>

namespace memfine::cli {

namespace {

bool whole_number(const std::string& text, int64_t lo, int64_t hi, int64_t& out) {
  if (text.empty() || text.size() > 19) return false;
  for (char ch : text)
    if (ch < '0' || ch > '9') return false;
  const long long v = std::stoll(text);
  if (v < lo || v > hi) return false;
  out = v;
  return true;
}

const Flag* find_flag(const Command& c, const std::string& name) {
  for (const auto& f : c.flags)
    if (f.name == name) return &f;
  return nullptr;
}

std::string flag_usage(const Flag& f) { return f.value.empty() ? f.name : f.name + " " + f.value; }

}  // namespace

std::string Args::text(const std::string& flag, const std::string& fallback) const {
  const auto it = flags.find(flag);
  return it == flags.end() || it->second.empty() ? fallback : it->second.front();
}

int64_t Args::integer(const std::string& flag, int64_t fallback) const {
  const auto it = flags.find(flag);
  return it == flags.end() || it->second.empty() ? fallback : std::stoll(it->second.front());
}

Args parse(const Command& c, const std::vector<std::string>& words) {
  Args a;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.size() < 2 || w[0] != '-') {
      a.operands.push_back(w);
      continue;
    }
    const Flag* f = find_flag(c, w);
    if (!f) throw UsageError("unknown option '" + w + "'");
    if (a.has(w) && f->value.empty()) continue;  // a switch said twice says it once
    if (a.has(w)) throw UsageError(w + " is given twice");
    std::vector<std::string>& got = a.flags[w];
    const int wanted = f->value.empty() ? 0 : f->values;
    for (int k = 0; k < wanted; ++k) {
      const std::string next = i + 1 < words.size() ? words[i + 1] : std::string();
      if (i + 1 >= words.size() || next.empty() || (next[0] == '-' && next.size() > 1 && !f->integer))
        throw UsageError(w + " needs " + f->value + (next.empty() ? "" : ", got '" + next + "'"));
      int64_t n = 0;
      if (f->integer && !whole_number(next, f->lo, f->hi, n))
        throw UsageError(w + " needs a whole number in [" + std::to_string(f->lo) + ", " + std::to_string(f->hi) +
                         "], got '" + next + "'");
      got.push_back(next);
      ++i;
    }
  }
  if (a.operands.size() < c.min_operands || a.operands.size() > c.max_operands) {
    const std::string what = c.operands.empty() ? "no operands" : c.operands;
    if (a.operands.size() > c.max_operands && c.max_operands > 0)
      throw UsageError(c.name + " takes " + what + ", got '" + a.operands[c.max_operands] + "' too");
    if (a.operands.size() > c.max_operands)
      throw UsageError(c.name + " takes no operands, got '" + a.operands[0] + "'");
    throw UsageError(c.name + " needs " + what);
  }
  return a;
}

std::string help(const Command& c) {
  // The usage line, wrapped under the command's name.
  const std::string head = "usage: memfine " + c.name + (c.operands.empty() ? "" : " " + c.operands);
  std::string usage = head;
  size_t line = usage.size();
  for (const auto& f : c.flags) {
    const std::string word = " [" + flag_usage(f) + "]";
    if (line + word.size() > 100) usage += "\n" + std::string(head.size(), ' '), line = head.size();
    usage += word, line += word.size();
  }
  // The prose, then the flags, then its exit status (a last paragraph "exit status: ...").
  const size_t exit_at = c.about.find("\nexit status:");
  const std::string prose = c.about.substr(0, exit_at == std::string::npos ? c.about.size() : exit_at + 1);
  std::string out = usage + "\n\n" + prose;
  if (!c.flags.empty()) {
    size_t width = 0;
    for (const auto& f : c.flags) width = std::max(width, flag_usage(f).size());
    out += "\n";
    for (const auto& f : c.flags) {
      const std::string u = flag_usage(f);
      out += "  " + u + std::string(width - u.size() + 2, ' ');
      // The help's own line breaks, each continued under the first.
      for (size_t at = 0, nl; at <= f.help.size(); at = nl + 1) {
        nl = f.help.find('\n', at);
        if (nl == std::string::npos) nl = f.help.size();
        if (at > 0) out += std::string(width + 4, ' ');
        out += f.help.substr(at, nl - at) + "\n";
      }
    }
  }
  if (exit_at != std::string::npos) out += c.about.substr(exit_at);
  return out;
}

}  // namespace memfine::cli
