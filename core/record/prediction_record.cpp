#include "core/record/prediction_record.h"

namespace memfine {

json paper_prediction_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                             const StrategySpec& s, const std::optional<PaperProjection>& projection) {
  json r = new_record(c, ctx, point, s, "predicted");
  r["model"] = "paper";
  if (!projection) {
    r["status"] = "unpredicted";
    r["unpredicted_why"] = "the paper's model does not cover '" + s.name + "'";
    return r;
  }
  const PaperProjection& pr = *projection;
  r["parameters"] = pr.parameters;
  r["static_gb"] = pr.static_bytes / 1e9;
  r["activation_gb"] = pr.activation_bytes / 1e9;
  r["total_gb"] = (pr.static_bytes + pr.activation_bytes) / 1e9;
  r["tokens_received"] = pr.received;
  r["s_recv_max"] = pr.s_recv_max;
  r["chunks"] = pr.chunks;
  r["fits"] = pr.fits;
  r["device_gb"] = double(c.paper.device_memory) / 1e9;
  r["assumptions"] = pr.assumptions;
  return r;
}

json implementation_prediction_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                                      const StrategySpec& s, const ImplementationPrediction& p) {
  json r = new_record(c, ctx, point, s, "predicted");
  r["model"] = "implementation";
  r["rank"] = p.rank, r["tokens_received"] = p.tokens_received, r["step_tflop"] = p.step_tflop;
  r["routing"] = p.routed_tokens ? "tokens" : "counts";
  r["predicted_static_bytes"] = nullptr, r["predicted_activation_bytes"] = nullptr, r["fits"] = nullptr;
  if (!p.unpredicted_why.empty()) {
    r["status"] = "unpredicted";
    r["unpredicted_why"] = p.unpredicted_why;
    return r;
  }
  if (!p.fits_why.empty()) {
    r["fits"] = false;
    r["fits_why"] = p.fits_why;
    return r;
  }
  if (!p.worst) return r;
  r["predicted_static_bytes"] = p.worst->static_bytes;
  r["predicted_activation_bytes"] = p.worst->activation_bytes;
  r["peak_phase"] = p.worst->phase;
  bool chunked = false;
  for (const auto& ch : p.chunks) chunked |= !ch.empty();
  if (chunked) {  // per layer; per step and layer under a schedule, as `run` records them
    if (p.chunks.size() == 1)
      r["chunks"] = p.chunks[0];
    else
      r["chunks"] = p.chunks, r["chunk_steps"] = p.steps;
  }
  r["fits"] = c.budget < 0 ? json(nullptr) : json(p.worst->static_bytes + p.worst->activation_bytes <= c.budget);
  return r;
}

}  // namespace memfine
