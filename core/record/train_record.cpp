#include "core/record/train_record.h"

namespace memfine {

json trained_step_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                         const StrategySpec& s, const TrainedRun& run, const TrainedStep& st) {
  json r;
  if (st.step == 0) {
    r = new_record(c, ctx, point, s, st.status, st.error);
    r["static_bytes"] = run.static_bytes;
    r["stats_ep"] = run.stats_ep;
    if (run.ranks > 0) r["ranks"] = run.ranks;
    if (run.grad_err >= 0) {
      r["grad_max_rel_err"] = run.grad_err;
      r["verify_tolerance"] = run.verify_tolerance;
      r["verified"] = run.grad_err <= run.verify_tolerance;
    }
  } else {
    r = {{"experiment", c.name}, {"point", point}, {"strategy", s.label()}, {"seed", c.seed}, {"status", st.status}};
    if (!st.error.empty()) r["error"] = st.error;
  }
  r["step"] = st.step;
  if (st.status != "ok") {
    if (st.peak >= 0) r["peak_activation_bytes"] = st.peak;  // real ranks: the step ran whole
    return r;
  }
  r["loss"] = st.loss;
  r["lr"] = st.lr;
  r["step_ms"] = st.ms;
  r["peak_activation_bytes"] = st.peak;
  r["expert_tokens"] = st.expert_tokens;
  r["tokens_received_per_layer"] = st.tokens_received_per_layer;
  for (const auto& [key, value] : st.counters.items()) r[key] = value;
  if (st.eval_loss) r["eval_loss"] = *st.eval_loss;
  return r;
}

}  // namespace memfine
