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
#include "core/moe/expert_storage.h"
#include "core/strategy/shared_params.h"
#include "core/strategy/registry.h"

namespace memfine {
namespace {

std::vector<Param> params() {
  std::vector<Param> p = offload_params({"core_attn", "expert_fc1"});
  p.push_back(choice_param("experts",
                           "how each expert keeps its activations: 'stored' or 'moe_act' (SiLU(a)*b recomputed in "
                           "backward, as moe_act_recompute)",
                           "stored", {"stored", "moe_act"}));
  p.push_back(moe_chunks_param("the rest of the layer stored"));
  for (const Param& q : codec_params("none")) p.push_back(q);
  return p;
}

StrategyInfo info() {
  StrategyInfo i = shaped(
      "offload",
      "activation offloading: what autograd saves in the chosen modules moves to host memory after their forward "
      "and back for their backward (Megatron's fine-grained offloading); on a CPU the copies' times are modelled",
      params(), [](const StrategySpec& spec) {
        StrategyShape s;
        s.offload = offload_spec(spec);
        s.experts = parse_expert_storage(spec.value("experts").get<std::string>());
        set_moe_chunks(spec, s);
        set_codec(spec, s.offload);  // compress what is offloaded: the codes go to the host
        return s;
      });
  i.check_point = [](const StrategySpec& spec, const ExperimentConfig& c) {
    check_moe_chunks(spec, c);
    if (spec.value("margin").get<int64_t>() >= c.model.layers)
      return std::string("margin keeps every layer's activations on the device: nothing is offloaded");
    return std::string();
  };
  return i;
}

std::vector<FieldSpec> counters() {
  std::vector<FieldSpec> c = Offloader::counter_fields();
  for (const auto& f : Offloader::encoding_counter_fields()) c.push_back(f);
  return c;
}

MEMFINE_REGISTER_STRATEGY(with_counters(info(), counters()));

}  // namespace
}  // namespace memfine
