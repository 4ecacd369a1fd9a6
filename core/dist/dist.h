// Expert parallelism across real ranks through PyTorch's c10d (Gloo on CPU, NCCL on CUDA): the
// process group, an all-to-all that autograd can run backwards, and the sums replicated gradients
// need. Collectives take tensors on any device and return them on the device they came from.
#pragma once
#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace memfine {

// A loopback TCP port free right now, for a rendezvous on this machine.
int free_loopback_port();
// A socket listening at `host` (a name or an address; the first of its addresses that binds) and
// `port`: rank 0's rendezvous store serves on it, and so is reached at the job's address only, not
// on every interface. Throws with the OS's reason.
int listen_socket(const std::string& host, int port);
// Whether this LibTorch's store takes such a socket (2.x); 1.13's would listen on every interface.
bool store_listens_at_job_address();

// This process's place in a job, from the launcher's variables: torchrun's and `memfine launch`'s
// (RANK, WORLD_SIZE, LOCAL_RANK), else Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). world 1
// when neither is set; `launched`: a launcher set them (even for one rank).
struct JobPlace {
  int rank = 0, world = 1, local_rank = 0;
  bool launched = false;
};
JobPlace job_place();

class Dist {
 public:
  // From job_place() and MASTER_ADDR, MASTER_PORT (rank 0's host and a free port on it; 127.0.0.1
  // and 29500 by default; rank 0's store listens at that address alone: LibTorch 2.x; 1.13's would
  // listen on every interface and is refused unless MEMFINE_STORE_ANY_INTERFACE=1), or
  // MEMFINE_STORE_FILE (`memfine launch` on one machine: a file store, no socket); null
  // for one process. Gloo talks through the interface that reaches
  // MASTER_ADDR, or GLOO_SOCKET_IFNAME's. Collectives time out after `timeout` instead of hanging
  // when a rank died. `device` "cuda" uses NCCL on GPU LOCAL_RANK (else RANK modulo the GPUs
  // visible); it needs a build against a CUDA LibTorch.
  static std::unique_ptr<Dist> from_env(std::chrono::seconds timeout = std::chrono::seconds(60),
                                        const std::string& device = "cpu");
  ~Dist();
  int rank() const { return rank_; }
  int world() const { return world_; }
  const char* backend() const;  // "gloo" or "nccl"
  // Rows [sum(in_splits), ...] -> [sum(out_splits), ...]: block i of the input goes to rank i.
  // Differentiable: its backward is the reverse all-to-all.
  at::Tensor alltoall(const at::Tensor& in, const std::vector<int64_t>& out_splits,
                      const std::vector<int64_t>& in_splits) const;
  // The same outside autograd, issued without waiting for it (ChunkedEP's next chunk in flight while
  // this one's experts run): the rows are there once wait() returns them. Every rank issues its
  // collectives in the same order, these among them.
  class Pending {
   public:
    at::Tensor wait();
    struct State;
    std::shared_ptr<State> state;
  };
  Pending alltoall_async(const at::Tensor& in, const std::vector<int64_t>& out_splits,
                         const std::vector<int64_t>& in_splits) const;
  // "notify": how many rows each rank will send to this one.
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& send) const;
  void allreduce_sum(at::Tensor& t) const;
  // Returns once every rank has called it: a rank that leaves the job early waits here, so that none
  // closes its connections while another is still making its own.
  void barrier() const;
  // The rendezvous store, for small messages (results records to rank 0).
  void store_set(const std::string& key, const std::string& value) const;
  std::string store_get(const std::string& key) const;  // waits up to the timeout
  at::Tensor allreduce_max(const at::Tensor& t) const;

  struct Impl;

 private:
  Dist() = default;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memfine
