#include "core/record/table.h"

#include <algorithm>

namespace memfine {

size_t columns(const std::string& s) {
  return size_t(std::count_if(s.begin(), s.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; }));
}

std::string text(const Grid& g) {
  std::vector<size_t> w(g.header.size(), 0);
  for (size_t c = 0; c < g.header.size(); ++c) w[c] = columns(g.header[c]);
  for (size_t c = 0; c < g.units.size() && c < w.size(); ++c) w[c] = std::max(w[c], columns(g.units[c]));
  for (const auto& row : g.rows)
    for (size_t c = 0; c < row.size() && c < w.size(); ++c) w[c] = std::max(w[c], columns(row[c]));
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < w.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(w[c] - std::min(w[c], columns(cell)), ' ');
      const bool text_column = c < g.left || (g.last_left && c + 1 == w.size());
      s += (c ? " " : "") + (text_column ? cell + pad : pad + cell);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = g.title.empty() ? "" : g.title + "\n";
  const std::string head = line(g.header), units = g.units.empty() ? "" : line(g.units);
  out += head + units + std::string(std::max(columns(head), columns(units)) - 1, '-') + "\n";
  for (const auto& row : g.rows) out += line(row);
  for (const auto& n : g.notes) out += n + "\n";
  return out;
}

std::string markdown(const Grid& g) {
  auto esc = [](std::string s) {
    for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
    return s;
  };
  std::string out = g.title.empty() ? "" : g.title + "\n\n";
  out += "|";
  for (size_t c = 0; c < g.header.size(); ++c)
    out +=
        " " + esc(g.header[c]) + (c < g.units.size() && !g.units[c].empty() ? " (" + esc(g.units[c]) + ")" : "") + " |";
  out += "\n|";
  for (size_t c = 0; c < g.header.size(); ++c)
    out += c < g.left || (g.last_left && c + 1 == g.header.size()) ? "---|" : "---:|";
  out += "\n";
  for (const auto& row : g.rows) {
    out += "|";
    for (const auto& cell : row) out += " " + esc(cell) + " |";
    out += "\n";
  }
  if (!g.notes.empty()) out += "\n";
  for (const auto& n : g.notes) out += n + "\n\n";
  return out;
}

}  // namespace memfine
