// Baseline: activation offloading (Megatron-Core's fine-grained activation offloading,
// --fine-grained-activation-offloading --offload-modules ...): the tensors autograd saves inside
// the chosen modules leave the device after their forward and come back, a layer's group at a
// time and `prefetch` layers ahead, for their backward (core/strategy/offload.h). Nothing is
// recomputed unless asked: `experts: moe_act` recomputes the expert activation (Megatron's advice:
// recompute what is cheap, offload what is not), and `chunks` > 1 runs the MoE in MemFine's token
// chunks, recomputed chunk by chunk, while the rest of the layer is stored and offloaded; `format`
// compresses what is offloaded: the host receives FP8 (or bfloat16) codes, decoded when they come
// back (core/strategy/codec.h; lossy, as `compress` is).
#include "core/strategy/offload.h"
#include "core/strategy/shared_params.h"
#include "core/strategy/registry.h"

namespace memfine {
namespace {

ParamsOf<StrategyShape> params() {
  using S = StrategyShape;
  ParamsOf<S> p;
  p.add(nest(&S::offload, offload_params({"core_attn", "expert_fc1"})));
  std::map<std::string, std::string> experts_words = experts_phrases();
  experts_words.erase("buffer_free");  // not one of its choices
  p.add(bind(&S::experts, said(enum_param("experts",
                                          "how each expert keeps its activations: 'stored' or 'moe_act' (SiLU(a)*b "
                                          "recomputed in backward, as moe_act_recompute)",
                                          ExpertStorage::Stored, {ExpertStorage::Stored, ExpertStorage::ActRecomputed}),
                               experts_phrase(), experts_words)));
  p.add(moe_chunks_param("the rest of the layer stored"));
  // Compress what is offloaded: the codes go to the host.
  p.add(nest(&S::offload, codec_params(StoredAs::Plain)));
  return p;
}

StrategyInfo info() {
  StrategyInfo i = shaped(
      "offload",
      "activation offloading: what autograd saves in the chosen modules moves to host memory after their forward "
      "and back for their backward (Megatron's fine-grained offloading); on a CPU the copies' times are modelled",
      params(), [](const StrategyShape& s) { return s; });
  return checked(i, params(), [](const StrategyShape& s, const ExperimentConfig& c) {
    check_moe_chunks(s.chunks, c);
    if (s.offload.margin >= c.model.layers)
      return std::string("margin keeps every layer's activations on the device: nothing is offloaded");
    return std::string();
  });
}

std::vector<FieldSpec> counters() {
  std::vector<FieldSpec> c = Offloader::counter_fields();
  for (const auto& f : Offloader::encoding_counter_fields()) c.push_back(f);
  return c;
}

MEMFINE_REGISTER_STRATEGY(drawn(with_counters(info(), counters()), "#2ca02c", "*"));

}  // namespace
}  // namespace memfine
