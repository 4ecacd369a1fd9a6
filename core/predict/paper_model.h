// The paper's memory model: MemFine's Eq. 1-3 and 8-9 (static memory, per-layer activation with
// s and s' terms, feasibility, s'_max and the chunk count rounded up to a bin), for projections at
// paper scale without running anything.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace memfine {

// Symbols as in the paper (see experiments/README.md).
struct PaperModel {
  // Sizes (Table 1): D_t bytes per element, b micro-batch, s sequence, h hidden, a heads,
  // h_d head dim, k_a kv heads, e_n routed experts (router output width), g_e expert FFN width,
  // t tensor-parallel, c context-parallel, m_g stored layers' worth of activations.
  double D_t = 2, b = 1, s = 4096, h = 7168, a = 128, h_d = 192, k_a = 128, e_n = 256, g_e = 2048;
  double t = 1, c = 1, m_g = 1;
  double static_bytes = 0;                  // M^sta (Eq. 1), computed by the caller from parameter counts
  double alpha = 1.0, device_bytes = 64e9;  // Eq. 3
  // Widths kept per received row, in h and in g_e: Eq. 2 has 2h + 2g_e. A buffer-free expert
  // keeps z = [a | b] (2 g_e, 3 with SiLU(a) * b) and, under expert parallelism, the arrived row
  // once (1 h): no routed copy and no kept output.
  double row_h = 2, row_g = 2;
  // Eq. 2, split in its two terms.
  double activation_s_part() const { return m_g / (t * c) * D_t * b * s * (5 * h + a * h_d + 2 * k_a * h_d + e_n); }
  double bytes_per_received() const { return m_g / (t * c) * D_t * b * (row_h * h + row_g * g_e); }
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

// A strategy's chunk count under the paper's model: `chunks` (-1: no bin fits) and `used`, the
// count its activation is computed with (the largest bin when none fits).
struct PaperChunks {
  int64_t chunks = 1, used = 1;
  double row_h = 2, row_g = 2;  // what it keeps per received row (PaperModel::row_h, row_g)
};

// The paper's Table 4 at paper scale, from Eq. 1-3 and 8-9 with DeepSeek-V3 parameter counts.
struct PaperProjection {
  double parameters = 0;    // on the most loaded pipeline stage
  double static_bytes = 0;  // Eq. 1
  double activation_bytes = 0;
  double received = 0;      // s'
  double s_recv_max = 0;    // Eq. 8
  int64_t chunks = 1;       // the method's chunk count (MACT: Eq. 9 and the bins); -1: none fits
  bool fits = false;        // Eq. 3
  std::string assumptions;  // one line per assumption
};

// The inputs of a strategy's choice at paper scale: s' and s'_max (Eq. 8).
struct PaperScale {
  double received = 0, s_recv_max = 0;
};
PaperScale paper_scale(const ExperimentConfig& c);
// The projection for a strategy's chunk count at that scale.
PaperProjection project_paper(const ExperimentConfig& c, const PaperChunks& chunks);

}  // namespace memfine
