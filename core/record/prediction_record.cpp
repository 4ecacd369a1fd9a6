#include "core/record/prediction_record.h"

#include "core/record/schema.h"

namespace memfine {

json paper_prediction_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                             const StrategySpec& s, const std::optional<PaperProjection>& projection) {
  json r = new_record(c, ctx, point, s, "predicted");
  put(r, "model", "paper");
  if (!projection) {
    put(r, "status", "unpredicted");
    put(r, "unpredicted_why", "the paper's model does not cover '" + s.name + "'");
    return r;
  }
  const PaperProjection& pr = *projection;
  put(r, "parameters", pr.parameters);
  put(r, "static_gb", pr.static_bytes / 1e9);
  put(r, "activation_gb", pr.activation_bytes / 1e9);
  put(r, "total_gb", (pr.static_bytes + pr.activation_bytes) / 1e9);
  put(r, "tokens_received", pr.received);
  put(r, "s_recv_max", pr.s_recv_max);
  put(r, "chunks", pr.chunks);
  put(r, "fits", pr.fits);
  put(r, "device_gb", double(c.paper.device_memory) / 1e9);
  put(r, "assumptions", pr.assumptions);
  return r;
}

json implementation_prediction_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                                      const StrategySpec& s, const ImplementationPrediction& p) {
  json r = new_record(c, ctx, point, s, "predicted");
  put(r, "model", "implementation");
  put(r, "rank", p.rank), put(r, "tokens_received", p.tokens_received), put(r, "step_tflop", p.step_tflop);
  put(r, "routing", p.routed_tokens ? "tokens" : "counts");
  put(r, "predicted_static_bytes", nullptr), put(r, "predicted_activation_bytes", nullptr), put(r, "fits", nullptr);
  if (!p.unpredicted_why.empty()) {
    put(r, "status", "unpredicted");
    put(r, "unpredicted_why", p.unpredicted_why);
    return r;
  }
  if (!p.fits_why.empty()) {
    put(r, "fits", false);
    put(r, "fits_why", p.fits_why);
    return r;
  }
  if (!p.worst) return r;
  put(r, "predicted_static_bytes", p.worst->static_bytes);
  put(r, "predicted_activation_bytes", p.worst->activation_bytes);
  put(r, "peak_phase", p.worst->phase);
  bool chunked = false;
  for (const auto& ch : p.chunks) chunked |= !ch.empty();
  if (chunked) {  // per layer; per step and layer under a schedule, as `run` records them
    if (p.chunks.size() == 1)
      put(r, "chunks", p.chunks[0]);
    else
      put(r, "chunks", p.chunks), put(r, "chunk_steps", p.steps);
  }
  put(r, "fits", c.budget < 0 ? json(nullptr) : json(p.worst->static_bytes + p.worst->activation_bytes <= c.budget));
  return r;
}

}  // namespace memfine
