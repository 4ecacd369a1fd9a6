#include "core/util/modules.h"

#include <stdexcept>

namespace memfine {
namespace {
thread_local Module current = Module::None;

bool expert_part(Module m) { return m == Module::ExpertFc1 || m == Module::MoeAct || m == Module::ExpertFc2; }
}  // namespace

const std::vector<std::pair<Module, std::string>>& offloadable_modules() {
  static const std::vector<std::pair<Module, std::string>> m = {
      {Module::AttnNorm, "attn_norm"}, {Module::QkvLinear, "qkv_linear"}, {Module::CoreAttn, "core_attn"},
      {Module::AttnProj, "attn_proj"}, {Module::MlpNorm, "mlp_norm"},     {Module::ExpertFc1, "expert_fc1"},
      {Module::MoeAct, "moe_act"},     {Module::ExpertFc2, "expert_fc2"}};
  return m;
}

Module module_named(const std::string& name) {
  std::string names;
  for (const auto& [m, n] : offloadable_modules()) {
    if (n == name) return m;
    names += (names.empty() ? "'" : ", '") + n + "'";
  }
  throw std::invalid_argument("'" + name + "' is not a module: one of " + names);
}

const char* module_name(Module m) {
  for (const auto& [mod, n] : offloadable_modules())
    if (mod == m) return n.c_str();
  return m == Module::SharedExpert ? "shared_expert" : m == Module::Experts ? "experts" : "none";
}

Module current_module() { return current; }

ModuleScope::ModuleScope(Module m) : previous_(current) {
  if (!expert_part(m) || current == Module::Experts || expert_part(current)) current = m;
}
ModuleScope::~ModuleScope() { current = previous_; }

}  // namespace memfine
