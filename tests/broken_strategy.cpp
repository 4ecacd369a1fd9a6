// A strategy that exists only in `memfine_probe`, for `verify` to fail (tests/test_cli.cpp): it
// claims to compute what every dropless strategy computes, and does not. Not linked into the
// tests that hold every registered strategy to the reference.
#include "core/strategy/registry.h"

namespace memfine {
namespace {

// Dropless by its word, yet not the plain computation: every expert's output a thousandth too large.
// `verify` must fail it (tests/test_cli.cpp), on one process and on real ranks.
class OffByAThousandth : public Strategy {
 public:
  explicit OffByAThousandth(const StrategySpec& spec)
      : Strategy(spec, StrategyShape{}) {}  // stores what no_recompute does
  ExpertPath expert() const override {
    return ExpertPath([](const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out) {
      return swiglu(rows, w_in, w_out) * 1.001;
    });
  }
};

MEMFINE_REGISTER_STRATEGY(
    coded("off_by_a_thousandth", "tests only: every expert's output 0.1% too large, so that verify must fail it", {},
          [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new OffByAThousandth(s)); }));

}  // namespace
}  // namespace memfine
