// The threads a run computes with: LibTorch's intra-op pool and OpenBLAS's own.
#pragma once
#include <cstdint>

namespace memfine {

// Sets LibTorch's intra-op threads (0 = all cores) and OpenBLAS's, and returns the count in effect.
int64_t apply_threads(int64_t threads);

}  // namespace memfine
