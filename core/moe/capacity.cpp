#include "core/moe/capacity.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/util/host_sync.h"

namespace memfine {

at::Tensor keep_within_capacity(const at::Tensor& group, const at::Tensor& priority, int64_t capacity) {
  const int64_t n = group.numel();
  // The groups are the routing's (on the host); the priorities are the router's, read back.
  at::Tensor g = group.to(at::kCPU, at::kLong).contiguous(), p = to_host(priority).to(at::kDouble).contiguous();
  const int64_t* gp = g.data_ptr<int64_t>();
  const double* pp = p.data_ptr<double>();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return gp[a] != gp[b] ? gp[a] < gp[b] : pp[a] > pp[b]; });
  at::Tensor keep = at::zeros({n}, at::kBool);
  bool* kp = keep.data_ptr<bool>();
  int64_t run = 0;
  for (int64_t i = 0; i < n; ++i) {
    run = (i > 0 && gp[order[i]] == gp[order[i - 1]]) ? run + 1 : 0;
    kp[order[i]] = run < capacity;
  }
  return keep;
}

}  // namespace memfine
