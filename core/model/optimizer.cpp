#include "core/model/optimizer.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "core/util/tensors.h"

namespace memfine {

Adam::Adam(std::vector<at::Tensor> params, double lr, double beta1, double beta2, double eps)
    : params_(std::move(params)), lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps) {
  at::NoGradGuard no_grad;
  // Parameters that lie back to back in one storage (a layer's experts: core/model/model.h) get
  // gradients that do too, so that one grouped GEMM can add into all of them (core/moe/ranged.h).
  for (size_t i = 0; i < params_.size();) {
    size_t j = i + 1;
    while (j < params_.size() && back_to_back({params_[j - 1], params_[j]})) ++j;
    if (j - i == 1) {
      params_[i].mutable_grad() = at::zeros_like(params_[i]);
    } else {
      std::vector<int64_t> sizes = {int64_t(j - i)};
      sizes.insert(sizes.end(), params_[i].sizes().begin(), params_[i].sizes().end());
      at::Tensor all = at::zeros(sizes, params_[i].options().requires_grad(false));
      for (size_t e = i; e < j; ++e) params_[e].mutable_grad() = all[int64_t(e - i)];
    }
    i = j;
  }
  for (auto& p : params_) {
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
