// The training framework a projection prices (a project file's `framework:`): its profile of what
// a layer keeps (core/predict/profile.h), its loss, how it shards the optimizer, what its process
// holds beside its tensors and how it runs the all-to-all. Every default is the framework's own,
// with its source in framework.cpp; what a run can change is listed as what the answer rests on.
#pragma once
#include <string>
#include <vector>

#include "core/config/project.h"
#include "core/predict/profile.h"

namespace memfine {

struct FrameworkSetting {
  std::string name = "megatron_te";
  Profile profile = Profile::MegatronTe;
  std::string loss = "vocab_fp32";  // core/predict/profile.h loss_bytes_per_token
  bool fsdp = false;                // FSDP's sharding, not Megatron's distributed optimizer
  bool reshard = true;              // FSDP: a layer's gathered weights let go after its forward
  double fsdp_state_bytes = 16;     // FSDP: bytes a parameter's shard holds (weights, gradients, moments)
  double grad_bytes = 4;            // the distributed optimizer's gradient buffer, a parameter
  double moment_bytes = 4;          // each of Adam's two moments, a parameter's shard
  double allocated_extra = 0;       // bytes the framework allocates once (TE's cuBLAS workspaces)
  double workspace = 0;             // bytes outside the allocator (CUDA context, NCCL)
  double fragmentation = 0;         // reserved over allocated, less 1
  double margin = 0.1;              // borderline within this share of the peak
  // The optimizer step: bytes it moves per parameter of its shard (read and written, framework.cpp
  // counts them from the framework's code), whether it shards over data parallelism, and the
  // gradient buffer it zeroes per parameter of the stage.
  double optimizer_bytes = 0;
  bool optimizer_sharded = true;
  double grad_zero_bytes = 0;
  bool ep_overlap = false;
};

// The file's framework with its defaults filled in.
FrameworkSetting framework_setting(const ProjectConfig& c);

// What an answer rests on that a run can change, for the table's notes.
std::vector<std::string> framework_assumptions(const FrameworkSetting& f);

}  // namespace memfine
