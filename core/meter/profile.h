// A trace of one step (`memfine run --profile DIR`): every operator on the host and every kernel
// and copy on the GPU, from LibTorch's Kineto profiler, for Perfetto (ui.perfetto.dev) or
// chrome://tracing and for scripts/trace_summary.py. It shows where a step's time goes where the
// step's timer cannot: host gaps between kernels, launches, copies. Only builds against a CUDA
// LibTorch have it (Debian's CPU LibTorch 1.13 is built without Kineto).
#pragma once
#include <functional>
#include <string>

namespace memfine {

// Whether this build can write traces.
bool step_profiler_available();

// Runs `step` with the profiler on and writes its trace to `path` (JSON); throws
// std::runtime_error where the build has no profiler or the trace cannot be written.
void profile_step(const std::string& path, const std::function<void()>& step);

// The CUDA caching allocator's history of one step (`memfine run --memory-history DIR`): every
// allocation and free with the C++ frames that made it, pickled as PyTorch's memory snapshot
// (torch.cuda.memory._snapshot's format) for scripts/memory_history.py, which names what is alive
// at the peak. CUDA builds only: elsewhere memory_history_step throws std::runtime_error.
bool memory_history_available();
void memory_history_step(const std::string& path, const std::function<void()>& step);

}  // namespace memfine
