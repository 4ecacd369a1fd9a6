#include "core/predict/paper_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace memfine {

int64_t chunks_for(double s_recv, double s_recv_max, const std::vector<int64_t>& bins) {
  if (s_recv_max <= 0) return -1;
  const int64_t c = std::max<int64_t>(1, int64_t(std::ceil(s_recv / s_recv_max)));
  for (int64_t b : bins)
    if (b >= c) return b;
  return -1;
}

namespace {
double figure2_received(const PaperScaleConfig& ps, int64_t local_experts, std::string& note) {
  std::ifstream in(ps.figure2);
  std::string line;
  std::getline(in, line);  // header
  double best = 0;
  int64_t best_layer = -1;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string layer, p99;
    std::getline(ss, layer, ',');
    std::getline(ss, p99, ',');
    if (std::stod(p99) > best) best = std::stod(p99), best_layer = std::stoll(layer);
  }
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
  // DeepSeek-V3 MLA: q down/up with q_lora_rank, kv down (+ rope key) and up, output projection.
  const double qk = double(ps.qk_nope_dim + ps.qk_rope_dim);
  const double attention = h * double(ps.q_lora_rank) + double(ps.q_lora_rank) * H * qk +
                           h * double(ps.kv_lora_rank + ps.qk_rope_dim) +
                           double(ps.kv_lora_rank) * H * double(ps.qk_nope_dim + ps.v_head_dim) +
                           H * double(ps.v_head_dim) * h + double(ps.q_lora_rank + ps.kv_lora_rank) + 2 * h;
  const double local_experts = double(m.experts / c.ep);
  const double moe_layer =
      attention + h * double(m.experts) + local_experts * 3 * h * g + double(m.shared_experts) * 3 * h * g;
  const int64_t per_stage = ps.layers_per_stage > 0 ? ps.layers_per_stage : m.layers / ps.pipeline;
  // The most loaded stage of MoE layers (the middle stages hold neither embedding nor head).
  pr.parameters = double(per_stage) * moe_layer;
  notes << "stage: " << per_stage << " MoE layers of " << moe_layer / 1e6 << "M parameters (MLA attention "
        << attention / 1e6 << "M, " << local_experts << " local experts, " << m.shared_experts
        << " shared), no embedding or head; ";
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

PaperScale paper_scale(const ExperimentConfig& c) {
  const Setup s = setup(c);
  return {s.pr.received, s.pr.s_recv_max};
}

PaperProjection project_paper(const ExperimentConfig& c, const PaperChunks& chunks) {
  Setup s = setup(c);
  PaperProjection& pr = s.pr;
  pr.chunks = chunks.chunks;
  s.pm.row_h = chunks.row_h, s.pm.row_g = chunks.row_g;
  pr.s_recv_max = s.pm.s_recv_max();
  if (chunks.row_h != 2 || chunks.row_g != 2)
    s.notes += "; per received row " + std::to_string(int(chunks.row_h)) + "h + " + std::to_string(int(chunks.row_g)) +
               "g_e kept (Eq. 2: 2h + 2g_e)";
  pr.activation_bytes = s.pm.activation(pr.received, double(chunks.used));
  pr.fits = pr.chunks > 0 && s.pm.fits(pr.received, double(chunks.used));
  pr.assumptions = s.notes;
  return pr;
}

}  // namespace memfine
