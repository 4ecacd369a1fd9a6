// A project file's `framework:` map (core/project/framework.h says what each setting prices), its
// keys declared once as the project file's are (project_keys.cpp).
#include <algorithm>
#include <stdexcept>

#include "core/project/config.h"
#include "core/config/sections.h"

namespace memfine {

namespace {

// The modules' names, each between `before` and `after`, `between` them.
std::string module_names(const std::string& before, const std::string& between, const std::string& after) {
  std::string out;
  for (const auto& entry : recompute_module_table()) out += (out.empty() ? "" : between) + before + entry.first + after;
  return out;
}

std::vector<std::string> modules_value(const YAML::Node& n) {
  if (!n.IsSequence()) throw std::invalid_argument("expected a list of modules, got '" + MapReader::dump(n) + "'");
  std::vector<std::string> out;
  for (const YAML::Node& e : n) {
    const std::string name = e.IsScalar() ? e.Scalar() : MapReader::dump(e);
    // moe_act, moe and full granularity are registered strategies, named in a file's `strategies:`.
    for (const char* strategy : {"moe_act", "moe", "full"})
      if (name == strategy)
        throw std::invalid_argument(name + " is a strategy here, named in `strategies:` (`memfine strategies` lists them)");
    const auto& table = recompute_module_table();
    if (std::none_of(table.begin(), table.end(), [&](const auto& e) { return e.first == name; }))
      throw std::invalid_argument("no module '" + name + "' (" + module_names("", ", ", "") + ")");
    if (std::find(out.begin(), out.end(), name) != out.end()) throw std::invalid_argument(name + " given twice");
    out.push_back(name);
  }
  return out;
}

// Megatron-Core's cuda_graph_modules (transformer_config.py) that a projection prices, as a run's
// source names them; `full`: every layer whole (TE's per-layer graphs of the whole layer, or the
// full iteration); `none`: eager.
constexpr const char* kGraphModules[] = {"attn", "mlp", "moe", "moe_router", "moe_preprocess"};

// A list (or a string joined by commas) of graphed modules, `full` or `none`: the modules in their
// order, refused where Megatron refuses them.
std::vector<std::string> graphs_value(const YAML::Node& n) {
  std::vector<std::string> names;
  auto add = [&](std::string name) {
    name.erase(0, name.find_first_not_of(" "));
    name.erase(name.find_last_not_of(" ") + 1);
    if (std::find(names.begin(), names.end(), name) != names.end()) throw std::invalid_argument(name + " given twice");
    names.push_back(name);
  };
  if (n.IsSequence()) {
    for (const YAML::Node& e : n) add(e.IsScalar() ? e.Scalar() : MapReader::dump(e));
  } else if (n.IsScalar()) {
    std::string s = n.Scalar();
    for (size_t at = 0; at <= s.size();) {
      const size_t comma = std::min(s.find(',', at), s.size());
      add(s.substr(at, comma - at));
      at = comma + 1;
    }
  } else {
    throw std::invalid_argument("expected `none`, `full` or a list of modules, got '" + MapReader::dump(n) + "'");
  }
  const auto has = [&](const char* m) { return std::find(names.begin(), names.end(), m) != names.end(); };
  if ((has("none") || has("full")) && names.size() > 1)
    throw std::invalid_argument("`none` and `full` stand alone, not beside modules");
  if (has("none") || has("full")) return names;
  for (const auto& name : names)
    if (std::find_if(std::begin(kGraphModules), std::end(kGraphModules), [&](const char* m) { return name == m; }) ==
        std::end(kGraphModules))
      throw std::invalid_argument("no module '" + name +
                                  "' (attn, mlp, moe, moe_router, moe_preprocess; or `full`, `none`)");
  if (has("moe") && has("moe_router"))
    throw std::invalid_argument("moe and moe_router both: moe graphs the router too");
  if (has("moe_preprocess") && !has("moe_router")) throw std::invalid_argument("moe_preprocess needs moe_router");
  std::vector<std::string> out;
  for (const char* m : kGraphModules)
    if (has(m)) out.push_back(m);
  return out;
}

template <class S>
Field<S> modules(std::string key, std::vector<std::string> S::*m, std::string help) {
  return {key, "list of " + module_names("`", " \\| ", "`"), "[]", std::move(help),
          [key, m](MapReader& r, S& s) { r.read_value(key, s.*m, modules_value); },
          [m](const S& s) { return nlohmann::json(s.*m); }, [m](const S& s) { return (s.*m).empty(); }};
}

}  // namespace

const std::vector<std::pair<std::string, bool RecomputedModules::*>>& recompute_module_table() {
  using R = RecomputedModules;
  static const std::vector<std::pair<std::string, bool R::*>> table = {
      {"layernorm", &R::layernorm}, {"mla_up_proj", &R::mla_up_proj}, {"mlp", &R::mlp}, {"core_attn", &R::core_attn}};
  return table;
}

std::string graphs_text(const std::vector<std::string>& graphs) {
  std::string out;
  for (const auto& g : graphs) out += (out.empty() ? "" : ", ") + g;
  return out;
}

RecomputedModules recomputed_modules(const std::vector<std::string>& names) {
  RecomputedModules r;
  for (const auto& [name, flag] : recompute_module_table())
    if (std::find(names.begin(), names.end(), name) != names.end()) r.*flag = true;
  return r;
}

const Section<FrameworkConfig>& framework_keys() {
  using namespace fields;
  using F = FrameworkConfig;
  static const Section<F> s{
      "framework",
      {enumerated<F>("name", &F::name, "the framework (above)"),
       enumerated<F>(
           "loss", &F::loss,
           "what the loss holds per token at its peak: `auto` (the framework's: torchtitan's vocab_fp32_upcast, "
           "vocab_bf16 with `compile_loss`, the others' vocab_fp32), `vocab_fp32` "
           "(bf16 logits and their fp32 softmax: Megatron's vocab-parallel cross-entropy, TE's fused one from "
           "2.18, AutoModel's MaskedCrossEntropy with fp32_upcast, this suite's), `vocab_bf16` (two bf16 "
           "vocabulary-wide tensors: TE's fused loss before 2.18, MaskedCrossEntropy without fp32_upcast, a "
           "cross-entropy torch.compile compiled, which keeps its input and its gradient: Dao-AILab/quack issue 48), "
           "`vocab_fp32_upcast` (cross-entropy on an fp32 copy of the logits: its fp32 log-probabilities and "
           "two fp32 gradients at backward's peak: torchtitan's loss run eager), `chunked` (torchtitan's chunked "
           "loss, cut cross-entropy: an fp32 gradient of the hidden state and one of 8 chunks' logits)"),
       boolean<F>("compile_loss", &F::compile_loss,
                  "torchtitan: torch.compile compiles the loss (its [compile] components name `loss`, as its "
                  "DeepSeek-V3 configs do): with `loss: auto` it holds its bf16 input and gradient (vocab_bf16), "
                  "the fp32 upcast fused away"),
       choice<F>("reshard", &F::reshard, {"auto", "true", "false"},
                 "FSDP: whether a layer's gathered bf16 weights are let go after its forward (`false`, NeMo "
                 "AutoModel's default: every layer's stay until backward; `auto`: the framework's)"),
       choice<F>("grad_dtype", &F::grad_dtype, {"fp32", "bf16"},
                 "the distributed optimizer's gradient buffer, kept whole: fp32 (Megatron's default with bf16 "
                 "weights) or bf16 (--grad-reduce-in-bf16; Megatron-Bridge's grad_reduce_in_fp32: false)"),
       choice<F>("moment_dtype", &F::moment_dtype, {"fp32", "bf16"},
                 "Adam's moments, sharded: fp32, or bf16 (Megatron's precision-aware optimizer, "
                 "--exp-avg-dtype and --exp-avg-sq-dtype bf16)"),
       number<F>("workspace_gb", &F::workspace_gb, -1, 1e6,
                 "GB a GPU's process holds outside PyTorch's allocator (CUDA context, NCCL's buffers); -1: the "
                 "framework's"),
       number<F>("fragmentation", &F::fragmentation, -1, 10,
                 "what the caching allocator reserves beyond what it hands out, a share of it; -1: the framework's"),
       number<F>("margin", &F::margin, 0, 1,
                 "a layout whose need is within this share of its peak of the memory limit is `borderline`, "
                 "neither a plain yes nor no (the profile's own uncertainty)"),
       boolean<F>("tp_comm_overlap", &F::tp_comm_overlap,
                  "TP's sequence-parallel all-gathers and reduce-scatters run behind the dense GEMMs (Megatron's "
                  "--tp-comm-overlap, Transformer Engine's userbuffers)"),
       boolean<F>("ep_overlap", &F::ep_overlap,
                  "the all-to-all hidden behind another micro-batch's compute (Megatron's "
                  "--overlap-moe-expert-parallel-comm)"),
       number<F>("ep_overlap_hidden", &F::ep_overlap_hidden, -1, 1,
                 "with `ep_overlap`: the most of an all-to-all that hides behind the other micro-batch's compute, "
                 "a share; -1: the framework's (a profiled run's, core/project/framework.cpp names it)"),
       modules<F>("recompute_modules", &F::recompute_modules,
                  "megatron_te: Megatron's --recompute-modules beside the strategy's recomputation (selective "
                  "granularity; the strategies are its moe_act, moe and full): `layernorm` the norms not fused into "
                  "the next linear (a MoE layer's, MLA's input norm), `mla_up_proj` MLA's up-projections and RoPE, "
                  "`mlp` the dense layers' MLPs, `core_attn` the attention core; each lets go of what it keeps until "
                  "backward runs it again (core/project/profile_megatron.cpp)"),
       boolean<F>("selective_op", &F::selective_op,
                  "torchtitan: its per-op selective activation checkpointing (activation_checkpoint.mode "
                  "selective, selective_ac_option op; its DeepSeek-V3 configs' default) beside a strategy that "
                  "keeps its layers: every other linear's output, the attention's and the all-to-alls' kept, the "
                  "rest run again in backward (core/project/profile_torchtitan.cpp)"),
       boolean<F>("selective_op_all_to_all", &F::selective_op_all_to_all,
                  "with `selective_op`: its list keeps the all-to-alls' outputs, as torchtitan's has since its PR "
                  "1672 (2025-09-06); false for a run before it, whose list (llama3's) kept neither: its routed "
                  "rows keep nothing and backward runs the dispatch and combine again"),
       {"cuda_graphs", "`none` \\| `full` \\| list of `attn`, `mlp`, `moe`, `moe_router`, `moe_preprocess`", "none",
        "what CUDA graphs replay of each layer, forward and backward, as Megatron's --cuda-graph-scope names it "
        "(`full`: every layer whole, or the whole iteration): a replayed module's host launches and its share of "
        "the calibrated constant (a time a layer pass, which the host's launches and synchronisations are "
        "taken to make) are not paid (core/project/framework.cpp counts each module's launches)",
        [](MapReader& r, F& s) { r.read_value("cuda_graphs", s.cuda_graphs, graphs_value); },
        [](const F& s) { return nlohmann::json(graphs_text(s.cuda_graphs)); },
        [](const F& s) { return s.cuda_graphs.empty(); }},
       boolean<F>("flex_attention", &F::flex_attention,
                  "the attention core is PyTorch's FlexAttention (torchtitan's DeepSeek-V3 configs since its PR "
                  "1610, use_flex_attn): priced at the hardware preset's flex_attention_head_dim_curve at the "
                  "model's head dim, which the preset must have")}};
  return s;
}

}  // namespace memfine
