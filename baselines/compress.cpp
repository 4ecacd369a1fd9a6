// 8-bit activation storage (COAT, arXiv 2410.19313; FP8-Flow-MoE, arXiv 2511.02302): what autograd
// saves inside the chosen modules stays on the device as FP8 codes (or bfloat16) with a scale, and
// is decoded when the layer's backward begins (core/strategy/codec.h, through offloading's hooks:
// core/strategy/offload.h). Integer and boolean tensors (indices, the causal mask) stay as they are.
// It trades gradient accuracy for memory: its gradient error against the plain computation is its
// result, recorded in every record, never held to verify's tolerance. `chunks` > 1 composes it with
// MemFine's chunks (the MoE recomputed chunk by chunk, the rest of the layer stored encoded); with
// offloading, `offload`'s `format` sends the codes to the host instead.
#include <stdexcept>

#include "core/strategy/offload.h"
#include "core/strategy/shared_params.h"
#include "core/strategy/registry.h"

namespace memfine {
namespace {

ParamsOf<StrategyShape> params() {
  std::vector<std::string> all;
  for (const auto& [m, n] : offloadable_modules()) all.push_back(n);
  using S = StrategyShape;
  std::vector<Bound<OffloadSpec>> kept;
  for (Bound<OffloadSpec> q : offload_params(all, false)) {
    if (q.param.name == "modules")
      q.param.help = "the modules whose saved activations are stored encoded (Megatron's names)";
    else if (q.param.name == "min_bytes")
      q.param.help = "saved tensors (their storage) smaller than this are kept as they are";
    else
      continue;
    kept.push_back(q);
  }
  ParamsOf<S> p;
  p.add(nest(&S::offload, kept));
  p.add(nest(&S::offload, codec_params(StoredAs::Fp8E4m3)));
  p.add(moe_chunks_param("the rest of the layer stored encoded"));
  return p;
}

StrategyInfo info() {
  StrategyInfo i = shaped(
      "compress",
      "8-bit activation storage (COAT, FP8-Flow-MoE): saved activations of the chosen modules kept as FP8 codes with "
      "a scale, decoded for backward; lossy: its gradient error is its result",
      params(), [](StrategyShape s) {
        s.offload.prefetch = 0;  // decoded when the layer's own backward begins
        s.offload.to_host = false;
        return s;
      });
  return checked(i, params(), [](const StrategyShape& s, const ExperimentConfig& c) {
    check_moe_chunks(s.chunks, c);
    if (s.offload.stored_as == StoredAs::Bf16 && c.dtype == "bfloat16")
      return std::string("format bf16 on a bfloat16 run stores nothing smaller");
    return std::string();
  });
}

MEMFINE_REGISTER_STRATEGY(drawn(with_counters(info(), Offloader::encoding_counter_fields()), "#9467bd", "h"));

}  // namespace
}  // namespace memfine
