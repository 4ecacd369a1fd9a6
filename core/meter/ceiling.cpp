#include "core/meter/ceiling.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>

#include "core/meter/timer.h"

namespace memfine {
namespace {

double measure(const std::string& device) {
  at::NoGradGuard no_grad;
  const bool gpu = device == "cuda";
  const auto opts = at::TensorOptions().dtype(gpu ? at::kBFloat16 : at::kFloat).device(gpu ? at::kCUDA : at::kCPU);
  double best = 0;
  for (int64_t n : gpu ? std::vector<int64_t>{2048, 4096, 8192} : std::vector<int64_t>{256, 512, 1024, 1536}) {
    at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts), c = at::empty({n, n}, opts);
    at::mm_out(c, a, b);  // warm
    for (int rep = 0; rep < 3; ++rep) {
      Timer t(device);
      at::mm_out(c, a, b);
      const double ms = t.elapsed_ms();
      if (ms > 0) best = std::max(best, 2.0 * double(n) * double(n) * double(n) / (ms / 1e3));
    }
  }
  return best;
}

}  // namespace

double matmul_ceiling_flops(const std::string& device, const std::string& machine) {
  // Measured in the process that measures the steps, once per machine key: a ceiling kept from
  // another process may come from another machine of the same name (VMs differ between sessions)
  // or from a moment when something else ran, and then fractions above 1 were recorded.
  static std::map<std::string, double> known;
  const std::string key = device + "|" + machine;
  if (auto it = known.find(key); it != known.end()) return it->second;
  double flops = 0;
  try {
    flops = measure(device);
  } catch (const std::exception&) {
    flops = 0;
  }
  return known[key] = flops;
}

}  // namespace memfine
