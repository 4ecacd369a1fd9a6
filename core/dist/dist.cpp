#include "core/dist/dist.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(MEMFINE_TORCH_CUDA) && defined(USE_C10D_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define MEMFINE_HAVE_NCCL 1
#endif

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "core/util/host_sync.h"

namespace memfine {

// LibTorch 2.x split the process group into a front and per-device backends (Gloo, NCCL);
// in 1.13 the backends are process groups themselves. The collectives used here exist on both.
#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

struct Dist::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> pg;
  at::Device device = at::kCPU;  // where the backend wants tensors
  const char* name = "gloo";
};

Dist::~Dist() = default;

int free_loopback_port() {
  int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(sock);
  return ntohs(addr.sin_port);
}

int listen_socket(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string where = "MASTER_ADDR " + host + ", port " + std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    throw std::runtime_error(where + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw std::runtime_error(where + ": rank 0 cannot listen there: " + why);
}

namespace {

// Rank 0's store listens on the socket it is given (LibTorch 2.x's masterListenFd): one bound to
// the job's address. Without the option (1.13) the store binds every interface itself.
template <class Options>
auto take_listen_fd(Options& o, int fd, int) -> decltype(o.masterListenFd = fd, bool()) {
  o.masterListenFd = fd;
  return true;
}
template <class Options>
bool take_listen_fd(Options&, int, long) {
  return false;
}

// LibTorch 2.4+ serves the store through libuv by default, but distributions may build LibTorch
// without it (Debian's 2.6 does) and then the store refuses to start: fall back to the plain TCP
// server, which every version has. Detected by member rather than version, since 1.13 lacks it.
template <class Options>
auto disable_libuv(Options& o, int) -> decltype(o.useLibUV = false, bool()) {
  if (!o.useLibUV) return false;
  o.useLibUV = false;
  return true;
}
template <class Options>
bool disable_libuv(Options&, long) {
  return false;
}

}  // namespace

bool store_listens_at_job_address() {
  c10d::TCPStoreOptions so;
  return take_listen_fd(so, -1, 0);
}

namespace {

c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, c10d::TCPStoreOptions so) {
  int fd = -1;
  if (so.isServer) {
    fd = listen_socket(host, so.port);
    if (!take_listen_fd(so, fd, 0)) {
      ::close(fd), fd = -1;
      // An unauthenticated store on every interface is not opened unasked.
      const char* any = std::getenv("MEMFINE_STORE_ANY_INTERFACE");
      if (!any || std::string(any) != "1")
        throw std::runtime_error(
            "this LibTorch's rendezvous store would listen on every interface (port " + std::to_string(so.port) +
            "), not at MASTER_ADDR " + host + " alone, for the job's life: start the job with `memfine launch` " +
            "(one machine: no socket), build against LibTorch 2.x (it listens at MASTER_ADDR), or set " +
            "MEMFINE_STORE_ANY_INTERFACE=1 to accept it");
      std::cerr << "memfine: the rendezvous store listens on every interface (port " << so.port
                << ") while the job runs (MEMFINE_STORE_ANY_INTERFACE=1)\n";
    }
  }
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, so);
  } catch (...) {
    if (fd >= 0 && ::fcntl(fd, F_GETFD) != -1) ::close(fd);  // the store did not take it over
    throw;
  }
}

c10::intrusive_ptr<c10d::Store> make_store(const std::string& host, c10d::TCPStoreOptions so) {
  // `memfine launch` on one machine: a file in a folder only this user reads, no socket at all.
  if (const char* file = std::getenv("MEMFINE_STORE_FILE"); file && *file) {
    auto store = c10::make_intrusive<c10d::FileStore>(file, int(so.numWorkers.value_or(1)));
    store->setTimeout(so.timeout);
    return store;
  }
  try {
    return tcp_store(host, so);
  } catch (const c10::Error& e) {
    if (std::string(e.what()).find("libuv") == std::string::npos || !disable_libuv(so, 0)) throw;
    return tcp_store(host, so);
  }
}

}  // namespace

JobPlace job_place() {
  JobPlace p;
  const char* ws = std::getenv("WORLD_SIZE");
  const char *rk = std::getenv("RANK"), *local = std::getenv("LOCAL_RANK");
  // Slurm: only the tasks srun starts are ranks (SLURM_STEPID); a batch script has SLURM_NTASKS
  // too, but it is one process that starts them.
  if (!ws && std::getenv("SLURM_STEPID") && std::getenv("SLURM_PROCID")) {
    ws = std::getenv("SLURM_STEP_NUM_TASKS") ? std::getenv("SLURM_STEP_NUM_TASKS") : std::getenv("SLURM_NTASKS");
    rk = std::getenv("SLURM_PROCID"), local = std::getenv("SLURM_LOCALID");
    if (ws && std::atoi(ws) <= 1) return p;  // one task: one process (it may emulate ranks)
  }
  if (!ws) return p;
  p.launched = true;
  p.world = std::atoi(ws);
  if (!rk) throw std::runtime_error("WORLD_SIZE is set but RANK is not");
  p.rank = std::atoi(rk);
  p.local_rank = local ? std::atoi(local) : p.rank;
  if (p.world < 1 || p.rank < 0 || p.rank >= p.world)
    throw std::runtime_error("rank " + std::to_string(p.rank) + " of " + std::to_string(p.world) +
                             " ranks: not a place in the job");
  return p;
}

std::unique_ptr<Dist> Dist::from_env(std::chrono::seconds timeout, const std::string& device) {
  const JobPlace place = job_place();
  if (place.world <= 1) return nullptr;
  std::unique_ptr<Dist> d(new Dist());
  d->rank_ = place.rank;
  d->world_ = place.world;
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  const std::string host = addr ? addr : "127.0.0.1";
  const auto timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  c10d::TCPStoreOptions so;
  so.port = uint16_t(port ? std::atoi(port) : 29500);
  so.isServer = d->rank_ == 0;
  so.numWorkers = size_t(d->world_);
  so.timeout = timeout_ms;
  d->impl_ = std::make_unique<Impl>();
  d->impl_->store = make_store(host, so);
  if (device == "cuda") {
#ifdef MEMFINE_HAVE_NCCL
    const int gpus = c10::cuda::device_count();
    if (gpus == 0) throw std::runtime_error("device: cuda but no GPU is visible to rank " + std::to_string(d->rank_));
    const int index = place.local_rank % gpus;
    // Tensors made with a bare kCUDA device land on the current device: one GPU per rank.
    c10::cuda::set_device(c10::DeviceIndex(index));
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout_ms;
    d->impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(d->impl_->store, d->rank_, d->world_, opts);
    d->impl_->device = at::Device(at::kCUDA, c10::DeviceIndex(index));
    d->impl_->name = "nccl";
    return d;
#else
    throw std::runtime_error("device: cuda across ranks needs NCCL: build against a CUDA LibTorch (scripts/gpu-build)");
#endif
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout_ms);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  opts->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                            : c10d::ProcessGroupGloo::createDeviceForHostname(host));
  d->impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(d->impl_->store, d->rank_, d->world_, opts);
  return d;
}

const char* Dist::backend() const { return impl_->name; }

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Runs on the backend's device; the result goes back to where `in` was (a no-op when they agree,
// as for Gloo with CPU tensors and NCCL with CUDA ones).
at::Tensor raw_alltoall(const Dist::Impl& impl, const at::Tensor& in, std::vector<int64_t> out_splits,
                        std::vector<int64_t> in_splits) {
  int64_t rows = 0;
  for (auto s : out_splits) rows += s;
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = rows;
  at::Tensor src = in.to(impl.device).contiguous();
  at::Tensor out = at::empty(shape, src.options());
  impl.pg->alltoall_base(out, src, out_splits, in_splits)->wait();
  return out.to(in.device());
}

struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& in, std::vector<int64_t> out_splits,
                            std::vector<int64_t> in_splits, const Dist::Impl* impl) {
    ctx->saved_data["out"] = out_splits;
    ctx->saved_data["in"] = in_splits;
    ctx->saved_data["impl"] = reinterpret_cast<int64_t>(impl);
    return raw_alltoall(*impl, in, out_splits, in_splits);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* impl = reinterpret_cast<const Dist::Impl*>(ctx->saved_data["impl"].toInt());
    // The reverse exchange: what came from rank i goes back to it.
    at::Tensor g =
        raw_alltoall(*impl, grad[0], ctx->saved_data["in"].toIntVector(), ctx->saved_data["out"].toIntVector());
    return {g, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Dist::alltoall(const at::Tensor& in, const std::vector<int64_t>& out_splits,
                          const std::vector<int64_t>& in_splits) const {
  return AllToAll::apply(in, out_splits, in_splits, impl_.get());
}

struct Dist::Pending::State {
  at::Tensor src, out;  // src: held until the exchange is done
  at::Device back = at::kCPU;
  c10::intrusive_ptr<c10d::Work> work;
};

at::Tensor Dist::Pending::wait() {
  if (!state) throw std::logic_error("Dist::Pending::wait: nothing in flight");
  if (state->work) state->work->wait(), state->work.reset(), state->src = at::Tensor();
  return state->out.to(state->back);
}

Dist::Pending Dist::alltoall_async(const at::Tensor& in, const std::vector<int64_t>& out_splits,
                                   const std::vector<int64_t>& in_splits) const {
  int64_t rows = 0;
  for (auto s : out_splits) rows += s;
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = rows;
  Pending p;
  p.state = std::make_shared<Pending::State>();
  p.state->back = in.device();
  p.state->src = in.detach().to(impl_->device).contiguous();
  p.state->out = at::empty(shape, p.state->src.options());
  std::vector<int64_t> o = out_splits, i = in_splits;
  p.state->work = impl_->pg->alltoall_base(p.state->out, p.state->src, o, i);
  return p;
}

std::vector<int64_t> Dist::exchange_counts(const std::vector<int64_t>& send) const {
  at::Tensor s = at::tensor(send, at::kLong);
  std::vector<int64_t> ones(size_t(world_), 1);
  at::Tensor r = raw_alltoall(*impl_, s, ones, ones);
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + world_);
}

void Dist::allreduce_sum(at::Tensor& t) const {
  std::vector<at::Tensor> v = {t.device() == impl_->device ? t : t.to(impl_->device)};
  impl_->pg->allreduce(v)->wait();
  if (!v[0].is_same(t)) {
    if (!v[0].device().is_cpu() && t.device().is_cpu()) note_host_read();
    t.copy_(v[0]);
  }
}

void Dist::barrier() const { impl_->pg->barrier()->wait(); }

void Dist::store_set(const std::string& key, const std::string& value) const {
  impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string Dist::store_get(const std::string& key) const {
  const std::vector<uint8_t> v = impl_->store->get(key);
  return std::string(v.begin(), v.end());
}

at::Tensor Dist::allreduce_max(const at::Tensor& t) const {
  std::vector<at::Tensor> v = {t.to(impl_->device, /*non_blocking=*/false, /*copy=*/true)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  impl_->pg->allreduce(v, o)->wait();
  if (!v[0].device().is_cpu() && t.device().is_cpu()) note_host_read();
  return v[0].to(t.device());
}

}  // namespace memfine
