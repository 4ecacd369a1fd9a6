// The training framework a projection prices (a project file's `framework:`): its profile of what
// a layer keeps (core/project/profile.h), its loss, how it shards the optimizer, what its process
// holds beside its tensors and how it runs the all-to-all. Every default is the framework's own,
// with its source in framework.cpp; what a run can change is listed as what the answer rests on.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/project/config.h"
#include "core/project/profile.h"

namespace memfine {

// The kernels one layer's blocks launch from the host (framework.cpp counts them from the
// framework's code): the attention block (norm, projections, rotary, attention, residual), a dense
// FFN block and a MoE block (norm, router, dispatch, experts, combine).
struct Launches {
  double attention = 0, dense_ffn = 0, moe = 0;
  // Of the MoE's forward: what it launches after the dispatcher's host synchronisation (the rows
  // each expert receives, read on the host to size the dispatch) up to the dispatch: the GPU has
  // drained its queue there and waits for each of these launches.
  double moe_after_sync = 0;
};

struct FrameworkSetting {
  Profile profile = Profile::MegatronTe;
  Loss loss = Loss::VocabFp32;      // core/project/profile.h loss_bytes_per_token
  bool fsdp = false;                // FSDP's sharding, not Megatron's distributed optimizer
  bool reshard = true;              // FSDP: a layer's gathered weights let go after its forward
  // FSDP under PyTorch's pipelining (torch.distributed.pipelining stage.py): with more than one
  // pipeline stage it keeps the stage's weights gathered and accumulates its gradients unsharded, in
  // the reduce dtype (these bytes a parameter), until the step's last micro-batch; 0: not priced.
  double pipelined_unsharded_grad_bytes = 0;
  // FSDP: where the routed experts are not sharded beyond EP (expert data parallelism of 1), they sit
  // outside FSDP, their slice's weights and gradients kept in their own dtype, never gathered.
  bool unsharded_experts_outside_fsdp = false;
  // torchtitan's per-op selective checkpointing beside a strategy that keeps its layers.
  bool selective_op = false;
  bool selective_op_all_to_all = true;  // its list keeps the all-to-alls' outputs (else run again)
  // Its attention core is FlexAttention's (the hardware's flex curve).
  bool flex_attention = false;
  // The framework runs MLA's attention in FlexAttention by default: an answer that prices it as
  // FlashAttention says so.
  bool mla_flex_by_default = false;
  // A routed row's memory-bound bytes, a forward's, beyond the fused path's (core/model/flops.h
  // memory_bound_bytes): per element of the hidden size, by the path DeepEP's dispatcher takes or
  // the others', and of the expert's (framework.cpp counts them from the framework's code).
  double routed_row_h_bytes = 0, deepep_routed_row_h_bytes = 0, routed_row_f_bytes = 0;
  double fsdp_state_bytes = 16;     // FSDP: bytes a parameter's shard holds (weights, gradients, moments)
  double grad_bytes = 4;            // the distributed optimizer's gradient buffer, a parameter
  // What each routed expert's weight-gradient GEMM reads and writes of the gradient buffer, bytes a
  // weight, however few its rows (Megatron's gradient accumulation fusion; 0: not counted).
  double wgrad_accumulate_bytes = 8;
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
  double ep_overlap_hidden = 1;     // of an overlapped all-to-all, the most that hides (a share)
  bool tp_comm_overlap = false;
  // Megatron's --recompute-modules beside the strategy's recomputation (core/project/profile.h).
  RecomputedModules recomputed;
  // Pipeline sends behind the other virtual stages' compute where the schedule is interleaved
  // (framework.cpp names the code); else a rank's sends and receives of a micro-batch are exposed.
  bool p2p_overlap_interleaved = false;
  // Megatron's NCCL all-to-all dispatcher sorts the rows it receives by local expert after the
  // dispatch and back before the combine where a rank holds more than one expert: a read and a
  // write of each row each time (framework.cpp names the code).
  bool alltoall_sorts_rows = false;
  // For a model whose experts have biases (gpt-oss): bytes a routed row moves applying them outside
  // the GEMMs, forward and backward, per element of the experts' h-wide output and of their width F
  // (FC1's, where not fused), behind NCCL's all-to-all and behind DeepEP (framework.cpp counts them
  // from the framework's code).
  struct BiasBytes {
    double h = 0, f = 0;
  };
  BiasBytes expert_bias, deepep_expert_bias;
  // For a model that clamps its experts' GLU inputs (gpt-oss): bytes a routed row moves per element
  // of the expert's width clamping them outside the fused activation, forward and backward; for a
  // model whose RoPE YaRN scales: bytes per element of the queries and keys the unfused RoPE moves
  // beyond the fused kernel's, both directions (framework.cpp counts them from the framework's code).
  double glu_clamp_forward_bytes = 0, glu_clamp_backward_bytes = 0, unfused_rope_bytes = 0;
  // Its attention for learnable softmax sinks runs at the hardware's sink curve (Transformer
  // Engine's: cuDNN's fused attention); else at the head-dim curve like any other.
  bool sinks_on_sink_curve = false;
  // TP may be a multiple of the kv heads (Megatron-Core's attention gathers the QKV projection's
  // output over TP and keeps its group's kv head); else TP must divide them.
  bool tp_beyond_kv_heads = false;
  // What the host launches a layer: the forward's from Python (and again for a recomputed forward),
  // the backward's from the autograd engine; none where the framework's process is not timed this
  // way (memfine_layer: this suite's own measured layer).
  Launches forward, backward;
  // Of `forward`, what CUDA graphs replay (framework.cuda_graphs, named as given): the host launches
  // none of it, forward or backward, nor pays its share of the calibrated constant.
  Launches captured;
  std::string cuda_graphs = "none";
  // The SMs each dispatcher runs on (NCCL's all-to-all: none priced).
  std::map<Dispatcher, double> sms_of;
  double dispatcher_sms(Dispatcher dispatcher) const {
    auto it = sms_of.find(dispatcher);
    return it == sms_of.end() ? 0 : it->second;
  }
};

// The file's framework with its defaults filled in.
FrameworkSetting framework_setting(const ProjectConfig& c);

// What an answer rests on that a run can change, for the table's notes.
std::vector<std::string> framework_assumptions(const FrameworkSetting& f);

}  // namespace memfine
