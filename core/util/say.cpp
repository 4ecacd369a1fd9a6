#include "core/util/say.h"

#include <unistd.h>

#include <cerrno>
#include <iostream>

namespace memfine {

void say(const std::string& line) {
  std::cerr.flush();  // whatever was written to std::cerr before comes first
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone: nothing else could say so
    done += static_cast<size_t>(n);
  }
}

}  // namespace memfine
