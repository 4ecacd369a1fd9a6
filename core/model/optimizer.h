// Adam (Kingma & Ba), written out so its state is allocated up front and counted as static memory,
// and its update runs in place.
#pragma once
#include <ATen/ATen.h>

#include <vector>

namespace memfine {

class Adam {
 public:
  explicit Adam(std::vector<at::Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                double eps = 1e-8);
  void step();
  void zero_grad();  // in place: gradients stay allocated (static memory)
  int64_t state_bytes() const;
  const std::vector<at::Tensor>& params() const { return params_; }

 private:
  std::vector<at::Tensor> params_, m_, v_;
  double lr_, beta1_, beta2_, eps_;
  int64_t t_ = 0;
};

}  // namespace memfine
