// `memfine project FILE.yaml`: for a model (a preset or its keys), a cluster (hardware preset, GPU
// count) and a search space, every layout x memory strategy estimated (core/project/estimate.h),
// ranked by goodput, with why each rejected one fails. The imbalance is an input: a routing law of
// the experiment files (zipf, lognormal, hot, trace: the hottest expert-parallel rank's s' over
// its balanced share, per layout's EP) or an overload factor given outright (a percentile of s').
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/project/estimate.h"

namespace memfine {

struct ProjectConfig {
  std::string name, file;
  ProjectModel model;
  Hardware hardware;
  int64_t gpus = 0;
  int64_t global_batch = 0;  // sequences per step
  WorkloadConfig imbalance;  // the routing law (kind balanced: none)
  double overload = 0;       // > 0: the hottest rank's s' over its share, given outright
  uint64_t seed = 1;
  ProjectSetting setting;
  std::vector<int64_t> tp = {1, 2, 4, 8}, pp = {1, 2, 4, 8, 16}, ep = {1, 8, 16, 32, 64}, cp = {1}, micro_batch = {1},
                       vpp = {1}, grad_accumulation = {1};
  std::vector<std::string> strategies = {"no_recompute", "full_recompute", "moe_act_recompute",
                                         "memfine",      "offload",        "capacity"};
  int64_t top = 12;  // rows of the ranked table
  // What a source measured for this case, by strategy and quantity (tokens_per_s_gpu,
  // model_tflops_gpu, peak_gb): carried into the JSON beside the projection, for validation.
  std::string published_source;
  std::map<std::string, std::map<std::string, double>> published;
};

// Reads a project file; problems as "FILE:LINE: key.path: what is wrong" (std::invalid_argument
// with all of them, one per line). Presets are found in `presets_dir` (experiments/project).
ProjectConfig read_project(const std::string& file, const std::string& presets_dir);

// Where a project file's presets are by default: the first of its folder's project/, its folder
// and its parent folder that holds models.yaml (experiments/project_X.yaml and
// experiments/project/validation/X.yaml both find experiments/project/).
std::string default_presets_dir(const std::string& file);

// Whether a YAML file is a project file (it names a `hardware`), not an experiment.
bool is_project_file(const std::string& file);

// The hottest expert-parallel rank's received rows over its balanced share, for `ep` ranks: the
// largest over the model's MoE layers of the law's draw (core/workload), or the given factor.
double project_overload(const ProjectConfig& c, int64_t ep);

struct ProjectResult {
  std::vector<Estimate> ranked;        // fitting, best goodput first
  std::vector<Estimate> rejected;      // each with its reason
  int64_t layouts = 0;                 // layouts tried (before strategies)
  std::map<int64_t, double> overload;  // the hottest rank's s' over its share, by EP
};
ProjectResult run_project(const ProjectConfig& c);

// The ranked table for a person; the rejected ones counted by reason.
std::string project_table(const ProjectConfig& c, const ProjectResult& r);
// One JSON object per estimate (fitting and rejected), for programs; `stamp`'s keys (the commit and
// date the projection was made at) are added to each.
std::string project_json(const ProjectConfig& c, const ProjectResult& r,
                         const std::map<std::string, std::string>& stamp = {});

}  // namespace memfine
