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
  void set_lr(double lr) { lr_ = lr; }
  // Its whole state, for checkpoints: the two moments (in params() order) and the step count.
  const std::vector<at::Tensor>& first_moments() const { return m_; }
  const std::vector<at::Tensor>& second_moments() const { return v_; }
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  std::vector<at::Tensor> params_, m_, v_;
  double lr_, beta1_, beta2_, eps_;
  int64_t t_ = 0;
};

}  // namespace memfine
