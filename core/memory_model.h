// The memory model, at two levels.
//  * Paper model: MemFine's Eq. 1-3 and 8-9 (static memory, per-layer activation with s and s'
//    terms, feasibility, s'_max and the chunk count rounded up to a bin), for projections at
//    paper scale without running anything.
//  * Implementation model: byte-level accounting of what this code keeps during a step (the
//    tensors autograd saves, stage by stage) and the transients on top, for a config, strategy,
//    chunk count and routing. MACT uses it when running for real.
//    It accounts ATen's dispatch and combine (kernels: aten). With the fused kernels a step keeps
//    less, and the model mostly reads high: -1.4% .. +16.3% on experiments/kernels.yaml
//    (paper_figures/kernels_table.md); MACT's headroom covers the low side. Accounting the fused
//    ops' smaller saved set alone is not enough (it then reads up to 6% low under imbalance): with
//    less kept for backward, the peak moves to the hottest expert's SwiGLU in the (recomputed)
//    forward, a transient this model does not account yet.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/ep_rank.h"

namespace memfine {

// ---- Paper model (symbols as in the paper; see docs in experiments/README.md) ----
struct PaperModel {
  // Sizes (Table 1): D_t bytes per element, b micro-batch, s sequence, h hidden, a heads,
  // h_d head dim, k_a kv heads, e_n routed experts (router output width), g_e expert FFN width,
  // t tensor-parallel, c context-parallel, m_g stored layers' worth of activations.
  double D_t = 2, b = 1, s = 4096, h = 7168, a = 128, h_d = 192, k_a = 128, e_n = 256, g_e = 2048;
  double t = 1, c = 1, m_g = 1;
  double static_bytes = 0;  // M^sta (Eq. 1), computed by the caller from parameter counts
  double alpha = 1.0, device_bytes = 64e9;  // Eq. 3
  // Eq. 2, split in its two terms.
  double activation_s_part() const { return m_g / (t * c) * D_t * b * s * (5 * h + a * h_d + 2 * k_a * h_d + e_n); }
  double bytes_per_received() const { return m_g / (t * c) * D_t * b * (2 * h + 2 * g_e); }
  double activation(double s_recv, double chunks = 1) const {
    return activation_s_part() + bytes_per_received() * s_recv / chunks;
  }
  bool fits(double s_recv, double chunks = 1) const {  // Eq. 3
    return static_bytes + activation(s_recv, chunks) <= alpha * device_bytes;
  }
  double s_recv_max() const {  // Eq. 8
    return (alpha * device_bytes - static_bytes - activation_s_part()) / bytes_per_received();
  }
};

// Eq. 9 and the bin rule: c = ceil(s'' / s'_max), then the smallest bin >= c; -1 if none fits.
int64_t chunks_for(double s_recv, double s_recv_max, const std::vector<int64_t>& bins);


// ---- Implementation model ----
// How the MoE of a layer runs, as the model needs it.
enum class MoeMode { Stored, RecomputedBlock, Chunked };

struct StrategyShape {
  bool recompute_layer = false;  // full_recompute, memfine
  MoeMode moe = MoeMode::Stored;
  int64_t chunks = 1;            // Chunked only; 0 = chosen per layer and step (MACT)
};

// The shape of a registered strategy spec, or throws std::invalid_argument for one it cannot model.
StrategyShape strategy_shape(const StrategySpec& spec);

struct Prediction {
  int64_t static_bytes = 0;
  int64_t activation_bytes = 0;
  std::string phase;                // where the peak happens, e.g. "backward of layer 1, MoE chunk 0"
  std::vector<int64_t> layer_peak;  // the peak while each layer's backward runs
  int64_t loss_peak = 0;            // the peak of the loss's backward (no chunking changes it)
};

// Predicts static bytes and the activation peak of one training step of the emulated rank.
// `chunks_per_layer` overrides the chunk count per layer (MACT); empty = the shape's.
Prediction predict_step(const ExperimentConfig& c, const EmulatedRank& rank, const StrategyShape& s,
                        const std::vector<int64_t>& chunks_per_layer = {});

}  // namespace memfine

namespace memfine {

// The paper's Table 4 at paper scale, from Eq. 1-3 and 8-9 with DeepSeek-V3 parameter counts.
struct PaperProjection {
  double parameters = 0;      // on the most loaded pipeline stage
  double static_bytes = 0;    // Eq. 1
  double activation_bytes = 0;
  double received = 0;        // s'
  double s_recv_max = 0;      // Eq. 8
  int64_t chunks = 1;         // the method's chunk count (MACT: Eq. 9 and the bins); -1: none fits
  bool fits = false;          // Eq. 3
  std::string assumptions;    // one line per assumption
};

// For a strategy: full_recompute (c = 1), memfine with fixed chunks, memfine chunks: auto.
PaperProjection project_paper(const ExperimentConfig& c, const StrategySpec& s);

}  // namespace memfine
