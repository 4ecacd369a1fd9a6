// What a source measured for a validation case (a project file's `published:`,
// experiments/project/validation/): carried beside the projection into `--json` for the
// validation's reading and never an input to it, so it is read apart from the project's keys.
#pragma once
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>

#include "core/project/config.h"

namespace memfine {

struct Published {
  std::string source;
  // What the source itself measured about where a run's time went (a profile, a matched study),
  // for the validation table's reading of a miss.
  std::string evidence;
  // Why this run is a calibration source, not a checked run (a figure of its own configuration's
  // profile is an input); empty for a checked run.
  std::string calibration;
  // A regression the framework's own release notes name for this configuration (a row shown, not
  // counted: no projection of a working framework can hold it).
  std::string known_issue;
  // By strategy label (the file's strategies' own), by quantity: tokens_per_s_gpu,
  // model_tflops_gpu, step_s, peak_gb (allocated), reserved_gb, device_gb (the device's used memory,
  // as nvidia-smi shows it: the need's counterpart, the CUDA context and NCCL beside the allocator),
  // moe_layer_forward_ms and moe_layer_backward_ms (one MoE layer alone, a layer-level benchmark's).
  std::map<std::string, std::map<std::string, double>> values;
  // The labels whose run the source saw run out of memory (`out_of_memory: true`): fit's negative
  // cases, with no figure beside.
  std::set<std::string> out_of_memory;
};

// The `published:` of the project file `c` was loaded from, its strategies resolved to the labels
// `c` gives them; std::invalid_argument with every problem, one per line, "FILE:LINE: key: what".
Published load_published(const ProjectConfig& c);

// What a projection line of strategy `label` carries: source, values and the texts given; null
// where the file published nothing of it.
nlohmann::json published_of(const Published& p, const std::string& label);

}  // namespace memfine
