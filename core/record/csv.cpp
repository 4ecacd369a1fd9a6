// Records as CSV: one row per record, its fields flattened to columns.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "core/record/table.h"

namespace memfine {

std::string records_csv(const std::vector<json>& records) {
  // Flat columns: nested objects by dotted key, lists and the rest as JSON text.
  std::vector<std::map<std::string, std::string>> rows;
  std::vector<std::string> order;
  std::set<std::string> seen;
  std::function<void(const json&, const std::string&, std::map<std::string, std::string>&)> flatten =
      [&](const json& j, const std::string& key, std::map<std::string, std::string>& row) {
        if (j.is_object()) {  // an empty one adds no column
          for (const auto& [k, v] : j.items()) flatten(v, key.empty() ? k : key + "." + k, row);
          return;
        }
        row[key] = j.is_string() ? j.get<std::string>() : j.is_null() ? "" : j.dump();
        if (seen.insert(key).second) order.push_back(key);
      };
  for (const auto& r : records) {
    rows.emplace_back();
    flatten(r, "", rows.back());
  }
  // The head first, in the records' order; then the rest by name (config and env last).
  const std::vector<std::string> head = {"experiment", "point", "strategy", "name",      "role",
                                         "status",     "error", "rank",     "world_size"};
  std::vector<std::string> cols;
  for (const auto& h : head)
    if (seen.count(h)) cols.push_back(h);
  std::vector<std::string> rest;
  for (const auto& k : order)
    if (std::find(head.begin(), head.end(), k) == head.end()) rest.push_back(k);
  std::stable_sort(rest.begin(), rest.end(), [](const std::string& a, const std::string& b) {
    auto late = [](const std::string& s) { return s.rfind("config.", 0) == 0 || s.rfind("env.", 0) == 0; };
    if (late(a) != late(b)) return !late(a);
    return a < b;
  });
  cols.insert(cols.end(), rest.begin(), rest.end());
  auto quote = [](const std::string& s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  std::string out;
  for (size_t c = 0; c < cols.size(); ++c) out += (c ? "," : "") + quote(cols[c]);
  out += "\n";
  for (const auto& row : rows) {
    for (size_t c = 0; c < cols.size(); ++c) {
      auto it = row.find(cols[c]);
      out += (c ? "," : "") + (it == row.end() ? std::string() : quote(it->second));
    }
    out += "\n";
  }
  return out;
}

}  // namespace memfine
