#include "core/model/optimizer.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

namespace memfine {

Adam::Adam(std::vector<at::Tensor> params, double lr, double beta1, double beta2, double eps)
    : params_(std::move(params)), lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps) {
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    p.mutable_grad() = at::zeros_like(p);
    m_.push_back(at::zeros_like(p));
    v_.push_back(at::zeros_like(p));
  }
}

void Adam::step() {
  at::NoGradGuard no_grad;
  ++t_;
  const double c1 = 1.0 - std::pow(beta1_, double(t_)), c2 = 1.0 - std::pow(beta2_, double(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = params_[i].grad();
    m_[i].mul_(beta1_).add_(g, 1.0 - beta1_);
    v_[i].mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
    at::Tensor denom = (v_[i] / c2).sqrt_().add_(eps_);
    params_[i].addcdiv_(m_[i], denom, -lr_ / c1);
  }
}

void Adam::zero_grad() {
  at::NoGradGuard no_grad;
  for (auto& p : params_) p.mutable_grad().zero_();
}

int64_t Adam::state_bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i) n += int64_t(m_[i].nbytes() + v_[i].nbytes());
  return n;
}

}  // namespace memfine
