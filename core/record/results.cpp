#include "core/record/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace memfine {

namespace fs = std::filesystem;

std::vector<json> read_results(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read results file");
  std::vector<json> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(n) + ": not a JSON record (" + e.what() + ")");
    }
    for (const char* key : {"experiment", "point", "strategy", "status"})
      if (!out.back().contains(key))
        throw std::runtime_error(path + ":" + std::to_string(n) + ": record has no '" + key + "'");
  }
  return out;
}

ResultsFile::ResultsFile(const std::string& dir, bool resume) {
  fs::create_directories(dir);
  path_ = (fs::path(dir) / "results.jsonl").string();
  if (!fs::exists(path_)) return;
  std::string text;
  {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (text.empty()) return;
  if (!resume)
    throw std::runtime_error(path_ + " already holds results: pass --resume to continue it, or --out another folder");
  // Every complete line must parse; an unterminated last line is what a kill leaves behind.
  size_t pos = 0, good_end = 0;
  int lineno = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    ++lineno;
    const bool complete = nl != std::string::npos;
    const std::string line = text.substr(pos, complete ? nl - pos : std::string::npos);
    json rec;
    bool ok = true;
    try {
      rec = json::parse(line);
    } catch (const json::exception&) {
      ok = false;
    }
    if (!ok || !rec.contains("point") || !rec.contains("strategy")) {
      if (!complete) {
        repaired_ = path_ + ":" + std::to_string(lineno) + ": dropped a torn last record (" +
                    std::to_string(line.size()) + " bytes, from an interrupted run); that point runs again";
        break;
      }
      throw std::runtime_error(path_ + ":" + std::to_string(lineno) +
                               ": corrupt record; fix or remove the line (nothing was changed)");
    }
    if (!complete) {  // a whole record missing only its newline: keep it, end the line
      good_end = text.size();
      text += "\n";
    } else {
      good_end = nl + 1;
    }
    done_.insert({rec["point"].get<std::string>(), rec["strategy"].get<std::string>()});
    records_.push_back(std::move(rec));
    pos = complete ? nl + 1 : text.size();
  }
  if (good_end != fs::file_size(path_)) {
    // Rewrite through a temporary file, so a crash here cannot lose the good records.
    const std::string tmp = path_ + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(text.data(), std::streamsize(good_end));
    }
    fs::rename(tmp, path_);
  }
}

bool ResultsFile::has(const std::string& point, const std::string& strategy) const {
  return done_.count({point, strategy}) > 0;
}

void ResultsFile::append(const json& record) {
  const std::string line = record.dump() + "\n";
  // One write() of the whole line with O_APPEND, then fsync: the line is on disk before we go on.
  int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) throw std::runtime_error(path_ + ": cannot open for appending");
  ssize_t written = ::write(fd, line.data(), line.size());
  ::fsync(fd);
  ::close(fd);
  if (written != ssize_t(line.size())) throw std::runtime_error(path_ + ": short write");
  done_.insert({record["point"].get<std::string>(), record["strategy"].get<std::string>()});
  records_.push_back(record);
}

}  // namespace memfine
