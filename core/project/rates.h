// The kernel-level rates a projection divides work by, each from a hardware preset's measured
// figures (experiments/project/hardware.yaml names their sources): dense GEMMs by shape, the grouped
// expert GEMM by rows per expert, attention by head dim and by the kernel a model's attention needs.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/project/config.h"

namespace memfine {

// A measured curve's value at x, interpolated log-linearly in x, flat beyond its ends.
double curve_at(const std::vector<std::pair<double, double>>& c, double x);

// The grouped expert GEMM's rate (FLOP/s) at `rows` per expert: a measured curve, log-linear in
// rows between its points; or the small shapes' rate rising linearly to the large shapes' at the knee.
double grouped_rate(const Hardware& hw, double rows);
// How it is taken, as the projection's notes say it.
std::string grouped_rate_note(const Hardware& hw);

// The rate (FLOP/s) a local expert's GEMMs run at, `rows` each, hidden h and expert width g, beside
// `experts` - 1 others in the layer's grouped call: the grouped GEMM's curve at its rows, at most the
// work curve's at the call's work, or the dense table at one expert's shape where that is the
// faster. Transformer Engine's grouped GEMM on Hopper runs one cuBLAS GEMM per expert (expert_kernels
// below), so it is no slower than those GEMMs alone; the curve is the faster where its kernels run
// several experts' few rows at once.
double expert_gemm_rate(const Hardware& hw, double rows, double h, double g, double experts);

// Each FP8 precision a project file names: the hardware key of its FP8-over-bf16 curve, the member
// that holds it and its scaling as the key's help says it; the one list the key, the check and the
// rate read.
struct Fp8Recipe {
  const char* precision;
  const char* key;
  std::vector<std::pair<double, double>> Hardware::*curve;
  const char* scaling;
};
const std::vector<Fp8Recipe>& fp8_recipes();
// The recipe of a project's precision; nullptr for bf16.
const Fp8Recipe* fp8_recipe(const std::string& precision);
// A linear's GEMM in `precision` over the same in bf16 at `rows` (the GEMM's m): the preset's
// measured curve for it, log-linear in rows between its points; 1 in bf16 or where the preset has
// none.
double fp8_speedup(const Hardware& hw, double rows, const std::string& precision);

// The attention kernel's rate (FLOP/s) at a head dim: attention_tflops (head dim 128) scaled by the
// preset's head-dim curve, its value there over its value at 128; or attention_tflops alone. With
// learnable softmax sinks (`sinks`), the kernel frameworks run for them instead: the preset's sink
// curve at the head dim over the head-dim curve's value at 128 (the same benchmark's two kernels).
double attention_rate(const Hardware& hw, double head_dim, bool sinks = false);
// How it is taken for a model of `head_dim` (with its sinks' kernel where `sinks`).
std::string attention_rate_note(const Hardware& hw, int64_t head_dim, bool sinks);

// A dense GEMM's rate (FLOP/s) at m rows, n outputs, k inputs: the preset's table, linear in the
// logarithms of m, n and k between its points and flat beyond them; or its one rate.
double gemm_rate(const Hardware& hw, double m, double n, double k);
std::string gemm_rate_note(const Hardware& hw);

// One local expert's GEMMs of a micro-batch at `rows` (hidden h, expert width g; FC1 h to 2g for
// SwiGLU's two halves, FC2 g to h), forward, data and weight gradients, on the dense GEMM table at
// its shape: Transformer Engine's grouped GEMM on Hopper runs one cuBLAS GEMM per expert
// (multi_stream_cublas_gemm, TransformerEngine d0067d0d common/gemm/cublaslt_gemm.cu). And the
// weight gradients' accumulation into the framework's gradient buffer (Megatron's
// gradient_accumulation_fusion: every weight read and written, `accumulate_bytes` of them, however
// few the rows) at the HBM rate (the step prices the accumulation where it outlasts the product:
// compute.cpp).
struct ExpertKernels {
  double gemm_s = 0, accumulate_s = 0;
};
ExpertKernels expert_kernels(const Hardware& hw, double rows, double h, double g, double accumulate_bytes);
// Seconds one expert's weight gradients (3 x h x g weights) take to be read and written into a
// gradient buffer of `accumulate_bytes` a weight both ways at the HBM rate; 0 without one.
double accumulate_seconds(const Hardware& hw, double h, double g, double accumulate_bytes);

}  // namespace memfine
