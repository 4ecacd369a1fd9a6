#include <filesystem>

#include "core/config/sections.h"

namespace memfine {

namespace {

// `parallel.rank`: an integer or `hottest` (-1).
Field<ExperimentConfig> rank_key() {
  using E = ExperimentConfig;
  return {"rank",
          "int or `hottest`",
          "hottest",
          "which expert-parallel rank this device emulates",
          [](MapReader& r, E& c) {
            YAML::Node rank = r.child("rank");
            if (!rank.IsDefined() || rank.IsNull()) return;
            if (rank.IsScalar() && rank.as<std::string>() == "hottest")
              c.rank = -1;
            else
              r.read("rank", c.rank, "an integer or 'hottest'");
          },
          [](const E& c) { return c.rank < 0 ? nlohmann::json("hottest") : nlohmann::json(c.rank); }};
}

// The name is a results folder: one plain folder name.
std::string folder_name_problem(const std::string& name) {
  if (name.size() > 128) return "longer than 128 bytes: it names the results folder";
  if (name == "." || name == "..") return "'" + name + "' is not a folder name";
  for (unsigned char ch : name)
    if (ch == '/' || ch < 0x20 || ch == 0x7f) return "must be a plain folder name (no '/' or control characters)";
  // UTF-8: records are JSON.
  for (size_t i = 0; i < name.size();) {
    const unsigned char b = static_cast<unsigned char>(name[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > name.size()) return "is not UTF-8";
    for (size_t j = 1; j < n; ++j)
      if ((static_cast<unsigned char>(name[i + j]) >> 6) != 0x2) return "is not UTF-8";
    i += n;
  }
  return "";
}

}  // namespace

void parse_strategies(const YAML::Node& node, std::vector<StrategySpec>& out, Problems& p) {
  if (!node.IsDefined() || node.IsNull()) {
    p.add(node, "strategies", "missing: list at least one strategy (see `memfine strategies`)");
    return;
  }
  if (!node.IsSequence()) {
    p.add(node, "strategies", "must be a list");
    return;
  }
  if (node.size() == 0) {
    p.add(node, "strategies", "is empty: list at least one strategy (see `memfine strategies`)");
    return;
  }
  if (node.size() > kMaxStrategies) {
    p.add(node, "strategies",
          "lists " + std::to_string(node.size()) + " strategies, more than " + std::to_string(kMaxStrategies) +
              ": split the experiment");
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    const std::string path = "strategies[" + std::to_string(i) + "]";
    StrategySpec spec;
    if (item.IsScalar()) {
      spec.name = item.as<std::string>();
    } else if (item.IsMap()) {
      MapReader keys(item, path, p);  // duplicate and complex keys
      for (const auto& kv : item) {
        if (!kv.first.IsScalar()) continue;  // reported by `keys`
        const std::string k = kv.first.Scalar();
        if (k == "name")
          spec.name = kv.second.as<std::string>("");
        else
          spec.written[k] = kv.second;
        if (p.lines) (*p.lines)[path + "." + k] = kv.first.Mark().line + 1;
      }
      if (spec.name.empty()) {
        p.add(item, path + ".name", "missing");
        continue;
      }
    } else {
      p.add(item, path, "must be a name or a map with 'name'");
      continue;
    }
    if (p.lines) (*p.lines)[path] = item.Mark().line + 1;
    // Names, parameters and duplicates (by canonical label) are checked against the registry above
    // config (run/validate).
    out.push_back(spec);
  }
}

const Section<ExperimentConfig>& top_keys() {
  using namespace fields;
  using E = ExperimentConfig;
  static const Section<E> s{
      "",
      {text<E>(
           "name", &E::name, "string (required)",
           "names the experiment's results folder: UTF-8, no `/` or control characters, not `.` or `..`, at most 128 "
           "bytes"),
       unsigned_integer<E>("seed", &E::seed, "seeds weights, inputs, routing and the emulated peers"),
       choice<E>("device", &E::device, {"cpu", "cuda"}, "where tensors live"),
       choice<E>("dtype", &E::dtype, {"float32", "float64", "bfloat16"},
                 "parameter and activation type; `verify`'s tolerance is 1e-4, 1e-10 and 3e-2"),
       choice<E>(
           "kernels", &E::kernels, {"auto", "aten", "fused"},
           "how the MoE stages' dispatch and combine move rows, where the MoE does not run as ranges (expert_gemm): "
           "ATen ops, or the fused row kernels (the GPU's on a CUDA build, their host reference on a CPU); auto = "
           "fused on a CUDA build's GPU, else aten. Records hold the choice"),
       choice<E>("expert_gemm", &E::expert_gemm, {"loop", "grouped"},
                 "how the local experts' GEMMs run: one per projection for all of them (grouped, the default: "
                 "LibTorch's `_grouped_mm`, natively in bf16 on a GPU with LibTorch 2.8+, elsewhere a GEMM per "
                 "expert inside one operator), with the layer's MoE run as ranges of a few operators each, whatever "
                 "the experts' count, and its row work in fused kernels of its own (core/moe/ranged.h); or one per "
                 "expert through the stages one by one (loop). Buffer-free experts, Megatron's weighted "
                 "arrangement, a stash, offloaded or encoded expert modules and real ranks run the loop"),
       choice<E>("attention_kernel", &E::attention_kernel, {"eager", "sdpa"},
                 "how grouped-query attention runs: eager (its scores, causal mask and softmax as ATen tensors of "
                 "[micro_batch, heads, seq, seq], the default), or sdpa (LibTorch 2.x's scaled_dot_product_attention, "
                 "causal: FlashAttention or cuDNN's fused kernel on a GPU, which keeps no scores, as training "
                 "frameworks run attention). Needs LibTorch 2.x and model.attention: gqa"),
       choice<E>("expert_wgrad", &E::expert_wgrad, {"grouped", "per_expert"},
                 "where a MoE run as ranges (expert_gemm: grouped) takes its experts' weight gradients from: the "
                 "grouped GEMM (grouped, the default: LibTorch's native one writes them to a buffer of its own, "
                 "then added into .grad; elsewhere a GEMM per expert accumulates in place), or a GEMM per expert "
                 "accumulating into .grad in place everywhere (per_expert: no buffer and no add, as Transformer "
                 "Engine's fused weight-gradient accumulation; more launches). Differs only on a GPU in bf16"),
       integer<E>("threads", &E::threads, 0, 1024,
                  "LibTorch intra-op threads and OpenBLAS's own pool, 0 = all cores (also `--threads`); recorded in "
                  "`env.threads`"),
       integer<E>("warmup", &E::warmup, 0, 1000000, "untimed steps per strategy"),
       integer<E>("repeats", &E::repeats, 1, 1000000,
                  "timed steps per strategy; reported as median, min, max and every one (`step_ms_all`)"),
       boolean<E>("verify", &E::verify,
                  "also hold each dropless strategy's loss and gradients to the reference strategy's (`no_recompute`) "
                  "against the dtype's tolerance: a `verified` verdict per record and exit 1 on a failure; on real "
                  "ranks against one process computing the whole global batch; in `memfine train` on one process"),
       choice<E>("graphs", &E::graphs, {"none", "step"},
                 "CUDA graphs: `step` captures each strategy's forward and backward (the loss and every layer, "
                 "its MoE's ranges included) as one graph after the warmup steps and replays it every timed step, "
                 "the optimizer's update eager, the same for every strategy; a strategy that cannot be captured "
                 "(offloading's copies, a stash's rerun, capping's host reads, real ranks) runs eagerly and its "
                 "record says why. Needs `device: cuda` and routing that is the same every step"),
       text<E>("cost_model", &E::cost_model, "path",
               "the fitted step-time cost model (`scripts/fit-cost-model`; relative to this file): needed by "
               "`objective: time`; refused when fitted on another CPU",
               /*nullable=*/true)}};
  return s;
}

const Section<ExperimentConfig>& parallel_keys() {
  using namespace fields;
  using E = ExperimentConfig;
  static const Section<E> s{
      "parallel",
      {integer<E>("ep", &E::ep, 1, 65536, "expert-parallel size; `experts` must be divisible by it"), rank_key()}};
  return s;
}

const Section<ExperimentConfig>& memory_keys() {
  using namespace fields;
  using E = ExperimentConfig;
  static const Section<E> s{
      "memory",
      {bytes<E>("budget", &E::budget, true,
                "enforced for real: static + activation beyond it is `oom` (a result, not a crash); positive, below "
                "4 EiB")}};
  return s;
}

ExperimentConfig parse_config(const YAML::Node& root, const std::string& file, Problems& p) {
  ExperimentConfig c;
  c.source = file;
  p.lines = &c.lines;
  const std::string dir = std::filesystem::path(file).parent_path().string();
  MapReader r(root, "", p);
  read_section(top_keys(), r, c);
  if (!c.cost_model.empty()) c.cost_model = resolve_path(c.cost_model, dir);
  parse_model(r.child("model"), c.model, p);
  {
    MapReader pr(r.child("parallel"), "parallel", p);
    read_section(parallel_keys(), pr, c);
    pr.check_unknown();
    if (c.rank < -1 || c.rank >= c.ep) p.add(pr.child("rank"), "parallel.rank", "must be in [0, ep) or 'hottest'");
    if (c.model.experts % c.ep != 0)
      p.add(pr.child("ep"), "parallel.ep",
            "experts (" + std::to_string(c.model.experts) + ") is not divisible by ep (" + std::to_string(c.ep) + ")");
  }
  const YAML::Node workload = r.child("workload");
  parse_workload(workload, dir, c.workload, p);
  {
    MapReader mr(r.child("memory"), "memory", p);
    read_section(memory_keys(), mr, c);
    mr.check_unknown();
  }
  if (const YAML::Node pn = r.child("paper"); pn.IsDefined() && !pn.IsNull()) parse_paper(pn, dir, c.paper, p);
  if (const YAML::Node tn = r.child("train"); tn.IsDefined() && !tn.IsNull()) parse_train(tn, workload, dir, c, p);
  if (!c.paper.enabled)
    for (const std::string& k : whole_model_keys(c.model))
      p.add(r.child("model")[k], "model." + k,
            "a whole model's key: the layers memfine run and train build are every one a MoE layer with "
            "grouped-query attention; it is for projections (a paper: section, or a memfine project file)");
  if (c.model.vocab > 0 && !c.train.enabled)
    p.add(r.child("model")["vocab"], "model.vocab",
          "a language model is trained, not benchmarked: add a train: section and use memfine train");
  if (c.train.enabled && c.model.vocab > 0 && c.model.vocab < 256)
    p.add(r.child("model")["vocab"], "model.vocab",
          std::to_string(c.model.vocab) +
              " is fewer than the byte tokenizer's 256 token ids (the corpus is read as bytes)");
  parse_strategies(r.child("strategies"), c.strategies, p);
  r.child("sweep");  // expanded by the caller
  r.check_unknown();
  if (c.name.empty())
    p.add(root, "name", "missing: every experiment needs a name (it names the results folder)");
  else if (const std::string why = folder_name_problem(c.name); !why.empty())
    p.add(r.child("name"), "name", why);
  p.lines = nullptr;
  return c;
}

}  // namespace memfine
