// The tests' own temporary folder: one per test process, under the system's temporary folder,
// made at first use and removed with everything in it when the process exits, so that a test run
// leaves nothing behind (ctest runs every test as a process of its own, in parallel).
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace memfine::test_util {

inline const std::string& scratch_root() {
  struct Root {
    std::string path;
    Root() {
      std::string tmpl = ::testing::TempDir() + "/memfine-test-XXXXXX";
      if (!::mkdtemp(tmpl.data()))
        throw std::runtime_error("cannot make a temporary folder under " + ::testing::TempDir());
      path = tmpl;
    }
    ~Root() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Root root;
  return root.path;
}

}  // namespace memfine::test_util
