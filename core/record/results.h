// The one results writer: one JSON object per line, appended whole and flushed to disk, so a kill
// loses at most the point in flight. Reading back checks every line and repairs only a torn last
// line (what a kill leaves); any other damage is an error naming file and line.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace memfine {

using json = nlohmann::json;

class ResultsFile {
 public:
  // Opens DIR/results.jsonl. Without `resume`, a file that already holds records is refused
  // (std::runtime_error) so results are never overwritten. The `writer` (the one process that
  // appends) locks the folder for its lifetime (a second run is refused, naming the holder's pid),
  // checks that it can write before anything is measured, and repairs a torn last line; other
  // ranks only read.
  // `file`: the file's name in DIR (`memfine train` writes train.jsonl beside a run's results).
  ResultsFile(const std::string& dir, bool resume, bool writer = true, const std::string& file = "results.jsonl");
  ~ResultsFile();
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;
  const std::string& path() const { return path_; }
  // Training records are one per step: they are keyed by their "step" as well (-1: none).
  bool has(const std::string& point, const std::string& strategy, int64_t step = -1) const;
  void append(const json& record);
  const std::vector<json>& records() const { return records_; }
  // Edits every record read so far in memory (the file is not rewritten) and keys them anew:
  // labels written before they were canonical, read as today's.
  void update_records(const std::function<void(json&)>& edit);
  std::string repaired_note() const { return repaired_; }  // non-empty if a torn line was dropped

 private:
  void lock(const std::string& dir);
  bool writer_ = true;
  int lock_fd_ = -1;
  std::string path_, repaired_;
  std::vector<json> records_;
  std::set<std::tuple<std::string, std::string, int64_t>> done_;
  void mark_done(const json& record);
};

// Replaces `path` with `bytes` through a temporary file whose every write and fsync succeeded, then
// a rename: a kill or a full disk leaves the old file whole. Throws std::runtime_error naming it.
void replace_file(const std::string& path, const std::string& bytes);

// Reads a results file strictly (scripts and tests); throws naming file:line on a bad line, or why
// `path` is no results file (a folder, a FIFO that would block, a device).
std::vector<json> read_results(const std::string& path);

}  // namespace memfine
