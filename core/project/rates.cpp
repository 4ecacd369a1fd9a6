#include "core/project/rates.h"

#include <algorithm>
#include <cmath>

#include "core/model/flops.h"
#include "core/util/format.h"

namespace memfine {

double curve_at(const std::vector<std::pair<double, double>>& c, double x) {
  if (x <= c.front().first) return c.front().second;
  for (size_t i = 1; i < c.size(); ++i)
    if (x <= c[i].first) {
      const double f = std::log(x / c[i - 1].first) / std::log(c[i].first / c[i - 1].first);
      return c[i - 1].second + f * (c[i].second - c[i - 1].second);
    }
  return c.back().second;
}

double grouped_rate(const Hardware& hw, double rows) {
  if (!hw.grouped_gemm_curve.empty()) return curve_at(hw.grouped_gemm_curve, rows) * 1e12;
  const double f = std::min(1.0, rows / hw.grouped_gemm_knee_rows);
  return (hw.grouped_gemm_small_tflops + f * (hw.grouped_gemm_tflops - hw.grouped_gemm_small_tflops)) * 1e12;
}

double expert_gemm_rate(const Hardware& hw, double rows, double h, double g, double experts) {
  double curve = grouped_rate(hw, rows);
  if (!hw.grouped_gemm_work_curve.empty() && rows > 0)
    curve =
        std::min(curve, curve_at(hw.grouped_gemm_work_curve, experts * expert_forward_flops(rows, h, g) / 1e9) * 1e12);
  if (hw.gemm_table.empty() || rows <= 0) return curve;
  // Forward and both gradients of FC1 (h to 2g) and FC2 (g to h), as expert_kernels times them.
  return std::max(curve, 3 * expert_forward_flops(rows, h, g) / expert_kernels(hw, rows, h, g, 0).gemm_s);
}

const std::vector<Fp8Recipe>& fp8_recipes() {
  static const std::vector<Fp8Recipe> recipes = {
      {"fp8", "fp8_gemm_speedup_curve", &Hardware::fp8_gemm_speedup_curve, "per-tensor scaled E4M3"},
      {"fp8_blockwise", "fp8_blockwise_gemm_speedup_curve", &Hardware::fp8_blockwise_gemm_speedup_curve,
       "DeepSeek's block scaling: 1 x 128 activations, 128 x 128 weights"},
      {"mxfp8", "mxfp8_gemm_speedup_curve", &Hardware::mxfp8_gemm_speedup_curve,
       "MXFP8: E4M3 with a power-of-two scale a 32-element block"}};
  return recipes;
}

const Fp8Recipe* fp8_recipe(const std::string& precision) {
  for (const Fp8Recipe& r : fp8_recipes())
    if (precision == r.precision) return &r;
  return nullptr;
}

double fp8_speedup(const Hardware& hw, double rows, const std::string& precision) {
  const Fp8Recipe* r = fp8_recipe(precision);
  return !r || (hw.*r->curve).empty() ? 1 : curve_at(hw.*r->curve, rows);
}

double attention_rate(const Hardware& hw, double head_dim, bool sinks) {
  const auto& c = hw.attention_head_dim_curve;
  const double at128 = c.empty() ? 0 : curve_at(c, 128);
  if (sinks && !hw.sink_attention_head_dim_curve.empty() && at128 > 0)
    return hw.attention_tflops * curve_at(hw.sink_attention_head_dim_curve, head_dim) / at128 * 1e12;
  return hw.attention_tflops * (c.empty() ? 1 : curve_at(c, head_dim) / at128) * 1e12;
}

double gemm_rate(const Hardware& hw, double m, double n, double k) {
  const GemmTable& t = hw.gemm_table;
  if (t.empty()) return hw.gemm_tflops * 1e12;
  // Along one axis: the point below (clamped to the axis) and the weight of the one above.
  struct Bracket {
    size_t i;
    double w;
  };
  auto bracket = [](const std::vector<double>& a, double v) {
    if (a.size() == 1 || v <= a.front()) return Bracket{0, 0};
    if (v >= a.back()) return Bracket{a.size() - 2, 1};
    const size_t i = size_t(std::upper_bound(a.begin(), a.end(), v) - a.begin()) - 1;
    return Bracket{i, std::log(v / a[i]) / std::log(a[i + 1] / a[i])};
  };
  const Bracket bm = bracket(t.m, m), bn = bracket(t.n, n), bk = bracket(t.k, k);
  double rate = 0;
  for (int dm = 0; dm < 2; ++dm)
    for (int dn = 0; dn < 2; ++dn)
      for (int dk = 0; dk < 2; ++dk) {
        const double w = (dm ? bm.w : 1 - bm.w) * (dn ? bn.w : 1 - bn.w) * (dk ? bk.w : 1 - bk.w);
        if (w == 0) continue;
        rate += w * t.tflops[((bm.i + dm) * t.n.size() + bn.i + dn) * t.k.size() + bk.i + dk];
      }
  return rate * 1e12;
}

double accumulate_seconds(const Hardware& hw, double h, double g, double accumulate_bytes) {
  return hw.hbm_gb_s > 0 ? 3 * h * g * accumulate_bytes / (hw.hbm_gb_s * 1e9) : 0;
}

ExpertKernels expert_kernels(const Hardware& hw, double rows, double h, double g, double accumulate_bytes) {
  ExpertKernels k;
  if (rows <= 0) return k;
  for (const auto& [n, in] : {std::pair{2 * g, h}, std::pair{h, g}}) {
    const double f = 2 * rows * n * in;
    k.gemm_s += f / gemm_rate(hw, rows, n, in) + f / gemm_rate(hw, rows, in, n) + f / gemm_rate(hw, in, n, rows);
  }
  k.accumulate_s = accumulate_seconds(hw, h, g, accumulate_bytes);
  return k;
}

}  // namespace memfine

namespace memfine {

std::string grouped_rate_note(const Hardware& hw) {
  std::string curve;
  for (const auto& [rows, tflops] : hw.grouped_gemm_curve)
    curve += (curve.empty() ? "" : ", ") + four_digits(tflops) + " at " + four_digits(rows);
  if (curve.empty())
    return four_digits(hw.grouped_gemm_small_tflops) + "-" + four_digits(hw.grouped_gemm_tflops) +
           " by rows per expert (knee " + four_digits(hw.grouped_gemm_knee_rows) + ")";
  const auto& w = hw.grouped_gemm_work_curve;
  const std::string work = w.empty() ? ""
                                     : ", at most the preset's rate by a call's work (" +
                                           four_digits(w.front().second) + " at " + four_digits(w.front().first) +
                                           " to " + four_digits(w.back().second) + " at " +
                                           four_digits(w.back().first) + " GFLOP of a layer's local experts' forward)";
  return "by rows per expert on the preset's curve (" + curve + " rows)" + work +
         (hw.gemm_table.empty()
              ? ""
              : " or, where faster, on the dense table at one expert's shape (TE runs a GEMM an expert)");
}

std::string attention_rate_note(const Hardware& hw, int64_t head_dim, bool sinks) {
  return four_digits(hw.attention_tflops) +
         (hw.attention_head_dim_curve.empty()
              ? ""
              : " at head dim 128, by head dim on the preset's curve (" + four_digits(attention_rate(hw, 64) / 1e12) +
                    " at 64)") +
         (sinks ? "; with the model's learnable sinks, the kernel Transformer Engine runs for them at " +
                      four_digits(attention_rate(hw, double(head_dim), true) / 1e12) + " at its head dim " +
                      std::to_string(head_dim) + " (the preset's sink curve)"
                : "");
}

std::string gemm_rate_note(const Hardware& hw) {
  if (hw.gemm_table.empty()) return "at " + four_digits(hw.gemm_tflops) + " TFLOP/s";
  return "by shape on the preset's table (" + four_digits(gemm_rate(hw, 4096, 4096, 4096) / 1e12) +
         " TFLOP/s at 4096 rows x 4096 x 4096, " + four_digits(gemm_rate(hw, 4096, 1024, 1024) / 1e12) +
         " at 4096 x 1024 x 1024)";
}

}  // namespace memfine
