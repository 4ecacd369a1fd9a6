// Expert parallelism across real ranks (c10d, Gloo): 2 and 4 processes on loopback give the same
// loss and gradients as one process computing the whole global batch.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "scratch.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/dist/dist.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"
#include "dist_config.h"
#include "testing.h"

extern char** environ;
using namespace memfine;

namespace {

// Starts `world` workers and waits for all of them (at most `limit`); returns their exit codes.
// They meet through a file store in a fresh folder, as `memfine launch` runs one machine: a port
// picked free and listened at later can be taken in between by another test's connection.
std::vector<int> run_ranks(int world, const std::vector<std::string>& args, std::chrono::seconds limit) {
  static int jobs = 0;
  const std::string meet = memfine::test_util::scratch_root() + "/rendezvous_" + std::to_string(jobs++);
  std::filesystem::remove_all(meet);
  std::filesystem::create_directories(meet);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env = {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
                                    "MASTER_ADDR=127.0.0.1",     "MEMFINE_STORE_FILE=" + meet + "/store",
                                    "OMP_NUM_THREADS=1",         "OMP_WAIT_POLICY=PASSIVE"};
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_s = {DIST_WORKER};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    EXPECT_EQ(posix_spawn(&pid, DIST_WORKER, nullptr, nullptr, argv.data(), envp.data()), 0);
    pids.push_back(pid);
  }
  std::vector<int> codes(size_t(world), -1);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t done = 0;
  while (done < pids.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -1) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i])
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128, ++done;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i)
    if (codes[i] == -1) kill(pids[i], SIGKILL), waitpid(pids[i], nullptr, 0), codes[i] = 124;
  std::filesystem::remove_all(meet);
  return codes;
}

std::vector<at::Tensor> read_rank(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<at::Tensor> out;
  int64_t n;
  while (in.read(reinterpret_cast<char*>(&n), sizeof n)) {
    at::Tensor t = at::empty({n}, at::kDouble);
    in.read(reinterpret_cast<char*>(t.data_ptr<double>()), std::streamsize(n * 8));
    out.push_back(t);
  }
  return out;
}

// kernels: how the ranks dispatch and combine ("aten" or "fused"); the reference always uses ATen.
// dtype: float64 (tolerance 1e-10) or float32 (1e-4: the ranks add in another order); `lossy`: a
// lossy strategy's tolerance instead (the rounding of the format it stores in).
void expect_same_as_one_process(int world, const std::string& strategy, const std::string& chunks,
                                const std::string& kernels = "aten", const std::string& dtype = "float64",
                                double lossy = 0) {
  const std::string dir =
      memfine::test_util::scratch_root() + "/dist_" + std::to_string(world) + "_" + strategy + chunks + kernels + dtype;
  std::filesystem::create_directories(dir);
  std::vector<std::string> args = {strategy, chunks, dir};
  if (kernels == "fused") args.push_back("fused");
  if (dtype == "float32") args.push_back("float32");
  const double tol = lossy > 0 ? lossy : dtype == "float32" ? 1e-4 : 1e-10;
  const auto codes = run_ranks(world, args, std::chrono::seconds(90));
  for (int r = 0; r < world; ++r) ASSERT_EQ(codes[size_t(r)], 0) << "rank " << r;
  // The reference: one process, the whole global batch, all experts.
  ExperimentConfig c = test_util::dist_config(world);
  c.dtype = dtype;
  auto ref = make_global_reference(c, true);
  auto s = make_strategy(test_util::spec("no_recompute"));
  const double loss = train_step(*ref, *s, 0, false);
  const auto& lw = ref->model.layers;
  const int64_t El = c.model.experts / world, T = c.model.tokens();
  for (int r = 0; r < world; ++r) {
    auto got = read_rank(dir + "/rank" + std::to_string(r) + ".bin");
    EXPECT_NEAR(got[0].item<double>(), loss, tol * std::abs(loss)) << "rank " << r;
    size_t i = 1;
    for (size_t l = 0; l < lw.size(); ++l) {
      for (const auto& p : lw[l].replicated())
        EXPECT_LT(test_util::rel_diff(got[i++], p.grad().reshape(-1)), tol) << "rank " << r << " layer " << l;
      for (const auto* experts : {&lw[l].w_in, &lw[l].w_out})
        for (int64_t e = 0; e < El; ++e)
          EXPECT_LT(test_util::rel_diff(got[i++], (*experts)[size_t(r * El + e)].grad().reshape(-1)), tol)
              << "rank " << r << " layer " << l << " expert " << r * El + e;
    }
    EXPECT_LT(test_util::rel_diff(got[i++], ref->model.final_norm.grad().reshape(-1)), tol);
    EXPECT_LT(test_util::rel_diff(got[i++], ref->input.grad().narrow(0, r * T, T).reshape(-1)), tol)
        << "input, rank " << r;
    ++i;  // the chunk counts
    // A strategy's own expert runs on real ranks too (the all-to-all path calls the same hook).
    if (strategy == "expert_probe") EXPECT_GT(got[i].item<double>(), 0) << "rank " << r << ": its expert never ran";
  }
}

}  // namespace

class RealRanks : public ::testing::TestWithParam<int> {};

TEST_P(RealRanks, NoRecompute) { expect_same_as_one_process(GetParam(), "no_recompute", "-"); }
TEST_P(RealRanks, FullRecompute) { expect_same_as_one_process(GetParam(), "full_recompute", "-"); }
TEST_P(RealRanks, MoeActRecompute) { expect_same_as_one_process(GetParam(), "moe_act_recompute", "-"); }
// MoEBlaze-style experts read the arrived rows in place, with the probabilities sent along.
TEST_P(RealRanks, MoeBlaze) {
  expect_same_as_one_process(GetParam(), "moeblaze", "-");
  expect_same_as_one_process(GetParam(), "moeblaze", "keep_act=true,block_rows=3");
  expect_same_as_one_process(GetParam(), "memfine", "chunks=2,experts=buffer_free");
  expect_same_as_one_process(GetParam(), "memfine", "chunks=2,experts=moe_act");
  expect_same_as_one_process(GetParam(), "moeblaze", "-", "aten", "float32");
  expect_same_as_one_process(GetParam(), "memfine", "chunks=2,experts=buffer_free", "aten", "float32");
}
// Offloading on real ranks: each rank's own groups, alone and composed.
TEST_P(RealRanks, Offload) {
  expect_same_as_one_process(
      GetParam(), "offload",
      "modules=[attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm,expert_fc1,moe_act,expert_fc2];"
      "prefetch=0");
  expect_same_as_one_process(GetParam(), "offload", "experts=moe_act,chunks=2");
}
// 8-bit storage on real ranks: each rank encodes its own saved tensors; the gradients within the
// stored format's rounding (bfloat16: 8 bits of mantissa, a few roundings deep).
TEST_P(RealRanks, Compress) {
  expect_same_as_one_process(GetParam(), "compress", "format=bf16", "aten", "float64", 5e-2);
  expect_same_as_one_process(GetParam(), "offload", "format=bf16,prefetch=0", "aten", "float64", 5e-2);
}
// A strategy defined only in the tests (tests/probe_strategy.cpp), with its own expert.
TEST_P(RealRanks, StrategyDefinedInATestFile) { expect_same_as_one_process(GetParam(), "expert_probe", "-"); }
TEST_P(RealRanks, MemFineChunks) {
  for (const char* c : {"1", "2", "4", "auto"}) expect_same_as_one_process(GetParam(), "memfine", c);
}

// ChunkedEP: the next chunk's rows in flight (an asynchronous all-to-all) while a chunk's experts
// run, the replay last to first, its rows' gradients sent back by hand; and its stored chunks.
TEST_P(RealRanks, ChunkedEp) {
  for (const char* c : {"chunks=2", "chunks=4", "chunks=3;recompute=none"})
    expect_same_as_one_process(GetParam(), "chunked_ep", c);
  expect_same_as_one_process(GetParam(), "chunked_ep", "chunks=3", "fused");
}

// Paged Stash on real ranks: the experts' saved tensors in pages; an overflow on any rank has every
// rank rerun (one all-reduced flag), the rerun's gradients those of the plain computation.
TEST_P(RealRanks, PagedStash) {
  expect_same_as_one_process(GetParam(), "paged_stash", "capacity_factor=100,device_factor=100");
  expect_same_as_one_process(GetParam(), "paged_stash", "capacity_factor=0.5");
}

// skip_dead on real ranks: the probabilities travel with the rows and weigh the activation; the
// replay skips fc2, the way back and the sum (placeholders whose backward exchanges the gradients).
TEST_P(RealRanks, SkipDead) {
  for (const char* s : {"full_recompute", "moe_recompute"}) expect_same_as_one_process(GetParam(), s, "skip_dead=true");
}

// The fused row ops on the all-to-all path (sender gather, per-expert gather and un-group, weighted
// combine): the same loss and gradients as the one-process ATen reference.
TEST_P(RealRanks, FusedKernels) {
  expect_same_as_one_process(GetParam(), "no_recompute", "-", "fused");
  expect_same_as_one_process(GetParam(), "memfine", "2", "fused");
}

INSTANTIATE_TEST_SUITE_P(World, RealRanks, ::testing::Values(2, 4));

// Rank 0's store listens where the job's ranks reach it (MASTER_ADDR), not on every interface; an
// address it cannot listen at is said with the OS's reason.
TEST(Rendezvous, ListensAtTheJobsAddressOnly) {
  // A port found free can be taken before it is listened at (another test's outgoing connection):
  // then another is picked, as a user would pick another MASTER_PORT.
  int port = 0;
  const auto listen_free = [&port](const char* host) {
    for (int attempt = 0;; ++attempt) {
      try {
        return listen_socket(host, port);
      } catch (const std::runtime_error& e) {
        if (attempt == 4 || std::string(e.what()).find(std::strerror(EADDRINUSE)) == std::string::npos) throw;
        port = free_loopback_port();
      }
    }
  };
  port = free_loopback_port();
  for (const char* host : {"127.0.0.1", "localhost"}) {
    const int fd = listen_free(host);
    sockaddr_storage a{};
    socklen_t n = sizeof a;
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n), 0);
    if (a.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
      EXPECT_EQ(ntohl(in->sin_addr.s_addr), INADDR_LOOPBACK) << host;
      EXPECT_EQ(ntohs(in->sin_port), port);
    } else {
      ASSERT_EQ(a.ss_family, AF_INET6) << host;
      EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr)) << host;
    }
    close(fd);
  }
  try {
    close(listen_socket("no-such-host.invalid", port));
    ADD_FAILURE() << "listened at a host that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR no-such-host.invalid"), std::string::npos) << e.what();
  }
}

// A LibTorch whose store cannot be handed a socket (1.13) would listen on every interface: rank 0
// refuses unless told to accept it, and says what to do instead.
TEST(Rendezvous, AStoreOnEveryInterfaceIsOpenedOnlyWhenAskedFor) {
  if (store_listens_at_job_address()) GTEST_SKIP() << "this LibTorch's store listens at MASTER_ADDR";
  const std::string port = std::to_string(free_loopback_port());
  for (const auto& [k, v] : std::map<std::string, std::string>{
           {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}})
    setenv(k.c_str(), v.c_str(), 1);
  unsetenv("MEMFINE_STORE_FILE"), unsetenv("MEMFINE_STORE_ANY_INTERFACE");
  try {
    Dist::from_env(std::chrono::seconds(2));
    ADD_FAILURE() << "opened a store on every interface unasked";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("every interface"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MEMFINE_STORE_ANY_INTERFACE=1"), std::string::npos) << e.what();
  }
  for (const char* k : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(k);
}

TEST(RealRanksFailure, ARankThatFailsEndsTheJobInBoundedTime) {
  const std::string dir = memfine::test_util::scratch_root() + "/dist_fail";
  std::filesystem::create_directories(dir);
  const auto t0 = std::chrono::steady_clock::now();
  const auto codes = run_ranks(2, {"no_recompute", "-", dir, "throw"}, std::chrono::seconds(90));
  EXPECT_EQ(codes[1], 7);
  EXPECT_NE(codes[0], 0);  // rank 0 does not hang: its collective times out
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(80));
}
