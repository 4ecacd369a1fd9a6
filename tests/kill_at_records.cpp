// A fault for the tests, from outside the program: preloaded into memfine (LD_PRELOAD), it kills the
// process with SIGKILL, as an out-of-memory killer or a lost node would, the moment a records file
// holds a given number of lines on disk. memfine itself has no hook for it. The environment says
// which file (MEMFINE_TEST_KILL_FILE, a file name such as train.jsonl) and when
// (MEMFINE_TEST_KILL_AT_LINES); cli_testing.h's killed_at_records() sets both.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Whole lines in the file at `path`.
long lines_in(const char* path) {
  const int fd = ::open(path, O_RDONLY);
  if (fd < 0) return 0;
  long lines = 0;
  char buf[1 << 16];
  for (ssize_t got; (got = ::read(fd, buf, sizeof buf)) > 0;)
    for (ssize_t i = 0; i < got; ++i) lines += buf[i] == '\n';
  ::close(fd);
  return lines;
}

}  // namespace

// Every record is written, then fsync'ed before the run goes on (core/record/results.cpp): the
// fsync of the records file is the moment a record is durable.
extern "C" int fsync(int fd) {
  using Fsync = int (*)(int);
  static const Fsync real = reinterpret_cast<Fsync>(dlsym(RTLD_NEXT, "fsync"));
  const int rc = real(fd);
  const char* name = std::getenv("MEMFINE_TEST_KILL_FILE");
  const char* at = std::getenv("MEMFINE_TEST_KILL_AT_LINES");
  if (rc != 0 || !name || !at) return rc;
  char link[64], path[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, path, sizeof path - 1);
  if (n <= 0) return rc;
  path[n] = '\0';
  const char* base = std::strrchr(path, '/');
  if (std::strcmp(base ? base + 1 : path, name) == 0 && lines_in(path) >= std::atol(at)) ::raise(SIGKILL);
  return rc;
}
