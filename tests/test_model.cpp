#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include "core/model/flops.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"
#include "testing.h"

using namespace memfine;
using memfine::test_util::tiny_config;

TEST(Model, ShapesAndDeterminism) {
  ExperimentConfig c = tiny_config("float32");
  auto a = make_train_state(c), b = make_train_state(c);
  auto pa = a->model.parameters(), pb = b->model.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  int64_t count = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(at::equal(pa[i], pb[i]));
    count += pa[i].numel();
  }
  EXPECT_EQ(count, parameter_count(c.model, c.ep));
  const auto& w = a->model.layers[0];
  EXPECT_EQ(w.w_in.size(), size_t(c.model.experts / c.ep));
  EXPECT_EQ(w.w_in[0].sizes(), (at::IntArrayRef{c.model.hidden, 2 * c.model.ffn_hidden}));
  at::Tensor x = a->input;
  EXPECT_EQ(attention(x, w, c.model).sizes(), x.sizes());
  auto s1 = make_strategy(test_util::spec("no_recompute")), s2 = make_strategy(test_util::spec("no_recompute"));
  const double l1 = train_step(*a, *s1, 0), l2 = train_step(*b, *s2, 0);
  EXPECT_EQ(l1, l2);  // bit-for-bit on CPU
  EXPECT_TRUE(at::equal(a->model.parameters()[3], b->model.parameters()[3]));
}

TEST(Model, RouterTopkMatchesBruteForce) {
  at::manual_seed(0);
  ExperimentConfig c = tiny_config("float64");
  Model m = make_model(c, 0);
  at::Tensor x = at::randn({40, c.model.hidden}, at::kDouble);
  Routed r = route(x, m.layers[0], at::Tensor(), c.model.topk);
  at::Tensor probs = at::softmax(at::matmul(x, m.layers[0].router), -1);
  for (int64_t t = 0; t < x.size(0); ++t) {
    std::vector<std::pair<double, int64_t>> all;
    for (int64_t e = 0; e < c.model.experts; ++e) all.emplace_back(probs[t][e].item<double>(), e);
    std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (int64_t j = 0; j < c.model.topk; ++j) {
      EXPECT_EQ(r.expert_ids[t][j].item<int64_t>(), all[size_t(j)].second);
      EXPECT_DOUBLE_EQ(r.probs[t][j].item<double>(), all[size_t(j)].first);
    }
  }
}

// Analytic gradients of one decoder layer (attention, router, experts, shared expert, peers'
// terms) against central finite differences, in float64.
TEST(Model, LayerGradientsMatchFiniteDifferences) {
  ExperimentConfig c = tiny_config("float64");
  c.model.layers = 1;
  auto st = make_train_state(c, true);
  auto s = make_strategy(test_util::spec("no_recompute"));
  train_step(*st, *s, 0, false);
  std::vector<at::Tensor> params = st->model.parameters();
  params.push_back(st->input);
  const double eps = 1e-6;
  int checked = 0;
  for (auto& p : params) {
    at::Tensor flat = p.detach().view(-1);
    const at::Tensor grad = p.grad().view(-1);
    for (int64_t idx : {int64_t(0), flat.numel() / 2, flat.numel() - 1}) {
      const double orig = flat[idx].item<double>();
      auto loss_at = [&](double v) {
        at::NoGradGuard ng;
        flat[idx].fill_(v);
        return forward_loss(*st, *s, 0).item<double>();
      };
      const double numeric = (loss_at(orig + eps) - loss_at(orig - eps)) / (2 * eps);
      flat[idx].fill_(orig);
      const double analytic = grad[idx].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "parameter of shape " << p.sizes();
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

TEST(Model, AdamStepMatchesTheFormula) {
  at::Tensor p = at::tensor({1.0, -2.0, 3.0}, at::kDouble).requires_grad_(true);
  Adam adam({p}, /*lr=*/0.1);
  p.mutable_grad().copy_(at::tensor({0.5, -0.25, 0.0}, at::kDouble));
  adam.step();
  // First step: m_hat = g, v_hat = g^2, so p -= lr * g / (|g| + eps).
  EXPECT_NEAR(p[0].item<double>(), 1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-12);
  EXPECT_NEAR(p[1].item<double>(), -2.0 + 0.1 * 0.25 / (0.25 + 1e-8), 1e-12);
  EXPECT_DOUBLE_EQ(p[2].item<double>(), 3.0);
  EXPECT_EQ(adam.state_bytes(), 2 * 3 * 8);
  adam.zero_grad();
  EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
}

TEST(Model, FlopFormula) {
  EXPECT_DOUBLE_EQ(expert_forward_flops(10, 16, 24), 6.0 * 10 * 16 * 24);
  ModelConfig m;
  m.attention = "none";
  m.layers = 1;
  m.experts = 4;
  StepFlops f = step_flops(m, 100);
  EXPECT_DOUBLE_EQ(f.experts, 18.0 * 100 * m.hidden * m.ffn_hidden);
  EXPECT_DOUBLE_EQ(f.router, 6.0 * m.tokens() * m.hidden * 4);
  EXPECT_EQ(f.attention, 0);
}
