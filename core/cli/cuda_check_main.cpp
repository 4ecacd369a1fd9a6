// Runs the CUDA row kernels against their host reference (the same per-row code, walked in order)
// where a GPU exists; elsewhere says why it cannot. Gathers must match bit for bit; scatter-adds and
// dot products only to rounding, since the GPU adds in another order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/moe/kernels.h"

namespace {

using memfine::rows::DType;

struct Buffers {
  std::vector<unsigned char> x, table, weight;
  std::vector<int64_t> src, dst, dot;  // dot: the combine backward's rows, never padding
};

size_t element_size(DType t) { return t == DType::f64 ? 8 : t == DType::f32 ? 4 : 2; }

double value(DType t, const std::vector<unsigned char>& b, size_t i) {
  if (t == DType::f64) return reinterpret_cast<const double*>(b.data())[i];
  if (t == DType::f32) return reinterpret_cast<const float*>(b.data())[i];
  return memfine::rows::to_acc(reinterpret_cast<const memfine::rows::HostBf16*>(b.data())[i]);
}

void fill(DType t, std::vector<unsigned char>& b, size_t n, double phase) {
  b.assign(n * element_size(t), 0);
  for (size_t i = 0; i < n; ++i) {
    const double v = std::sin(double(i) * 0.37 + phase);
    if (t == DType::f64) reinterpret_cast<double*>(b.data())[i] = v;
    if (t == DType::f32) reinterpret_cast<float*>(b.data())[i] = float(v);
    if (t == DType::bf16)
      reinterpret_cast<memfine::rows::HostBf16*>(b.data())[i] =
          memfine::rows::Store<memfine::rows::HostBf16>::from(float(v));
  }
}

void* to_device(const void* p, size_t bytes) {
  void* d = nullptr;
  cudaMalloc(&d, bytes ? bytes : 1);
  cudaMemcpy(d, p, bytes, cudaMemcpyHostToDevice);
  return d;
}

std::vector<unsigned char> to_host(const void* d, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost);
  return h;
}

// One dtype: returns true when the GPU agrees with the host.
bool check(DType t, const char* name) {
  const int64_t tokens = 300, table_rows = 37, rows = 1000, hidden = 384;
  const size_t es = element_size(t);
  Buffers h;
  fill(t, h.x, tokens * hidden, 0.0);
  fill(t, h.table, table_rows * hidden, 1.0);
  fill(t, h.weight, rows, 2.0);
  for (int64_t r = 0; r < rows; ++r) {
    h.src.push_back(r % 10 == 9   ? memfine::rows::kZeroRow
                    : r % 10 == 8 ? memfine::rows::encode_table_row(r % table_rows)
                                  : (r * 7919) % tokens);
    h.dst.push_back(r % 13 == 0 ? -1 : (r * 104729) % tokens);
    h.dot.push_back((r * 104729) % tokens);
  }
  void* dx = to_device(h.x.data(), h.x.size());
  void* dt = to_device(h.table.data(), h.table.size());
  void* dw = to_device(h.weight.data(), h.weight.size());
  auto* ds = static_cast<int64_t*>(to_device(h.src.data(), rows * 8));
  auto* dd = static_cast<int64_t*>(to_device(h.dst.data(), rows * 8));
  auto* dk = static_cast<int64_t*>(to_device(h.dot.data(), rows * 8));
  void *dg, *dy, *dp;
  cudaMalloc(&dg, rows * hidden * es), cudaMalloc(&dy, tokens * hidden * es), cudaMalloc(&dp, rows * es);
  cudaMemset(dy, 0, tokens * hidden * es);

  // dispatch (gather) -> combine (weighted scatter-add) -> the router weights' gradient (row dot).
  std::vector<unsigned char> g(rows * hidden * es), y(tokens * hidden * es, 0), p(rows * es);
  const memfine::RowKernels& host = memfine::host::kernels();
  const memfine::RowKernels& gpu = memfine::cuda::kernels();
  host.gather_rows(t, h.x.data(), h.table.data(), h.src.data(), nullptr, g.data(), rows, hidden, nullptr);
  host.scatter_add_rows(t, g.data(), nullptr, h.dst.data(), h.weight.data(), y.data(), rows, hidden, nullptr);
  host.row_dot(t, g.data(), nullptr, y.data(), h.dot.data(), p.data(), rows, hidden, nullptr);
  // Each kernel gets the host's inputs, so only summation order separates the results.
  void* dy_in = to_device(y.data(), y.size());
  int err = gpu.gather_rows(t, dx, dt, ds, nullptr, dg, rows, hidden, nullptr);
  err = err ? err : gpu.scatter_add_rows(t, dg, nullptr, dd, dw, dy, rows, hidden, nullptr);
  err = err ? err : gpu.row_dot(t, dg, nullptr, dy_in, dk, dp, rows, hidden, nullptr);
  err = err ? err : int(cudaDeviceSynchronize());
  if (err) {
    std::printf("memfine_cuda_check: %s: CUDA error %d (%s)\n", name, err, cudaGetErrorString(cudaError_t(err)));
    return false;
  }
  const auto gg = to_host(dg, g.size()), yy = to_host(dy, y.size()), pp = to_host(dp, p.size());
  const bool gather_exact = std::memcmp(gg.data(), g.data(), g.size()) == 0;
  // Rounding bounds: u is the unit roundoff of the stored type, ua of the accumulation type.
  const double u = t == DType::f64 ? 0x1p-53 : t == DType::f32 ? 0x1p-24 : 0x1p-8;
  const double ua = t == DType::f64 ? 0x1p-53 : 0x1p-24;
  double worst_scatter = 0, worst_dot = 0;                      // error / bound; <= 1 passes
  std::vector<double> magnitude(size_t(tokens * hidden), 0.0);  // sum of |terms| per output element
  for (int64_t r = 0; r < rows; ++r)
    if (h.dst[r] >= 0)
      for (int64_t j = 0; j < hidden; ++j)
        magnitude[size_t(h.dst[r] * hidden + j)] +=
            std::fabs(value(t, h.weight, r) * value(t, g, size_t(r * hidden + j)));
  for (size_t i = 0; i < magnitude.size(); ++i)
    worst_scatter =
        std::fmax(worst_scatter, std::fabs(value(t, yy, i) - value(t, y, i)) / (8 * u * magnitude[i] + 1e-300));
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0;
    for (int64_t j = 0; j < hidden; ++j)
      m += std::fabs(value(t, g, size_t(r * hidden + j)) * value(t, y, size_t(h.dot[r] * hidden + j)));
    const double bound = (2 * u + double(hidden) * ua) * m + 1e-300;
    worst_dot = std::fmax(worst_dot, std::fabs(value(t, pp, size_t(r)) - value(t, p, size_t(r))) / bound);
  }
  const bool ok = gather_exact && worst_scatter <= 1 && worst_dot <= 1;
  std::printf(
      "memfine_cuda_check: %-8s gather %s; scatter-add error %.2f and row dot error %.2f of their rounding bounds: "
      "%s\n",
      name, gather_exact ? "bit-exact" : "DIFFERS", worst_scatter, worst_dot, ok ? "ok" : "FAILED");
  cudaFree(dy_in);
  for (void* q : {dx, dt, dw, static_cast<void*>(ds), static_cast<void*>(dd), static_cast<void*>(dk), dg, dy, dp})
    cudaFree(q);
  return ok;
}

}  // namespace

int main() {
  std::printf("memfine_cuda_check: NCCL %d\n", memfine::cuda::nccl_version());
  if (memfine::cuda::device_count() == 0) {
    std::printf("memfine_cuda_check: no CUDA device here; kernels compiled and linked, not run\n");
    return 0;
  }
  bool ok = true;
  ok &= check(DType::f32, "float32");
  ok &= check(DType::f64, "float64");
  ok &= check(DType::bf16, "bfloat16");
  return ok ? 0 : 1;
}
