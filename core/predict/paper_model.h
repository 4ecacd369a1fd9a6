// The paper's memory model: MemFine's Eq. 1-3 and 8 (static memory, per-layer activation with s
// and s' terms, feasibility, s'_max), for projections at paper scale without running anything. Its
// Eq. 9 (the chunk count rounded up to a bin) is MACT's rule (core/strategy/memfine/mact.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/moe/shape.h"

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

// What a shape keeps per received row in the paper's model, in widths of h and g_e: Eq. 2's 2h +
// 2g_e for a layer recomputed whole with its experts' rows kept (in one pass or chunk by chunk);
// buffer-free experts keep z (2 g_e, 3 with SiLU(a) * b) and the arrived row once (1 h). nullopt
// where Eq. 2 does not describe the shape (a layer stored whole, capacity capping).
struct PaperRow {
  double h = 2, g = 2;
};
std::optional<PaperRow> paper_row(const StrategyShape& s);

// The paper's Table 4 at paper scale, from Eq. 1-3 and 8-9 with DeepSeek-V3 parameter counts.
struct PaperProjection {
  double parameters = 0;    // on the most loaded pipeline stage
  double static_bytes = 0;  // Eq. 1
  double activation_bytes = 0;
  double received = 0;      // s'
  double s_recv_max = 0;    // Eq. 8
  int64_t chunks = 1;       // the shape's chunk count; -1: its strategy planned and no bin fits
  bool fits = false;        // Eq. 3
  std::string assumptions;  // one line per assumption
};

// An experiment's `paper:` section at paper scale: the stage's parameters, s' (Figure 2 read once)
// and the device, for any shape a strategy chooses (Strategy::choose_shape).
class PaperScale {
 public:
  explicit PaperScale(const ExperimentConfig& c);
  bool covers(const StrategyShape& s) const { return paper_row(s).has_value(); }
  bool fits(const StrategyShape& s) const;  // Eq. 3 with its chunks and row widths
  // `found`: false where its strategy planned and nothing fit (chunks -1; the activation with its
  // most chunks).
  PaperProjection project(const StrategyShape& s, bool found) const;

 private:
  PaperModel with_rows(const StrategyShape& s) const;
  PaperProjection base_;
  PaperModel pm_;
  std::string notes_;
};

}  // namespace memfine
