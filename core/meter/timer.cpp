#include "core/meter/timer.h"

#include <stdexcept>

#ifdef MEMFINE_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace memfine {

void synchronize_device(const std::string& device) {
  if (device == "cpu") return;
#ifdef MEMFINE_TORCH_CUDA
  if (device == "cuda") {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error while timing: ") + cudaGetErrorString(e));
    return;
  }
#endif
  throw std::invalid_argument("memfine: cannot time device '" + device + "' in this build");
}

}  // namespace memfine
