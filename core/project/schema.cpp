// The fields of `memfine project --json`'s lines, declared once (core/project/report.h): the one
// list `memfine schema` prints and project_json checks each line against.
#include "core/project/report.h"

#include "core/record/schema.h"

namespace memfine {

const std::vector<FieldSpec>& projection_schema() {
  static const char* k = "project";
  static const std::vector<FieldSpec> fields = {
      {"project", "string", "", "the project file's name", k},
      {"file", "string", "", "the project file as given on the command line (with --json)", k},
      {"model", "string", "", "the model preset (or the file's own model)", k},
      {"hardware", "string", "", "the hardware preset", k},
      {"gpus", "integer", "", "the cluster's GPUs", k},
      {"layout", "object", "",
       "tp, pp, vpp, ep, dp, cp, micro_batch, grad_accumulation and global_batch (sequences a step); etp (expert TP) "
       "where above 1",
       k},
      {"strategy", "string", "", "the strategy's label; empty for a layout rejected before any strategy", k},
      {"name", "string", "", "the registered strategy", k},
      {"drops", "boolean", "", "the strategy drops assignments (capacity capping): another model", k},
      {"fits", "boolean", "", "the need is within the usable memory", k},
      {"fit", "string", "",
       "`yes`, `no`, or `borderline` (within the framework's margin of the limit, or need_gb_range across it)", k},
      {"framework", "string", "", "the framework whose memory and time are priced (framework.name)", k},
      {"precision", "string", "",
       "the linears' GEMMs: `bf16`, `fp8`, `fp8_blockwise` or `mxfp8` (the file's precision)", k},
      {"ep_overlap", "boolean", "", "the all-to-all overlapped with another micro-batch's compute", k},
      {"tp_comm_overlap", "boolean", "", "TP's collectives behind the GEMMs", k},
      {"cuda_graphs", "string", "",
       "what CUDA graphs replay of each layer (framework.cuda_graphs; empty: not given, eager)", k},
      {"ep_overlap_hidden", "number", "", "with ep_overlap: the most of an all-to-all that hides (a share)", k},
      {"hottest_stage", "string", "", "the pipeline rank whose memory is given", k},
      {"why", "string", "", "why the layout or strategy is rejected or does not fit (empty when it does)", k},
      {"rank", "integer", "", "its place by goodput among the ranked (0: rejected)", k},
      {"git_commit", "string", "", "the commit the projection was made at", k},
      {"date", "string", "", "when the projection was made (UTC)", k},
      {"overload", "object", "",
       "the hottest rank's s' over its balanced share at this EP: worst layer, mean over layers, held", k},
      {"published", "object", "",
       "a validation file's published figures (values by quantity; source, evidence, calibration, known_issue)", k},
      {"validation_seen", "object", "",
       "what the validation saw of this model under this framework profile (errors.yaml seen): runs, too_fast, "
       "held (by the range) and error_pct, the lowest, median and highest throughput error at their first "
       "projection (%)",
       k},
      {"validation_seen_hardware", "object", "",
       "the same on this hardware preset, whatever the model and profile (errors.yaml seen_hardware)", k},
      {"validation_seen_micro_batches", "object", "",
       "the same at this layout's micro-batches a step on a rank (errors.yaml seen_micro_batches; its bin)", k},
      {"hardware_assumed", "list", "", "the hardware preset's keys assumed, not measured (its `assumed`)", k},
      {"peak_gb", "number", "GB", "the hottest GPU's allocated peak", k},
      {"static_gb", "number", "GB", "weights, gradients and optimizer state on it", k},
      {"activation_gb", "number", "GB", "activations at its peak", k},
      {"host_gb", "number", "GB", "offloaded to the host", k},
      {"reserved_gb", "number", "GB", "with the allocator's reserve", k},
      {"need_gb", "number", "GB", "with what the process holds beside (CUDA context, NCCL): against the limit", k},
      {"usable_gb", "number", "GB", "the limit the need is judged against: usable_memory x the GPU's memory", k},
      {"need_gb_range", "list", "GB",
       "[low, high] of the need: the range the validation's peaks hold at errors.yaml's level (none without it)", k},
      {"first_step_need_gb", "number", "GB",
       "the first step's need: before its optimizer step creates Adam's moments (need_gb is the steps' after it, "
       "which fit is judged on)",
       k},
      {"optimizer_state_created_gb", "number", "GB",
       "Adam's moments on the hottest rank, created by the first optimizer step: what the later steps hold beside "
       "the first's",
       k},
      {"chunks", "integer", "", "the MoE's chunk count where it runs in chunks (0: not chunked)", k},
      {"step_s", "number", "s", "one training step", k},
      {"step_parts_s", "object", "s",
       "compute, recompute, comm, bubble, offload_wait, chunk_overhead, optimizer, launch and calibration (what "
       "the validation's calibrated constant adds: errors.yaml layer_pass_s a layer's pass of a micro-batch)",
       k},
      {"calibration_passes", "number", "",
       "the layer passes the calibrated constant is paid for: a pipeline rank's, less the share of launches "
       "CUDA graphs replay",
       k},
      {"all_to_all_s", "number", "s", "the step's all-to-all, exposed or not", k},
      {"moe_layer_ms", "object", "ms",
       "one MoE layer's forward and backward of a micro-batch on the hottest rank, each alone (as a layer-level "
       "benchmark times them; not parts of the step)",
       k},
      {"expert_gemm", "object", "",
       "the routed experts' GEMMs: rows per expert and TFLOP/s on the curve (table_tflops, accumulated_tflops: "
       "the GEMM table's at one expert's shape)",
       k},
      {"tokens_per_s_gpu", "number", "tokens/s", "tokens a GPU trains per second", k},
      {"tokens_per_s_gpu_range", "list", "tokens/s",
       "[low, high]: the range that held the validation's published runs at their first projection at "
       "errors.yaml's level (none without it)",
       k},
      {"balanced_tokens_per_s_gpu", "number", "tokens/s", "the same with balanced routing", k},
      {"model_tflops_gpu", "number", "TFLOP/s", "model FLOPs a GPU does per second (no recomputation counted)", k},
      {"goodput", "object", "",
       "ettr, mttf_h, interval_h (the optimal checkpoint interval) and tokens_per_s_gpu that survive failures", k},
  };
  return fields;
}

}  // namespace memfine
