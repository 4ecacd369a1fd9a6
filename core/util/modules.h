// The modules of a decoder layer, by Megatron-Core's names, as the code that runs them marks them:
// a thread-local "where am I" that activation offloading (core/strategy/offload.h) reads when
// autograd saves a tensor. Marking changes no computation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace memfine {

enum class Module : uint8_t {
  None,
  AttnNorm,      // the RMSNorm before attention
  QkvLinear,     // the q, k and v projections
  CoreAttn,      // scores, mask, softmax, context
  AttnProj,      // the output projection
  MlpNorm,       // the RMSNorm before the MoE
  SharedExpert,  // the shared expert (its parts are not the routed experts')
  Experts,       // the routed experts, outside the parts below
  ExpertFc1,     // a routed expert's first GEMM (x -> [a | b])
  MoeAct,        // its activation SiLU(a) * b
  ExpertFc2,     // its second GEMM
};

// The offloadable ones by name, in the order of a layer's forward.
const std::vector<std::pair<Module, std::string>>& offloadable_modules();
// "core_attn" -> Module::CoreAttn; throws std::invalid_argument naming the choices.
Module module_named(const std::string& name);
const char* module_name(Module m);

Module current_module();

// Marks what runs while it lives. A routed expert's part (ExpertFc1, MoeAct, ExpertFc2) is marked
// inside the routed experts only: the shared expert runs the same SwiGLU and stays the shared expert.
class ModuleScope {
 public:
  explicit ModuleScope(Module m);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  Module previous_;
};

}  // namespace memfine
