// The sections of an experiment file, each declared once in its own file (core/config/*_keys.cpp):
// its table of keys, and how it is read with the checks that tie its keys together.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/fields.h"

namespace memfine {

const Section<ExperimentConfig>& top_keys();       // name, seed, device, dtype, threads, ...
const Section<ExperimentConfig>& parallel_keys();  // parallel.ep, parallel.rank
const Section<ExperimentConfig>& memory_keys();    // memory.budget
const Section<ModelConfig>& model_keys();
const Section<WorkloadConfig>& workload_keys();
const Section<PaperScaleConfig>& paper_keys();
const Section<TrainConfig>& train_keys();

// Each reads its section from `node` (absent: the defaults) into its struct; `dir` is the YAML's
// folder, against which relative paths are resolved.
void parse_model(const YAML::Node& node, ModelConfig& m, Problems& p);
// What ties a model's keys together (topk at most experts, heads by kv_heads, ...), at `r`'s keys.
void check_model(const ModelConfig& m, MapReader& r);
// The whole-model keys `m` sets (dense layers, MLA, MTP): a projection's, not a run's.
std::vector<std::string> whole_model_keys(const ModelConfig& m);
// `key`: where the section is in its file (`workload` in an experiment, `imbalance` in a project).
void parse_workload(const YAML::Node& node, const std::string& dir, WorkloadConfig& w, Problems& p,
                    const std::string& key = "workload");
void parse_paper(const YAML::Node& node, const std::string& dir, PaperScaleConfig& ps, Problems& p);
// `workload`: the file's workload node (training learns its routing: router, or left out).
void parse_train(const YAML::Node& node, const YAML::Node& workload, const std::string& dir, ExperimentConfig& c,
                 Problems& p);

// `strategies:` as an experiment (or a project file) lists them: names, or maps with `name`;
// resolved against the registry above config (run/validate, project/check).
void parse_strategies(const YAML::Node& node, std::vector<StrategySpec>& out, Problems& p);

// The whole file (one sweep point of it: the sweep already set into `root`).
ExperimentConfig parse_config(const YAML::Node& root, const std::string& file, Problems& p);

// A path as written, resolved against `dir` when relative, absolute and normal.
std::string resolve_path(const std::string& path, const std::string& dir);

// An experiment file's key reference (experiments/README.md, `memfine keys`): every key of its every
// section with type, default and meaning, as a Markdown table (key_table's).
std::string experiment_key_reference();
std::string key_table(const std::vector<KeyDoc>& rows);

}  // namespace memfine
