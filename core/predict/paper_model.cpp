#include "core/predict/paper_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/model/flops.h"

namespace memfine {

namespace {
double figure2_received(const PaperScaleConfig& ps, int64_t local_experts, std::string& note) {
  double best = 0;
  int64_t best_layer = -1;
  for (const auto& [layer, p99] : ps.figure2_rows)  // read and checked with the file (core/config)
    if (p99 > best) best = p99, best_layer = layer;
  note = "s' = " + std::to_string(local_experts) + " local experts x Figure 2's largest p99 (layer " +
         std::to_string(best_layer) + ", " + std::to_string(int64_t(best)) +
         " tokens): the hottest device's experts all near p99";
  return best * double(local_experts);
}

struct Setup {
  PaperProjection pr;
  PaperModel pm;
  std::string notes;
};

// Everything of a projection but the strategy's chunk count.
Setup setup(const ExperimentConfig& c) {
  const ModelConfig& m = c.model;
  const PaperScaleConfig& ps = c.paper;
  PaperProjection pr;
  std::ostringstream notes;
  const double h = double(m.hidden), g = double(m.ffn_hidden), H = double(m.heads);
  // DeepSeek-V3's MLA: q down/up with q_lora_rank, kv down (+ rope key) and up, output projection,
  // the latent norms; grouped-query attention otherwise.
  const double qk = double(m.head_dim);
  const double attention = m.attention == "mla"
                               ? h * double(m.q_lora_rank) + double(m.q_lora_rank) * H * qk +
                                     h * double(m.kv_lora_rank + m.rope_head_dim) +
                                     double(m.kv_lora_rank) * H * double(m.head_dim - m.rope_head_dim + m.v_dim()) +
                                     H * double(m.v_dim()) * h + double(m.q_lora_rank + m.kv_lora_rank) + 2 * h
                               : attention_proj_flops(m) / 2 + 2 * h;
  const double local_experts = double(m.experts / c.ep);
  const double moe_layer =
      attention + h * double(m.experts) + local_experts * 3 * h * g + double(m.shared_experts) * 3 * h * g;
  const int64_t per_stage = ps.layers_per_stage > 0 ? ps.layers_per_stage : m.layers / ps.pipeline;
  // The most loaded stage of MoE layers (the middle stages hold neither embedding nor head).
  pr.parameters = double(per_stage) * moe_layer;
  notes << "stage: " << per_stage << " MoE layers of " << moe_layer / 1e6 << "M parameters ("
        << (m.attention == "mla" ? "MLA" : "GQA") << " attention " << attention / 1e6 << "M, " << local_experts
        << " local experts, " << m.shared_experts << " shared), no embedding or head; ";
  const double bytes_per_param = ps.bytes_param + ps.bytes_grad + ps.bytes_optimizer;
  pr.static_bytes = pr.parameters * bytes_per_param;
  notes << bytes_per_param << " bytes per parameter (Eq. 1); ";
  PaperModel pm;
  pm.D_t = ps.bytes_param, pm.b = double(m.micro_batch), pm.s = double(m.seq), pm.h = h, pm.a = H;
  pm.h_d = double(m.head_dim), pm.k_a = double(m.kv_heads), pm.e_n = double(m.experts), pm.g_e = g;
  pm.m_g = ps.m_g, pm.static_bytes = pr.static_bytes, pm.alpha = ps.alpha, pm.device_bytes = double(ps.device_memory);
  notes << "h_d = " << m.head_dim << ", k_a = " << m.kv_heads << ", m_g = " << ps.m_g << ", alpha = " << ps.alpha
        << "; ";
  std::string rnote;
  if (ps.received == "figure2")
    pr.received = figure2_received(ps, int64_t(local_experts), rnote);
  else
    pr.received = std::stod(ps.received), rnote = "s' given";
  notes << rnote;
  pr.s_recv_max = pm.s_recv_max();
  return {pr, pm, notes.str()};
}
}  // namespace

std::optional<PaperRow> paper_row(const StrategyShape& s) {
  if (s.capacity_factor > 0) return std::nullopt;
  if (s.experts == ExpertStorage::BufferFree) return PaperRow{1, s.keep_act ? 3.0 : 2.0};
  if (s.recompute_layer && s.moe != MoeMode::RecomputedBlock) return PaperRow{};
  return std::nullopt;
}

PaperScale::PaperScale(const ExperimentConfig& c) {
  Setup s = setup(c);
  base_ = s.pr, pm_ = s.pm, notes_ = s.notes;
}

PaperModel PaperScale::with_rows(const StrategyShape& s) const {
  PaperModel pm = pm_;
  const PaperRow row = paper_row(s).value_or(PaperRow{});
  pm.row_h = row.h, pm.row_g = row.g;
  return pm;
}

bool PaperScale::fits(const StrategyShape& s) const {
  return covers(s) && with_rows(s).fits(base_.received, double(s.chunks));
}

PaperProjection PaperScale::project(const StrategyShape& s, bool found) const {
  PaperProjection pr = base_;
  const PaperModel pm = with_rows(s);
  pr.chunks = found ? s.chunks : -1;
  pr.s_recv_max = pm.s_recv_max();
  pr.assumptions = notes_;
  if (pm.row_h != 2 || pm.row_g != 2)
    pr.assumptions += "; per received row " + std::to_string(int(pm.row_h)) + "h + " + std::to_string(int(pm.row_g)) +
                      "g_e kept (Eq. 2: 2h + 2g_e)";
  pr.activation_bytes = pm.activation(pr.received, double(s.chunks));
  pr.fits = pr.chunks > 0 && pm.fits(pr.received, double(s.chunks));
  return pr;
}

}  // namespace memfine
