// A strategy that exists only in the tests: what a user adding a baseline writes, in one file.
// It stores everything (as no_recompute) but runs its own expert, SwiGLU written out here, and
// counts the rows that expert saw. The tests hold it to what the suite promises a new strategy:
// the memory model predicts it (within 5%) from the shape it declares, `verify` covers it, it runs
// on real ranks through the same expert hook (tests/test_dist.cpp), its counters reach the record,
// and the figures' tables list it (tests/CMakeLists.txt: extension_in_figures).
#include <atomic>

#include "core/strategy/registry.h"

namespace memfine {
namespace {

std::atomic<int64_t> g_expert_rows{0};  // over every instance: an expert hook is a plain function

class ExpertProbe : public Strategy {
 public:
  explicit ExpertProbe(const StrategySpec& spec) : Strategy(spec, StrategyShape{}) {}  // stores what no_recompute does
  void begin_own_step(int64_t) override { g_expert_rows = 0; }
  ExpertPath expert() const override {
    return ExpertPath([](const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out) {
      g_expert_rows += rows.size(0);
      auto gate_up = at::matmul(rows, w_in).chunk(2, -1);
      return at::matmul(at::silu(gate_up[0]) * gate_up[1], w_out);
    });
  }
  json own_step_counters() const override { return {{"expert_rows", g_expert_rows.load()}}; }
};

MEMFINE_REGISTER_STRATEGY(drawn(with_counters(
    coded("expert_probe", "tests only: stores everything, runs its own SwiGLU expert and counts the rows it saw", {},
          [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new ExpertProbe(s)); }),
    {{"expert_rows", "integer", "rows", "the rows its experts computed in the last step", "measured train"}}),
    "#8c6d31", "d"));

}  // namespace
}  // namespace memfine
