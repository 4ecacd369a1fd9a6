// Runs the CUDA kernels against a CPU reference where a GPU exists; elsewhere says why it cannot.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "core/moe_kernels.h"

int main() {
  std::printf("memfine_cuda_check: NCCL %d\n", memfine::cuda::nccl_version());
  if (memfine::cuda::device_count() == 0) {
    std::printf("memfine_cuda_check: no CUDA device here; kernels compiled and linked, not run\n");
    return 0;
  }
  const int64_t rows = 1000, hidden = 384, tokens = 300;
  std::vector<float> x(tokens * hidden), w(rows);
  std::vector<int64_t> idx(rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(double(i)));
  for (int64_t r = 0; r < rows; ++r) idx[r] = (r * 7919) % tokens, w[r] = 0.5f + float(r % 3);
  float *dx, *dg, *dy, *dw;
  int64_t* di;
  cudaMalloc(&dx, x.size() * 4), cudaMalloc(&dg, rows * hidden * 4), cudaMalloc(&dy, x.size() * 4);
  cudaMalloc(&dw, rows * 4), cudaMalloc(&di, rows * 8);
  cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, w.data(), rows * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(di, idx.data(), rows * 8, cudaMemcpyHostToDevice);
  cudaMemset(dy, 0, x.size() * 4);
  memfine::cuda::gather_rows(dx, di, dg, rows, hidden, nullptr);
  memfine::cuda::scatter_add_rows(dg, di, dw, dy, rows, hidden, nullptr);
  std::vector<float> y(x.size()), ref(x.size(), 0.0f);
  cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < hidden; ++j) ref[idx[r] * hidden + j] += w[r] * x[idx[r] * hidden + j];
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) worst = std::fmax(worst, std::fabs(double(y[i] - ref[i])));
  std::printf("memfine_cuda_check: gather + weighted scatter-add, max abs error %.3g\n", worst);
  return worst < 1e-3 ? 0 : 1;
}
