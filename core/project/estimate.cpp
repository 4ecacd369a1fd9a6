#include "core/project/estimate.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/model/flops.h"
#include "core/project/memory.h"
#include "core/project/rates.h"
#include "core/project/step_time.h"

#include "core/util/format.h"

namespace memfine {

namespace {

// Goodput: the step's speed less what failures and checkpoints take. A checkpoint holds bf16
// weights, fp32 master weights and Adam's moments of every parameter, once (each data-parallel
// shard writes its part), every node (of the failure rates' 8 GPUs) writing at the same time.
void add_goodput(Estimate& e, const ModelConfig& m, const ProjectSetting& set) {
  const double nodes = std::max(1.0, double(e.layout.gpus()) / double(kReliabilityNodeGpus));
  const double state = total_parameters(m) * (2 + 12) / 1e9;  // GB
  const double write_h = state / (set.checkpoint_gb_s_per_node * nodes) / 3600;
  e.goodput = goodput(int64_t(nodes), set.reliability.node_failure_rate, set.restart_h, write_h, e.tokens_per_s_gpu);
  e.assumptions.push_back(
      "goodput: " + (set.reliability.name.empty() ? std::string("a written rate of ") : set.reliability.name + "'s ") +
      four_digits(set.reliability.node_failure_rate * 24000) + " failures per 1000 node-days (nodes of " +
      std::to_string(kReliabilityNodeGpus) + " GPUs), restart " + four_digits(set.restart_h * 60) +
      " min, a checkpoint of " + four_digits(state) + " GB (14 bytes a parameter) written at " +
      four_digits(set.checkpoint_gb_s_per_node) + " GB/s per node, at Kokolis et al.'s optimal interval");
}

}  // namespace

Estimate estimate(const ModelConfig& m, const Hardware& hw, const Layout& l, const Strategy& s,
                  const ProjectSetting& set) {
  Estimate e;
  e.layout = l, e.strategy = s.label(), e.name = s.spec().name, e.drops = !s.dropless();
  e.lossy = s.lossy();
  e.held_overload = set.held_overload;
  // Rows the hottest rank's experts receive per micro-batch; a capacity caps its overload.
  const double tokens_gpu = double(l.micro_batch) * double(m.seq) / double(l.cp) / double(l.tp);
  const double cap = s.shape().capacity_factor;
  auto capped = [&](double x) { return cap > 0 ? std::min(x, cap) : x; };
  const double received = capped(set.overload) * tokens_gpu * double(m.topk);
  const double received_on_average = capped(set.time_overload) * tokens_gpu * double(m.topk);
  const double received_held = capped(set.held_overload) * tokens_gpu * double(m.topk);
  const StageMemory memory(m, l, set, received, received_held);
  const double usable = set.usable_memory * hw.memory_gb * 1e9;
  e.shape = s.choose_shape([&](const StrategyShape& shape) { return memory.peak(shape).need <= usable; }).shape;
  if (e.shape.moe == MoeMode::Chunked) e.chunks = e.shape.chunks;
  const StageMemory::Peak peak = memory.peak(e.shape);
  e.hottest_stage = peak.stage, e.host_gb = peak.host_bytes / 1e9;
  e.static_gb = peak.static_bytes / 1e9, e.peak_gb = peak.bytes / 1e9;
  e.reserved_gb = peak.reserved / 1e9, e.need_gb = peak.need / 1e9;
  e.activation_gb = (peak.bytes - peak.static_bytes) / 1e9;
  e.first_step_need_gb = peak.first_step_need / 1e9, e.lazy_gb = peak.lazy_bytes / 1e9;
  e.fits = peak.need <= usable, e.usable_gb = usable / 1e9;
  // Borderline: within the framework's margin of the limit, or the need's range across it.
  const ProjectionErrors& err = set.errors;
  const ProjectionErrors::Range* known = err.memory_of(set.framework.profile);
  const ProjectionErrors::Range range = known ? *known : ProjectionErrors::Range{};
  if (known) e.need_gb_range = {e.need_gb * range.low, e.need_gb * range.high};
  const double margin = set.framework.margin * peak.bytes;
  e.fit = peak.need > usable + margin && peak.need * range.low > usable    ? "no"
          : peak.need < usable - margin && peak.need * range.high < usable ? "yes"
                                                                           : "borderline";
  if (!e.fits) {
    std::ostringstream o;
    o.precision(3);
    o << (e.fit == "borderline" ? "out of memory, borderline: needs " : "out of memory: needs ") << e.need_gb << " GB (allocated " << e.peak_gb << ", static " << e.static_gb
      << ") of " << usable / 1e9 << " usable on the " << e.hottest_stage << " stage";
    e.why = o.str();
  }
  e.assumptions = memory.assumptions(e.shape);
  for (const auto& a : framework_assumptions(set.framework)) e.assumptions.push_back(a);
  if (e.shape.offload.encodes())
    e.assumptions.push_back("encoded: " + offload_modules_text(e.shape.offload) +
                            " of every layer but the one running, encoded and decoded at the HBM rate" +
                            (e.shape.offload.to_host ? ", the codes offloaded" : ""));
  if (e.shape.offload.to_host && e.shape.offload.any())
    e.assumptions.push_back("offload: " + offload_modules_text(e.shape.offload) +
                            " of every layer but the one running and those prefetched");
  const StepParts t =
      step_time(m, hw, l, e.shape, set, received_on_average,
                {memory.stage_params(), memory.stage_expert_params(), e.host_gb * 1e9, peak.layers_in_flight,
                 peak.encoded_bytes});
  for (const auto& a : t.notes) e.assumptions.push_back(a);
  e.compute = t.compute, e.chunk_overhead = t.chunk_overhead, e.recompute = t.recompute, e.comm = t.comm;
  e.all_to_all = t.all_to_all, e.offload_wait = t.offload_wait, e.bubble = t.bubble, e.step = t.step();
  e.optimizer = t.optimizer, e.launch = t.launch;
  e.moe_layer_forward = t.moe_layer_forward, e.moe_layer_backward = t.moe_layer_backward;
  // The one calibrated constant: what the validation's runs took beside the priced parts, a fixed time
  // for each layer's pass of a micro-batch on a pipeline rank (the host's share of a layer: it does
  // not shrink with the layer's work), paid by the launches CUDA graphs leave to the host.
  e.calibration_passes = layer_passes(m, l) * eager_launch_share(m, l, set);
  e.calibration = err.layer_pass_s * e.calibration_passes;
  e.step += e.calibration;
  e.expert_rows = expert_gemm_rows(m, l, e.shape, received_on_average);
  // In FP8 the experts' GEMMs, on the curve and on the table alike, at the preset's FP8 ratio.
  const double fp8 = fp8_speedup(hw, e.expert_rows, set.precision);
  const double h = double(m.hidden), g = double(expert_share(m, l).ffn_hidden);
  e.expert_tflops = expert_gemm_rate(hw, e.expert_rows, h, g, local_experts(m, l)) * fp8 / 1e12;
  if (!hw.gemm_table.empty()) {
    // Beside the accumulation into the gradient buffer (framework.wgrad_accumulate_bytes), added.
    const double acc = set.framework.wgrad_accumulate_bytes;
    ExpertKernels k = expert_kernels(hw, e.expert_rows, h, g, acc);
    k.gemm_s /= fp8;
    const double flops = 3 * expert_forward_flops(e.expert_rows, h, g);
    if (k.gemm_s > 0) e.expert_table_tflops = flops / k.gemm_s / 1e12;
    if (k.gemm_s > 0 && acc > 0) e.expert_accumulated_tflops = flops / (k.gemm_s + k.accumulate_s) / 1e12;
  }
  e.tokens_per_s_gpu = double(l.global_batch) * double(m.seq) / e.step / double(l.gpus());
  e.model_tflops_gpu = e.tokens_per_s_gpu * token_flops(m).training() / 1e12;
  if (!err.file.empty())
    e.tokens_per_s_gpu_range = {e.tokens_per_s_gpu * err.speed_low, e.tokens_per_s_gpu * err.speed_high};
  add_goodput(e, m, set);
  return e;
}

}  // namespace memfine
