// A project file's keys (`memfine project`), each declared once: read, documented (`memfine keys
// project`, experiments/README.md) and checked against its range as an experiment's keys are.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/project/config.h"
#include "core/config/sections.h"
#include "core/util/format.h"

namespace memfine {

namespace {

using P = ProjectConfig;

std::string folder_of(const std::string& file) {
  const std::string dir = std::filesystem::path(file).parent_path().string();
  return dir.empty() ? "." : dir;
}

// `model` and `hardware`: a preset's name, or its keys written out.
template <class T>
void read_preset(MapReader& r, const std::string& key, const std::string& presets_file,
                 std::map<std::string, T> (*read_file)(const std::string&, std::vector<std::string>&),
                 const std::function<void(const T&, const std::string&)>& take,
                 const std::function<void(const YAML::Node&)>& written) {
  YAML::Node n = r.child(key);
  Problems& p = r.problems();
  if (!n.IsDefined()) return p.add(n, key, "missing");
  if (n.IsMap()) return written(n);
  const std::string name = n.IsScalar() ? n.Scalar() : "";
  std::vector<std::string> problems;
  const auto all = read_file(presets_file, problems);
  for (const auto& x : problems) p.out.push_back(x);
  if (!problems.empty()) return;
  auto it = all.find(name);
  if (it != all.end()) return take(it->second, name);
  std::vector<std::string> names;
  std::string list;
  for (const auto& [k, v] : all) names.push_back(k), list += (list.empty() ? "" : ", ") + k;
  p.add(n, key,
        "'" + MapReader::dump(n) + "' is not a preset of " + presets_file + did_you_mean(name, names) +
            " (its presets: " + list + "; --presets DIR reads another folder's models.yaml and hardware.yaml)");
}

Field<P> model_key() {
  return {
      "model",
      "preset name or map",
      "(required)",
      "a preset of `project/models.yaml`, or its keys written out (the experiment files' `model:` keys, whole-model "
      "ones included)",
      [](MapReader& r, P& c) {
        read_preset<ModelPreset>(
            r, "model", c.presets_dir + "/models.yaml", read_model_presets,
            [&](const ModelPreset& m, const std::string& name) {
              c.model = m.model, c.model_name = name, c.model_source = m.source;
            },
            [&](const YAML::Node& n) { c.model = read_model_preset(n, "model", r.problems()); });
      },
      [](const P& c) { return nlohmann::json(c.model_name); }};
}

Field<P> hardware_key() {
  return {"hardware",
          "preset name or map",
          "(required)",
          "a preset of `project/hardware.yaml`, or its keys written out (below); naming it makes the file a project "
          "file",
          [](MapReader& r, P& c) {
            read_preset<Hardware>(
                r, "hardware", c.presets_dir + "/hardware.yaml", read_hardware_presets,
                [&](const Hardware& h, const std::string&) { c.hardware = h; },
                [&](const YAML::Node& n) { c.hardware = read_hardware(n, "hardware", r.problems()); });
          },
          [](const P& c) { return nlohmann::json(c.hardware.name); }};
}

Field<P> imbalance_key() {
  return {
      "imbalance",
      "map",
      "balanced",
      "the routing: a workload section (`{kind: zipf, alpha: 1.2}`, `lognormal`, `hot`, `{kind: trace, trace: "
      "FILE}` from `memfine train --trace-out`), its hottest expert-parallel rank's `s'` over the balanced share "
      "drawn per EP over the model's MoE layers; or `{overload: X}`, that factor given outright (a percentile "
      "of `s'`, as the paper's Figure 2 gives one) for the worst layer, which one layer's working set answers to, "
      "with `mean: Y` the layers' mean, which the step's time waits for and which bounds the rows a rank keeps "
      "over its layers (default X); under a law the rows kept are the share of the rank that keeps the most",
      [](MapReader& r, P& c) {
        YAML::Node n = r.child("imbalance");
        if (!n.IsDefined()) return;
        if (n.IsMap() && n["overload"].IsDefined()) {
          MapReader ir(n, "imbalance", r.problems());
          ir.read_number("overload", c.overload, 1, 1e6);
          ir.read_number("mean", c.mean_overload, 1, 1e6);
          if (c.mean_overload > c.overload && c.overload > 0)
            r.problems().add(n["mean"], "imbalance.mean",
                             "the layers' mean overload cannot exceed the worst layer's (overload: " +
                                 four_digits(c.overload) + "), got " + four_digits(c.mean_overload));
          ir.check_unknown();
        } else {
          parse_workload(n, folder_of(c.file), c.imbalance, r.problems(), "imbalance");
        }
      },
      [](const P& c) {
        if (c.overload <= 0) return write_section(workload_keys(), c.imbalance);
        nlohmann::json j{{"overload", c.overload}};
        if (c.mean_overload > 0) j["mean"] = c.mean_overload;
        return j;
      }};
}

Field<P> reliability_key() {
  return {
      "reliability",
      "preset name or number",
      "`llama3`",
      "failures per node of 8 GPUs: `llama3`, `rsc1`, `rsc2` (`core/project/goodput.h` names the sources), or "
      "failures per 1000 node-days",
      [](MapReader& r, P& c) {
        YAML::Node n = r.child("reliability");
        if (!n.IsDefined()) return;
        const std::string text = n.IsScalar() ? n.Scalar() : "";
        if (!text.empty() && !std::isdigit(static_cast<unsigned char>(text[0])) && text[0] != '.') {
          c.reliability = text;
          return;
        }
        double rate = -1;
        r.read_number("reliability", rate, 0, 1e6);
        if (rate >= 0) c.failure_rate = rate, c.reliability.clear();
      },
      [](const P& c) { return c.failure_rate >= 0 ? nlohmann::json(c.failure_rate) : nlohmann::json(c.reliability); }};
}

// A list of positive integers (a search axis).
Field<SearchSpace> axis(const std::string& key, std::vector<int64_t> SearchSpace::*m, const std::string& help) {
  const SearchSpace defaults;
  std::string fallback;
  for (int64_t v : defaults.*m) fallback += (fallback.empty() ? "" : ", ") + std::to_string(v);
  return {key,
          "list of int, 1 .. 1048576",
          fallback,
          help,
          [key, m](MapReader& r, SearchSpace& s) {
            r.read_value(key, s.*m, [](const YAML::Node& n) { return int_list_value(n, 1, int64_t(1) << 20); });
          },
          [m](const SearchSpace& s) { return nlohmann::json(s.*m); }};
}

Field<P> search_key() {
  return {"search",
          "map",
          "below",
          "the layouts tried: every combination of its axes (below) that divides the GPUs, heads, experts, layers "
          "and batch",
          [](MapReader& r, P& c) {
            MapReader sr(r.child("search"), "search", r.problems());
            read_section(search_keys(), sr, c.search);
            sr.check_unknown();
          },
          [](const P& c) { return write_section(search_keys(), c.search); }};
}

Field<P> strategies_key() {
  return {"strategies",
          "list",
          "every registered strategy",
          "names, or maps `{name: ..., param: value}` as an experiment's (`memfine strategies`): each is projected "
          "from its shape; `{name: memfine, chunks: auto}` takes MACT's fewest chunks of its bins that fit; a "
          "strategy that drops assignments (capacity) is ranked apart",
          [](MapReader& r, P& c) {
            YAML::Node n = r.child("strategies");
            if (n.IsDefined()) parse_strategies(n, c.strategies, r.problems());
          },
          [](const P& c) {
            nlohmann::json a = nlohmann::json::array();
            for (const auto& s : c.strategies) a.push_back(s.label());
            return a;
          }};
}

// Validation data, read apart (core/project/published.h): here only known and documented.
Field<P> published_key() {
  return {"published",
          "map",
          "none",
          "validation only: `source`, `evidence` (what the source measured about where the time went: read "
          "beside a miss, never priced), `calibration` (why the run is a calibration source, not a checked one: "
          "a figure of its configuration's profile is an input), `known_issue` (a regression the framework's own "
          "release notes name for this configuration: the row is shown, not counted), and per strategy (its label) the "
          "measured `tokens_per_s_gpu`, `model_tflops_gpu` (under the source's FLOP convention), `step_s`, `peak_gb` "
          "(allocated), `reserved_gb`, "
          "`device_gb` (the device's used memory, nvidia-smi's: checked against the need), `moe_layer_forward_ms` and "
          "`moe_layer_backward_ms` (one MoE layer alone, a layer-level benchmark's), carried into `--json` beside "
          "the projection",
          [](MapReader& r, P&) { r.child("published"); },
          [](const P&) { return nlohmann::json(nullptr); },
          [](const P&) { return true; }};
}

// `framework`: a name, or a map of the framework's keys (framework_keys, below).
Field<P> framework_key() {
  return {"framework",
          "name or map",
          "`megatron_te`",
          "the training framework whose memory and time are projected: `megatron_te` (Megatron-Core with Transformer "
          "Engine, what NVIDIA's and most published MoE recipes run), `fsdp_te` (PyTorch FSDP2 with TE kernels, NeMo "
          "AutoModel's), `torchtitan` (PyTorch FSDP2 with torchtitan's own eager layers, fp32 shards), or "
          "`memfine_layer` (this suite's own layer, as `memfine run` measures it); or a map of "
          "`name` and "
          "the keys below",
          [](MapReader& r, P& c) {
            YAML::Node n = r.child("framework");
            if (!n.IsDefined()) return;
            if (n.IsMap()) {
              MapReader fr(n, "framework", r.problems());
              read_section(framework_keys(), fr, c.framework);
              fr.check_unknown();
              // Only Megatron-Core has the option; FSDP recipes and this suite's layer recompute no module alone.
              if (!c.framework.recompute_modules.empty() && c.framework.name != Framework::MegatronTe)
                r.problems().add(n["recompute_modules"], "framework.recompute_modules",
                                 "Megatron-Core's option (--recompute-modules); " + name_of(c.framework.name) +
                                     " recomputes no module alone");
              if (c.framework.selective_op && c.framework.name != Framework::Torchtitan)
                r.problems().add(n["selective_op"], "framework.selective_op",
                                 "torchtitan's option (activation_checkpoint.selective_ac_option op); " +
                                     name_of(c.framework.name) + " has no per-op checkpointing");
              if (!c.framework.selective_op_all_to_all && !c.framework.selective_op)
                r.problems().add(n["selective_op_all_to_all"], "framework.selective_op_all_to_all",
                                 "says what `selective_op` keeps; set selective_op: true with it");
            } else {
              fields::read_enum(r, "framework", c.framework.name);
            }
          },
          [](const P& c) { return write_section(framework_keys(), c.framework); }};
}

// `mtp_layers` at the top: whether the run trains the model's MTP modules (after `model`).
Field<P> mtp_key() {
  return {"mtp_layers",
          "int, 0 .. 1024",
          "the model's",
          "multi-token prediction modules trained with the model (DeepSeek-V3's card has 1; many runs train none)",
          [](MapReader& r, P& c) { r.read_int("mtp_layers", c.model.mtp_layers, 0, 1024); },
          [](const P& c) { return nlohmann::json(c.model.mtp_layers); }};
}

// `seq` at the top: the run's sequence length where it is not the model preset's.
Field<P> seq_key() {
  return {"seq",
          "int, 1 .. 16777216",
          "the model's",
          "tokens per sequence in this run (a long-context run of a preset trained at another length)",
          [](MapReader& r, P& c) { r.read_int("seq", c.model.seq, 1, int64_t(1) << 24); },
          [](const P& c) { return nlohmann::json(c.model.seq); }};
}

}  // namespace

const Section<SearchSpace>& search_keys() {
  using S = SearchSpace;
  static const Section<S> s{
      "search",
      {axis("tp", &S::tp,
            "tensor-parallel sizes (within a node, dividing the heads and the kv heads, or under megatron_te a "
            "multiple of the kv heads)"),
       axis("pp", &S::pp, "pipeline stages"), axis("ep", &S::ep, "expert-parallel sizes (dividing the experts)"),
       axis("etp", &S::etp,
            "expert tensor-parallel sizes (Megatron's --expert-tensor-parallel-size, which defaults to TP there): each "
            "expert's FFN split over so many neighbouring GPUs, which gather their rank's routed rows (megatron_te)"),
       axis("cp", &S::cp, "context-parallel sizes"), axis("micro_batch", &S::micro_batch, "sequences per micro-batch"),
       axis("vpp", &S::vpp, "virtual stages per pipeline rank (interleaved 1F1B)"),
       axis("grad_accumulation", &S::grad_accumulation, "pipeline schedules (fill and drain) per step")}};
  return s;
}

const Section<ProjectConfig>& project_keys() {
  using namespace fields;
  static const Section<P> s{
      "",
      {text<P>("name", &P::name, "string", "the projection's name (default: the model's)"),
       model_key(),
       hardware_key(),
       integer<P>("gpus", &P::gpus, 1, int64_t(1) << 24, "GPUs in the job, required (`--gpus N` overrides)"),
       integer<P>("global_batch", &P::global_batch, 1, int64_t(1) << 30,
                  "sequences per optimizer step, required (`--global-batch N` overrides)"),
       imbalance_key(),
       unsigned_integer<P>("seed", &P::seed, "the routing law's draw"),
       mtp_key(),
       seq_key(),
       choice<P>(
           "sharding", &P::sharding, {"auto", "distributed_optimizer", "fsdp"},
           "the framework's (`fsdp_te`, `torchtitan`: fsdp; the others: distributed_optimizer), Megatron's distributed "
           "optimizer (bf16 weights and fp32 gradients whole, 12 bytes of optimizer state a parameter sharded) "
           "or FSDP's (16 bytes a parameter sharded, the weights gathered as `framework.reshard` says)"),
       enumerated<P>("dispatcher", &P::dispatcher,
                     "the expert-parallel all-to-all: NCCL's (a row per routed expert) or DeepEP's or HybridEP's "
                     "(across nodes a token once per node), each at the hardware preset's measured rate; or Megatron's "
                     "allgather dispatcher (every token gathered over the EP x expert TP group, the experts' outputs "
                     "reduce-scattered back, at the links' rates)"),
       enumerated<P>("expert_choice", &P::expert_choice,
                     "which experts a token's top-k are, for the GPUs and nodes DeepEP and HybridEP send it to: random "
                     "(each token's drawn independently and evenly: Megatron's --moe-router-force-load-balancing, and "
                     "the stand-in for a learned router) or consecutive (token t to experts tk to tk+k-1 mod E, NeMo "
                     "AutoModel's fake balanced gate: a token's experts on the fewest GPUs); consecutive is balanced "
                     "routing, so `imbalance` must be too"),
       text<P>("pipeline_layout", &P::pipeline_layout, "string",
               "what each pipeline stage holds, in Megatron's --pipeline-model-parallel-layout syntax (E the "
               "embedding, t a decoder layer, m an MTP module, L the output layer and loss, a bar between virtual "
               "stages, `(...)*N` and `t*N` repeat; --account-for-embedding-in-pipeline-split and "
               "--account-for-loss-in-pipeline-split are the even split of E, the layers and L); default: the "
               "layers split evenly in order over PP x VPP, the embedding first, MTP and the loss last"),
       framework_key(),
       number<P>("usable_memory", &P::usable_memory, 0.01, 1, "share of a GPU's memory the job may use"),
       reliability_key(),
       number<P>("restart_min", &P::restart_min, 0, 1e6, "what a failure costs besides the lost work, minutes"),
       number<P>("checkpoint_gb_s_per_node", &P::checkpoint_gb_s_per_node, 1e-3, 1e6,
                 "each node writes its share of the checkpoint (14 bytes a parameter) at this rate"),
       search_key(),
       strategies_key(),
       integer<P>("top", &P::top, 1, 1 << 20, "rows of the ranked table"),
       choice<P>("dtype", &P::dtype, {"bfloat16", "float32"},
                 "activations' element (memory, memory-bound kernels, all-to-all bytes)"),
       choice<P>("precision", &P::precision, {"bf16", "fp8", "fp8_blockwise", "mxfp8"},
                 "the linear layers' GEMMs: bf16, or fp8 (Transformer Engine's per-tensor FP8, Megatron's --fp8-format "
                 "hybrid: each linear's three GEMMs at the hardware preset's fp8_gemm_speedup_curve, its input and "
                 "output gradient cast to FP8 by memory-bound passes, its input kept for backward in FP8 and its "
                 "weight's FP8 copies held through the step; the attention core, the router, the embedding and the "
                 "output layer in bf16), or fp8_blockwise (the same with DeepSeek's block scaling, Megatron's "
                 "--fp8-recipe blockwise, at the preset's fp8_blockwise_gemm_speedup_curve), or mxfp8 (the same in "
                 "MXFP8, --fp8-recipe mxfp8, at the preset's mxfp8_gemm_speedup_curve; each FP8 copy a weight's and "
                 "an input's with its one-byte scale a 32-element block); megatron_te only"),
       published_key()}};
  return s;
}

std::string ProjectConfig::where(const std::string& key) const { return where_in(file, lines, key); }

std::string default_presets_dir(const std::string& file) {
  const std::string dir = folder_of(file);
  for (const std::string& d : {dir + "/project", dir, dir + "/.."})
    if (std::ifstream(d + "/models.yaml").good()) return d;
  return dir + "/project";
}

ProjectConfig parse_project(const std::string& file, const std::string& presets_dir,
                            std::vector<std::string>& problems) {
  ProjectConfig c;
  c.file = file, c.presets_dir = presets_dir;
  YAML::Node root;
  if (const std::string why = yaml_file_problem(file); !why.empty()) throw std::invalid_argument(why);
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(file + ": cannot be read");
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(file + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) throw std::invalid_argument(file + ": expected a map of project keys (it needs `hardware:`)");
  // An experiment given to `project`: one message that says what to do, not one per key.
  if (!root["hardware"].IsDefined()) {
    std::string seen;
    for (const char* k : {"warmup", "repeats", "sweep", "parallel", "workload", "verify"})
      if (root[k].IsDefined()) seen += (seen.empty() ? "" : ", ") + std::string(k);
    if (!seen.empty())
      throw std::invalid_argument(file + ": not a project file: it has no `hardware:` and holds an experiment's keys (" +
                                  seen + "); `memfine run " + file +
                                  "` measures an experiment, a project file names hardware, gpus and global_batch "
                                  "(`memfine keys project`)");
  }
  Problems p{file, problems};
  p.lines = &c.lines;
  MapReader r(root, "", p);
  read_section(project_keys(), r, c);
  r.check_unknown();
  // Missing, not merely refused (a refused value has said why already).
  if (c.gpus == 0 && !root["gpus"].IsDefined()) p.add(root, "gpus", "missing");
  if (c.global_batch == 0 && !root["global_batch"].IsDefined()) p.add(root, "global_batch", "missing");
  // The search holds every layout's estimate per strategy: bounded before it runs, as a sweep is.
  double estimates = double(std::max<size_t>(c.strategies.size(), 1));
  for (const auto* axis : {&c.search.tp, &c.search.pp, &c.search.ep, &c.search.etp, &c.search.cp, &c.search.micro_batch,
                           &c.search.vpp, &c.search.grad_accumulation})
    estimates *= double(axis->size());
  if (estimates > double(kMostProjectEstimates))
    p.add(root["search"].IsDefined() ? root["search"] : root, "search",
          "its axes' combinations times the strategies make " + std::to_string(int64_t(std::min(estimates, 9e18))) +
              " estimates; at most " + std::to_string(kMostProjectEstimates) + " (narrow an axis)");
  if (c.name.empty()) c.name = c.model_name;
  if (r.child("model").IsMap()) c.model_name = c.name + "'s model";
  c.errors = read_projection_errors(presets_dir, problems);
  return c;
}

ProjectConfig read_project(const std::string& file, const std::string& presets_dir) {
  std::vector<std::string> problems;
  ProjectConfig c = parse_project(file, presets_dir, problems);
  if (!problems.empty()) {
    std::string all;
    for (const auto& x : problems) all += (all.empty() ? "" : "\n") + x;
    throw std::invalid_argument(all);
  }
  return c;
}

bool is_project_file(const std::string& file) {
  // Only a regular file of a project file's size is read here: a FIFO, a device or a huge file is
  // left to the experiment loader, which refuses it saying why (reading one here would block).
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec) || std::filesystem::file_size(file, ec) > (1u << 20) || ec)
    return false;
  try {
    const YAML::Node root = YAML::LoadFile(file);
    return root.IsMap() && root["hardware"].IsDefined();
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::string project_key_reference(const std::string& which) {
  if (which == "hardware") {
    Section<Hardware> plain = hardware_keys();
    plain.name.clear();  // a preset's keys, under its name
    return key_table(section_docs(plain));
  }
  std::vector<KeyDoc> rows = section_docs(project_keys());
  for (const auto& more : {section_docs(search_keys()), section_docs(framework_keys())})
    rows.insert(rows.end(), more.begin(), more.end());
  return key_table(rows);
}

}  // namespace memfine
