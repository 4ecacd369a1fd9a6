#include "core/strategy/shared_params.h"

#include <stdexcept>

#include "core/config/reader.h"

namespace memfine {

using json = nlohmann::json;

std::vector<Bound<OffloadSpec>> offload_params(std::vector<std::string> default_modules, bool named_modules) {
  std::string names;
  std::vector<std::string> choices;
  for (const auto& [m, n] : offloadable_modules()) names += (names.empty() ? "" : ", ") + n, choices.push_back(n);
  auto read = [choices](const YAML::Node& n) -> json {
    json out = json::array();
    if (!n.IsSequence() || n.size() > choices.size() * 4)
      throw std::invalid_argument("expected a list of module names, e.g. [core_attn, expert_fc1]");
    for (const auto& item : n) out.push_back(choice_value(item, choices));
    return out;
  };
  Param modules{"modules", "the modules whose saved activations leave the device (Megatron's names): " + names,
                "a list of module names", read, json(default_modules)};
  using O = OffloadSpec;
  modules = said(modules, "{modules}");
  return {bind<O>(named_modules ? named(modules) : modules,
                  [](const json& v, O& o) {
                    for (const auto& n : v) o.add(module_named(n.get<std::string>()));
                  }),
          bind(&O::min_bytes, int_param("min_bytes", "saved tensors (their storage) smaller than this stay on the device",
                                        0, 0, int64_t(1) << 40)),
          bind(&O::margin, int_param("margin", "the last N layers keep theirs (their backward comes first)", 0, 0, 1 << 20)),
          bind(&O::prefetch,
               int_param("prefetch", "backward brings a layer's tensors back this many layers ahead", 1, 0, 1 << 20)),
          bind(&O::h2d_gbps,
               said(number_param("h2d_gbps", "host-to-device bandwidth (GB/s) the copy times are modelled with", 35,
                                 1e-3, 1e5),
                    "{v:g} GB/s")),
          bind(&O::d2h_gbps,
               said(number_param("d2h_gbps", "device-to-host bandwidth (GB/s) the copy times are modelled with", 53,
                                 1e-3, 1e5),
                    "{v:g} GB/s"))};
}

std::vector<Bound<OffloadSpec>> codec_params(StoredAs fallback) {
  const bool plain = fallback == StoredAs::Plain;
  std::vector<StoredAs> formats = {StoredAs::Fp8E4m3, StoredAs::Fp8E5m2, StoredAs::Bf16};
  if (plain) formats.insert(formats.begin(), StoredAs::Plain);
  using O = OffloadSpec;
  return {bind(&O::stored_as,
               said(enum_param("format",
                               std::string(plain ? "none (as they are) or encoded: " : "") +
                                   "fp8_e4m3 (3 mantissa bits, largest 448), fp8_e5m2 (2 bits, largest 57344) or "
                                   "bf16 (ATen's bfloat16), decoded for backward (lossy: its gradient error is its "
                                   "result)",
                               fallback, formats),
                    "{v}", {{"fp8_e5m2", "FP8 E5M2"}, {"fp8_e4m3", "FP8 E4M3"}, {"bf16", "bf16"}})),
          bind(&O::scale,
               said(enum_param("scale", "FP8's scale: one per saved tensor, or one per block of `rows` rows",
                               CodecScale::Tensor),
                    "scale {v}", {{"tensor", "scale per tensor"}, {"rows", "scale per row"}})),
          bind(&O::rows, int_param("rows", "rows of a saved tensor (its last dimension) per scale, with scale: rows",
                                   128, 1, int64_t(1) << 30))};
}

Bound<StrategyShape> skip_dead_param() {
  return bind(&StrategyShape::skip_dead,
              said(bool_param("skip_dead",
                         "the probabilities weigh the experts' activation (Megatron's arrangement, the same sums) and "
                         "the replay for backward skips the experts' second GEMM and the combine, whose outputs "
                         "backward never reads (Megatron-LM PR #7416); on real ranks the probabilities travel with the "
                         "rows and the way back is skipped too (ATen kernels)",
                         false),
                   "", {{"true", "skips unused fc2+combine"}, {"false", ""}}));
}

Bound<StrategyShape> moe_chunks_param(const std::string& rest) {
  return bind<StrategyShape>(
      said(int_param("chunks", "1: the MoE stored; more: in this many token chunks, recomputed chunk by chunk "
                     "(MemFine's FCDA), " + rest, 1, 1, int64_t(1) << 30),
           "{v} chunks", {{"1", "1 chunk"}}),
      [](const json& v, StrategyShape& s) {
        s.chunks = v.get<int64_t>();
        if (s.chunks > 1) s.moe = MoeMode::Chunked;
      });
}

void check_moe_chunks(int64_t chunks, const ExperimentConfig& c) {
  if (chunks > c.model.tokens())
    throw std::invalid_argument("chunks: " + std::to_string(chunks) + " exceeds the tokens per rank (" +
                                std::to_string(c.model.tokens()) + ")");
}

}  // namespace memfine
