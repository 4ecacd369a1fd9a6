#include "core/record/results.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/record/schema.h"

namespace memfine {

namespace fs = std::filesystem;

namespace {
// Throws unless `path` is a regular file, with why.
void check_results_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    throw std::runtime_error(path + ": cannot read results file: " + (ec ? ec.message() : "no such file"));
  if (fs::is_directory(st)) throw std::runtime_error(path + ": a folder, not a results file");
  if (!fs::is_regular_file(st))
    throw std::runtime_error(path + ": not a regular file (a FIFO, socket or device): not read");
}
}  // namespace

std::vector<json> read_results(const std::string& path) {
  check_results_file(path);
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read results file: " + std::strerror(errno));
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
      if (!out.back().is_object() || !out.back().contains(key) || !out.back()[key].is_string())
        throw std::runtime_error(path + ":" + std::to_string(n) + ": record has no string '" + key + "'");
    view_of(out.back(), path + ":" + std::to_string(n));  // each field of its type, numbers results
  }
  return out;
}

namespace {

std::string os_reason() { return std::strerror(errno); }

// Writes all of `data` to `fd`, retrying short writes; false with errno set on failure.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = ENOSPC;
      return false;
    }
    data += n, size -= size_t(n);
  }
  return true;
}

}  // namespace

void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error(tmp + ": cannot create: " + os_reason() + " (" + path + " was not changed)");
  if (!write_all(fd, text.data(), text.size()) || ::fsync(fd) != 0) {
    const std::string why = os_reason();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(tmp + ": cannot write: " + why + " (" + path + " was not changed)");
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = os_reason();
    ::unlink(tmp.c_str());
    throw std::runtime_error(path + ": cannot replace: " + why + " (it was not changed)");
  }
}

ResultsFile::ResultsFile(const std::string& dir, bool resume, bool writer, const std::string& file) : writer_(writer) {
  if (dir.empty()) throw std::runtime_error("the results folder is empty: give --out a folder");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot make the results folder: " + ec.message());
  if (!fs::is_directory(dir)) throw std::runtime_error(dir + ": not a folder");
  path_ = (fs::path(dir) / file).string();
  if (writer_) lock(dir);
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    // A symbolic link would be replaced by a regular file on repair, a FIFO would block the reader.
    if (S_ISLNK(st.st_mode))
      throw std::runtime_error(path_ + " is a symbolic link: give --out the folder of the real file");
    if (!S_ISREG(st.st_mode)) throw std::runtime_error(path_ + " is not a regular file");
  }
  if (writer_) {
    // Found now, not after the first point was measured.
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) throw std::runtime_error(path_ + ": cannot write: " + os_reason());
    ::close(fd);
    ::unlink((path_ + ".tmp").c_str());  // a stray one from a run that died while repairing
  }
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
  // Every complete line must parse; an unterminated last line after good records is what a kill
  // leaves behind. Anything else is refused with the file untouched.
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
    ok = ok && rec.is_object();
    for (const char* key : {"point", "strategy", "status"}) ok = ok && rec.contains(key) && rec[key].is_string();
    if (!ok) {
      if (!complete && !records_.empty()) {
        repaired_ = path_ + ":" + std::to_string(lineno) + ": dropped a torn last record (" +
                    std::to_string(line.size()) + " bytes, from an interrupted run); that point runs again";
        break;
      }
      throw std::runtime_error(path_ + ":" + std::to_string(lineno) +
                               ": not a results record; fix or remove the line (nothing was changed)");
    }
    if (!complete) {  // a whole record missing only its newline: keep it, end the line
      text += "\n";
      good_end = text.size();
    } else {
      good_end = nl + 1;
    }
    mark_done(rec);
    records_.push_back(std::move(rec));
    pos = complete ? nl + 1 : text.size();
  }
  if (writer_ && (good_end != text.size() || text.size() != size_t(fs::file_size(path_))))
    replace_file(path_, text.substr(0, good_end));
}

ResultsFile::~ResultsFile() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

// One run per results folder: an exclusive lock on DIR/.memfine.lock for the whole run, with the
// holder's pid in it, so that a second run fails at once saying who holds it.
void ResultsFile::lock(const std::string& dir) {
  const std::string lock_path = (fs::path(dir) / ".memfine.lock").string();
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw std::runtime_error(lock_path + ": cannot open: " + os_reason());
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    const ssize_t n = ::pread(lock_fd_, buf, sizeof buf - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw std::runtime_error(dir + " is in use by another run (pid " +
                             (n > 0 ? std::string(buf, size_t(n)) : "unknown") +
                             "); wait for it, or --out another folder");
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    // The lock holds without the pid; only the message of a second run loses it.
  }
}

void ResultsFile::update_records(const std::function<void(json&)>& edit) {
  done_.clear();
  for (auto& r : records_) {
    edit(r);
    mark_done(r);
  }
}

bool ResultsFile::has(const std::string& point, const std::string& strategy, int64_t step) const {
  return done_.count({point, strategy, step}) > 0;
}

void ResultsFile::mark_done(const json& r) {
  const int64_t step = r.contains("step") && r["step"].is_number_integer() ? r["step"].get<int64_t>() : -1;
  done_.insert({r["point"].get<std::string>(), r["strategy"].get<std::string>(), step});
}

void ResultsFile::append(const json& record) {
  std::string line;
  try {
    line = record.dump() + "\n";
  } catch (const json::exception& e) {
    throw std::runtime_error(path_ + ": cannot write a record: " + e.what());
  }
  // One write() of the whole line with O_APPEND, then fsync: the line is on disk before we go on.
  // A write that fails part way (a full disk) is cut back off, so no torn line stays behind.
  int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) throw std::runtime_error(path_ + ": cannot open for appending: " + os_reason());
  struct stat st {};
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  if (!write_all(fd, line.data(), line.size()) || ::fsync(fd) != 0) {
    const std::string why = os_reason();
    if (before >= 0 && ::ftruncate(fd, before) == 0) ::fsync(fd);
    ::close(fd);
    throw std::runtime_error(path_ + ": cannot write a record: " + why + " (the records before it are kept)");
  }
  ::close(fd);
  mark_done(record);
  records_.push_back(record);
}

}  // namespace memfine
