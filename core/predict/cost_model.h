// The step-time cost model fitted by scripts/cost_model.py from memfine_bench (a JSON file under
// results/<device class>/): what `memfine` with `objective: time` uses to pick, among the chunk
// counts that fit the budget, the fastest.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/config/config.h"

namespace memfine {

class CostModel {
 public:
  // Throws std::runtime_error naming the file when it is missing or malformed.
  static CostModel load(const std::string& path);
  // Predicted milliseconds of one layer's training step whose local experts receive `expert_rows`
  // rows each: chunks 0 = stored (no recomputation), c >= 1 = MemFine with c chunks.
  double layer_ms(const ModelConfig& m, const std::vector<int64_t>& expert_rows, int64_t chunks) const;
  // The model work its benchmarked layer's stored step did per second (FLOP/s): the rate it scales
  // steps by; and the machine that measured it ("AMD EPYC, 2 threads").
  double flops_per_s() const { return ref_flops_ / (s0_ / 1e3); }
  const std::string& machine() const { return machine_; }

 private:
  double expert_ms(double rows) const;  // one expert's forward + backward
  double s0_ = 0, m1_ = 0, per_chunk_ = 0, ref_flops_ = 1;
  std::string machine_;
  std::vector<std::pair<double, double>> fwd_bwd_;  // (rows, ms)
};

}  // namespace memfine
