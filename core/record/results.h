// The one results writer: one JSON object per line, appended whole and flushed to disk, so a kill
// loses at most the point in flight. Reading back checks every line and repairs only a torn last
// line (what a kill leaves); any other damage is an error naming file and line.
#pragma once
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <utility>
#include <vector>


namespace memfine {

using json = nlohmann::json;

class ResultsFile {
 public:
  // Opens DIR/results.jsonl. Without `resume`, a file that already holds records is refused
  // (std::runtime_error) so results are never overwritten.
  ResultsFile(const std::string& dir, bool resume);
  const std::string& path() const { return path_; }
  bool has(const std::string& point, const std::string& strategy) const;
  void append(const json& record);
  const std::vector<json>& records() const { return records_; }
  std::string repaired_note() const { return repaired_; }  // non-empty if a torn line was dropped

 private:
  std::string path_, repaired_;
  std::vector<json> records_;
  std::set<std::pair<std::string, std::string>> done_;
};

// Reads a results file strictly (scripts and tests); throws naming file:line on a bad line.
std::vector<json> read_results(const std::string& path);

}  // namespace memfine
