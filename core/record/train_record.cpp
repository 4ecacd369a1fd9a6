#include "core/record/train_record.h"

#include "core/record/schema.h"

namespace memfine {

json trained_step_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                         const StrategySpec& s, const TrainedRun& run, const TrainedStep& st) {
  json r;
  if (st.step == 0) {
    r = new_record(c, ctx, point, s, st.status, st.error);
    put(r, "static_bytes", run.static_bytes);
    put(r, "stats_ep", run.stats_ep);
    if (run.ranks > 0) put(r, "ranks", run.ranks);
    if (run.grad_err >= 0) {
      put(r, "grad_max_rel_err", run.grad_err);
      put(r, "verify_tolerance", run.verify_tolerance);
      put(r, "verified", run.grad_err <= run.verify_tolerance);
    }
  } else {
    r = json::object();
    put(r, "experiment", c.name), put(r, "point", point), put(r, "strategy", s.label()), put(r, "seed", c.seed);
    put(r, "status", st.status);
    if (!st.error.empty()) put(r, "error", st.error);
  }
  put(r, "step", st.step);
  if (st.status != "ok") {
    if (st.peak >= 0) put(r, "peak_activation_bytes", st.peak);  // real ranks: the step ran whole
    return r;
  }
  put(r, "loss", st.loss);
  put(r, "lr", st.lr);
  put(r, "step_ms", st.ms);
  put(r, "peak_activation_bytes", st.peak);
  if (st.ops >= 0) put(r, "ops_per_step", st.ops), put(r, "host_syncs_per_step", st.host_syncs);
  put(r, "expert_tokens", st.expert_tokens);
  put(r, "tokens_received_per_layer", st.tokens_received_per_layer);
  for (const auto& [key, value] : st.counters.items()) r[key] = value;
  if (st.eval_loss) put(r, "eval_loss", *st.eval_loss);
  return r;
}

}  // namespace memfine
