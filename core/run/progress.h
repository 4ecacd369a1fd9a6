// The progress bar of `memfine run`: steps done, elapsed, time left, on stderr (a line every 5 s
// when stderr is not a terminal).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/meter/timer.h"

namespace memfine {

class Progress {
 public:
  Progress(int64_t total, bool on) : total_(total), on_(on && total > 0), tty_(isatty(2)) {}
  void tick(const std::string& what) {
    ++done_;
    if (!on_) return;
    const double el = timer_.elapsed_ms() / 1e3;
    const double left = done_ > 0 ? el / double(done_) * double(total_ - done_) : 0;
    const int width = 30, fill = int(double(width) * double(done_) / double(total_));
    char line[256];
    std::snprintf(line, sizeof line, "[%s%s] %lld/%lld steps  elapsed %s  left ~%s  %s",
                  std::string(size_t(fill), '#').c_str(), std::string(size_t(width - fill), '.').c_str(),
                  (long long)done_, (long long)total_, clock(el).c_str(), clock(left).c_str(), what.c_str());
    if (tty_) {
      std::fprintf(stderr, "\r%-120s", line);
      if (done_ == total_) std::fprintf(stderr, "\n");
    } else if (done_ == total_ || timer_.elapsed_ms() - last_ > 5000) {
      std::fprintf(stderr, "%s\n", line);
      last_ = timer_.elapsed_ms();
    }
  }

 private:
  static std::string clock(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%02d:%02d", int(s) / 60, int(s) % 60);
    return b;
  }
  int64_t total_, done_ = 0;
  bool on_, tty_;
  double last_ = -1e9;
  Timer timer_;
};

}  // namespace memfine
