#include "core/dist/launch.h"

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "core/dist/dist.h"

extern char** environ;

namespace memfine {

std::unique_ptr<Dist> join_job(const std::string& device) {
  if (const char* launcher = std::getenv("MEMFINE_LAUNCHER")) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (std::to_string(::getppid()) != launcher)
      throw std::runtime_error("memfine launch ended before this rank started");
  }
  const char* t = std::getenv("MEMFINE_COLLECTIVE_TIMEOUT");
  const long timeout_s = t && std::atol(t) > 0 ? std::atol(t) : 60;
  return Dist::from_env(std::chrono::seconds(timeout_s), device);
}

int launch_experiment(const std::string& self, const LaunchPlace& place, const std::string& command,
                      const std::vector<std::string>& run_args) {
  const int nproc = place.nproc;
  const int port = place.master_port > 0 ? place.master_port : free_loopback_port();
  // One machine: the ranks meet through a file in a folder only this user can read (mkdtemp's
  // 0700), so that no rendezvous port is open at all; across machines rank 0's store listens at
  // the master address (core/dist/dist.h).
  std::string store_dir;
  if (place.nnodes == 1) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/memfine-launch-XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
      std::cerr << "memfine launch: cannot make a folder for the ranks' rendezvous in " << tmpl << ": "
                << std::strerror(errno) << "\n";
      return 1;
    }
    store_dir = tmpl;
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{store_dir};
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      bool ours = false;
      for (const char* k : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "MASTER_ADDR=", "MASTER_PORT=", "MEMFINE_LAUNCHER=",
                            "MEMFINE_STORE_FILE="})
        ours |= kv.rfind(k, 0) == 0;
      if (!ours) env.push_back(kv);
    }
    for (const std::string& kv : std::initializer_list<std::string>{
             "RANK=" + std::to_string(place.node_rank * nproc + r),
             "WORLD_SIZE=" + std::to_string(place.nnodes * nproc), "LOCAL_RANK=" + std::to_string(r),
             "MASTER_ADDR=" + place.master_addr, "MASTER_PORT=" + std::to_string(port),
             "MEMFINE_LAUNCHER=" + std::to_string(::getpid())})
      env.push_back(kv);
    if (!store_dir.empty()) env.push_back("MEMFINE_STORE_FILE=" + store_dir + "/store");
    std::vector<std::string> args = {self, command};
    args.insert(args.end(), run_args.begin(), run_args.end());
    if (r > 0 || place.node_rank > 0) args.push_back("--no-progress");
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) {
      std::cerr << "memfine launch: cannot start rank " << r << "\n";
      for (pid_t p : pids) ::kill(p, SIGTERM);
      return 1;
    }
    pids.push_back(pid);
  }
  // Wait for every rank; once one has failed, the others get a short grace to end on their own
  // (their collectives fail too) and are then killed: a hung rank cannot hold the job.
  constexpr auto kGrace = std::chrono::seconds(10);
  int worst = 0;
  std::string first_failure;
  std::chrono::steady_clock::time_point failed_at{};
  std::vector<bool> running(pids.size(), true);
  size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      const auto it = std::find(pids.begin(), pids.end(), pid);
      if (it == pids.end()) continue;
      const size_t rank = size_t(it - pids.begin());
      running[rank] = false, --left;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && first_failure.empty()) {
        first_failure = "rank " + std::to_string(place.node_rank * nproc + int(rank)) + " exited with status " +
                        std::to_string(code);
        failed_at = std::chrono::steady_clock::now();
      }
      worst = std::max(worst, code);
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (!first_failure.empty() && std::chrono::steady_clock::now() - failed_at > kGrace) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (running[r]) {
          std::cerr << "memfine launch: rank " << place.node_rank * nproc + int(r) << " still running "
                    << kGrace.count() << " s after " << first_failure << ": killing it\n";
          ::kill(pids[r], SIGKILL);
        }
      first_failure += " (the others were killed)";
      failed_at = std::chrono::steady_clock::time_point::max() - std::chrono::hours(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!first_failure.empty()) {
    std::cerr << "memfine launch: " << first_failure << "\n";
    return worst == 2 ? 2 : 1;
  }
  return 0;
}

}  // namespace memfine
