#include "core/project/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>

#include "core/model/flops.h"
#include "core/project/comm.h"
#include "core/project/memory.h"
#include "core/project/pipeline.h"

#include "core/util/format.h"

namespace memfine {

namespace {

Link nvlink(const Hardware& hw) { return {hw.nvlink_latency_us * 1e-6, hw.nvlink_gb_s * 1e9}; }
Link network(const Hardware& hw) { return {hw.network_latency_us * 1e-6, hw.network_gb_s * 1e9}; }
// A job inside one node runs its pipeline and data-parallel collectives over NVLink.
Link outer_link(const Hardware& hw, const Layout& l) { return l.gpus() > hw.gpus_per_node ? network(hw) : nvlink(hw); }

// Whether an expert-parallel group sits inside one node. Megatron's parallel folding lays the
// experts out apart from attention's TP (the expert grid's order tp-cp-ep-dp-pp, parallel_state.py,
// its tp expert TP): an EP group is `ep` ranks `etp` apart, within ep x etp neighbouring ranks,
// whatever attention's TP is.
bool ep_in_node(const Layout& l, const Hardware& hw) { return l.ep * l.etp <= hw.gpus_per_node; }
// What a node-aware dispatcher sends a token to once each: the EP group's GPUs inside a node, its
// nodes across them.
double dispatch_groups(const Layout& l, const Hardware& hw) {
  return ep_in_node(l, hw) ? double(l.ep) : std::ceil(double(l.ep * l.etp) / double(hw.gpus_per_node));
}

// Where a token's consecutive experts (expert_choice) put it: on so many of the GPUs (or nodes) of its group.
std::string consecutive_note(const ModelConfig& m, const Hardware& hw, const Layout& l) {
  const double groups = dispatch_groups(l, hw);
  return ", a token's consecutive experts (expert_choice) on " +
         four_digits(experts_reached(double(m.experts), double(m.topk), groups, true)) + " of " +
         four_digits(groups) + (ep_in_node(l, hw) ? " GPUs" : " nodes");
}

// The expert-parallel dispatch and combine of one micro-batch on one stage (4 all-to-alls per MoE
// layer: forward and backward, each way); `note` says where it runs.
double all_to_all_of(const ModelConfig& m, const Hardware& hw, const Layout& l, const Stage& st,
                     const ProjectSetting& set, double received, std::string& note) {
  const double tokens_gpu = double(l.micro_batch) * double(m.seq) / double(l.cp) / double(l.tp);
  const bool in_node = ep_in_node(l, hw);
  // Megatron's allgather dispatcher (MoEAllGatherTokenDispatcher): every token of the EP x ETP group
  // gathered to each of its GPUs, which keep the rows of their own experts, and the experts' outputs
  // reduce-scattered back; a ring over NVLink inside a node, at the network's rate across nodes.
  if (set.dispatcher == Dispatcher::AllGather) {
    const int64_t group = l.ep * l.etp;
    note = std::string("as the allgather dispatcher's gather and reduce-scatter over the EP x ETP group, ") +
           (in_node ? "NVLink" : "network");
    const double whole = tokens_gpu * double(group) * double(m.hidden) * set.element_bytes;
    return 4 * st.moe * all_gather_time(in_node ? nvlink(hw) : network(hw), group, whole);
  }
  Link ep_link = in_node ? nvlink(hw) : network(hw);
  if (const double r = hw.dispatcher_gb_s(set.dispatcher, in_node); r > 0) ep_link.beta = r * 1e9;
  const double k = double(m.topk);
  const double bytes = std::max(received, tokens_gpu * k) * double(m.hidden) * set.element_bytes;
  const bool node_aware = set.dispatcher == Dispatcher::DeepEp || set.dispatcher == Dispatcher::HybridEp;
  // Of a token's topk experts over `groups` (GPUs or nodes), the groups it reaches.
  auto reached = [&](double groups) { return experts_reached(double(m.experts), k, groups, set.consecutive_experts); };
  note = std::string(in_node ? "NVLink" : node_aware ? "network, once per node (" + name_of(set.dispatcher) + ")" : "network") +
         (set.consecutive_experts && node_aware ? consecutive_note(m, hw, l) : "");
  double one = 0;
  if (in_node) {
    // NCCL's all-to-all sends a row per expert, the other ranks' share over the link. DeepEP and
    // HybridEP send a token once to each GPU one of its experts is on, its own among them, as
    // DeepEP's intranode benchmark counts the bytes its rate divides (tests/legacy/test_intranode.py:
    // recv_x, a row per token a rank receives).
    const double e = double(l.ep);
    one = node_aware && l.ep > 1 ? (e - 1) * ep_link.alpha + bytes * reached(e) / k / ep_link.beta
                                 : all_to_all_time(ep_link, l.ep, bytes);
  } else {
    const double n = dispatch_groups(l, hw);
    // NCCL's all-to-all: the network carries the rows bound for the other nodes, at the NIC's rate.
    // A node-aware dispatcher sends a token once per node it needs and forwards it over NVLink
    // there. Their benchmarks' rates divide the bytes for every node reached, the token's own
    // included (DeepEP tests/legacy/test_internode.py num_rdma_token_sent; HybridEP tests/utils.py
    // count_rdma_send_from_routing_map leaves the local node in "to align with DeepEP"), so the time
    // at that rate is those bytes over it.
    const double network_bytes = node_aware ? bytes * reached(n) / k : bytes * (n - 1) / n;
    one = (n - 1) * ep_link.alpha + network_bytes / ep_link.beta;
  }
  // Expert TP: the dispatcher gathers the rows over the ETP group after the all-to-all and
  // reduce-scatters the experts' partial outputs before the combine's (backward the reverse), over
  // NVLink (the group's GPUs are neighbours).
  if (l.etp > 1) {
    one += all_gather_time(nvlink(hw), l.etp, expert_rows_on_gpu(l, received) * double(m.hidden) * set.element_bytes);
    note += ", with expert TP's gather and reduce-scatter of the rows over NVLink";
  }
  return 4 * st.moe * one;
}

// Megatron's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm) runs one micro-batch's
// forward layer beside another's backward layer, each all-to-all on its own stream beside a
// compute of the other (combined_1f1b.py schedule_layer_1f1b's order): the backward's combine
// beside the forward's attention, the forward's dispatch beside the backward's expert data
// gradients, the backward's dispatch beside the experts' weight gradients and forward, the
// forward's combine beside the backward's attention. An all-to-all longer than its partner stays
// exposed by the difference; at most the framework's measured share of it hides however long the
// partner (framework.cpp); while one runs, its dispatcher's SMs are not the partner's (DeepEP and
// HybridEP run on SMs of their own), so the partner slows by their share.
double overlapped_a2a(const Hardware& hw, const Stage& st, const ProjectSetting& set, const Compute& c,
                      double a2a) {
  const double moe_layers = st.moe;
  if (moe_layers <= 0) return 0;
  const double one = a2a / 4 / moe_layers;  // an all-to-all of one layer
  const double mlp_f = c.experts / 3 / moe_layers, attn_f = (c.total - c.accumulate - c.experts) / 3 / moe_layers;
  const double sms = set.framework.dispatcher_sms(set.dispatcher);
  const double kept = hw.sms > 0 && sms > 0 && sms < hw.sms ? 1 - sms / hw.sms : 1;  // the partner's share of SMs
  // The all-to-all's exposed part beside `work` seconds of compute: what outlasts it, what the
  // measured share leaves unhidden, or what the compute loses to the dispatcher's SMs while the two
  // run, whichever is the most.
  const double hides = std::clamp(set.framework.ep_overlap_hidden, 0.0, 1.0);
  auto exposed = [&](double work) { return std::max({one - work, one * (1 - hides), one * (1 - kept)}); };
  return moe_layers * (exposed(attn_f) + exposed(mlp_f) + exposed(2 * mlp_f) + exposed(2 * attn_f));
}

// The share of a pipeline rank's forward and backward passes that Megatron's combined 1F1B
// schedule runs in pairs, over `micro` micro-batches a step: its warmup forwards (the overlap's
// extra one among them, core/project/pipeline.h) and as many cooldown backwards run alone, their
// all-to-alls exposed; without a pipeline the first forward and the last backward
// (combined_1f1b_schedule_for_no_pipelining). Plain 1F1B (Megatron runs the overlap only
// interleaved) is taken alike.
double paired_share(const Layout& l, int64_t rank, int64_t micro) {
  const double passes = double(micro) * double(l.vpp);
  return std::max(0.0, 1 - double(warmup_passes(l, rank, true)) / passes);
}

// What a shape runs again: a layer recomputed whole runs its forward again with its dispatch and
// combine; a MoE recomputed as a block or in chunks, its experts' forward and the all-to-alls;
// moe_act and buffer-free experts SiLU(a) * b of the routed rows (memory-bound).
double recompute_of(const StrategyShape& s, const Compute& c, double a2a) {
  // skip_dead: the replay skips the experts' second GEMM (a third of their forward FLOPs: h x 2g in,
  // g x h out) and the combine's all-to-all.
  const double dead = s.skip_dead && replays_moe(s) ? c.experts / 9 + a2a / 4 : 0;
  if (s.recompute_layer) return c.forward() + a2a / 2 - dead;
  if (s.moe != MoeMode::Stored) return c.experts / 3 + a2a / 2 - dead;
  if (s.experts == ExpertStorage::ActRecomputed || (s.experts == ExpertStorage::BufferFree && !s.keep_act))
    return c.act_hbm;
  return 0;
}

// The kernels the host launches for one micro-batch on one stage: the forward's from Python, a
// replayed forward's and the recomputed modules' (`modules`) from Python again during backward, the
// backward's from the autograd engine; and those after each of the dispatcher's host
// synchronisations (a MoE forward's, a replayed one's), which the GPU waits for.
struct HostLaunches {
  double forward = 0, again = 0, backward = 0, after_sync = 0, after_sync_again = 0;
};
// A stage's launches of `x` (the forward's or the backward's), `moe` MoE blocks a micro-batch; with
// `eager`, less what CUDA graphs replay (each block's captured share of its forward's launches).
double stage_launches(const Stage& st, double moe, const Launches& x, const FrameworkSetting& f, bool eager) {
  auto left = [&](double all, double captured, double forward) {
    return eager && forward > 0 ? all * (1 - captured / forward) : all;
  };
  return st.layers * left(x.attention, f.captured.attention, f.forward.attention) +
         st.dense * left(x.dense_ffn, f.captured.dense_ffn, f.forward.dense_ffn) +
         moe * left(x.moe, f.captured.moe, f.forward.moe);
}

HostLaunches host_launches(const Stage& st, const StrategyShape& s, const FrameworkSetting& f, double modules) {
  const double moe = st.moe * moe_runs(s);
  HostLaunches h;
  h.forward = stage_launches(st, moe, f.forward, f, true);
  h.again = (s.recompute_layer ? stage_launches(st, moe, f.forward, f, false)
             : replays_moe(s)  ? moe * f.forward.moe
                               : 0) +
            modules;
  h.backward = stage_launches(st, moe, f.backward, f, true);
  h.after_sync = moe * (f.forward.moe_after_sync - f.captured.moe_after_sync);
  h.after_sync_again = replays_moe(s) ? h.after_sync : 0;
  return h;
}

// How long the GPU waits for the host's launches in one micro-batch on one stage that keeps it busy
// for `on_gpu` seconds: it runs behind the host while its kernels are the longer, and waits where the
// host is the slower and after each of the dispatcher's synchronisations. `modules`: what the
// framework's recomputed modules launch again.
double launch_wait(const Hardware& hw, const Stage& st, const StrategyShape& s, const FrameworkSetting& f,
                   double modules, double on_gpu, std::string& note) {
  const Launches& fw = f.forward;
  note = hw.host_forward_launch_us > 0 && fw.attention + fw.moe > 0
             ? "; the host launches a layer's kernels (" + four_digits(fw.attention) + " attention, " +
                   four_digits(fw.moe) + " MoE in forward; " + four_digits(f.backward.attention) + " and " +
                   four_digits(f.backward.moe) + " in backward) at " + four_digits(hw.host_forward_launch_us) +
                   " us each from Python and " + four_digits(hw.host_backward_launch_us) +
                   " from autograd: where that is longer than the GPU's micro-batch, the GPU waits for it; after the "
                   "dispatcher's host synchronisation, " +
                   four_digits(fw.moe_after_sync) + " launches a MoE forward with the GPU waiting" +
                   (f.cuda_graphs == "none" ? ""
                                            : "; CUDA graphs replay " + f.cuda_graphs +
                                                  " (framework.cuda_graphs): not launched, forward or backward")
             : "; kernel launches not priced";
  const HostLaunches h = host_launches(st, s, f, modules);
  const double fwd = hw.host_forward_launch_us * 1e-6;
  const double host = (h.forward + h.again) * fwd + h.backward * hw.host_backward_launch_us * 1e-6;
  const double drained = (h.after_sync + h.after_sync_again) * fwd;
  return std::max(host, on_gpu + drained) - on_gpu;
}

// One MoE layer's forward and backward of a micro-batch on the hottest rank, each alone, from the
// parts a step prices: its compute, its four all-to-alls, what the shape recomputes, and the host's
// launches (host_launches: a side the host launches slower than the GPU runs it takes the host's
// time).
std::pair<double, double> moe_layer_pass(const ModelConfig& m, const Hardware& hw, const Layout& l,
                                         const StrategyShape& s, const ProjectSetting& set, double received) {
  const Stage one{0, 0, 1, 0, 0};
  const Compute c = compute_of(m, hw, l, one, s, set, received);
  std::string note;
  const double a2a = all_to_all_of(m, hw, l, one, set, received, note);
  const HostLaunches h = host_launches(one, s, set.framework, c.modules_launches);
  const double fwd = hw.host_forward_launch_us * 1e-6, bwd = hw.host_backward_launch_us * 1e-6;
  const double forward = std::max(h.forward * fwd, c.forward() + a2a / 2 + h.after_sync * fwd);
  const double again = recompute_of(s, c, a2a) + c.modules_again;
  const double backward = std::max(h.again * fwd + h.backward * bwd,
                                   c.total - c.forward() + a2a / 2 + again + h.after_sync_again * fwd);
  return {forward, backward};
}

}  // namespace

namespace {

// One micro-batch on one pipeline rank, by part (seconds).
struct RankTime {
  Compute c;
  double a2a = 0, comm = 0, recompute = 0, wait = 0, fsdp_exposed = 0, rerun = 0, launch = 0;
  // How its communication and launches were priced, as the notes say it.
  std::string a2a_note, overlap_note, tp_note, pp_note, launch_note;
  double per_micro() const { return c.total + recompute + comm + fsdp_exposed + wait + rerun + launch; }
};

RankTime rank_time(const ModelConfig& m, const Hardware& hw, const Layout& l, const Stage& st, const StrategyShape& s,
                   const ProjectSetting& set, double received, const StepMemory& mem, int64_t micro, int64_t rank) {
  const double h = double(m.hidden), kB = set.element_bytes;
  const double tokens = double(l.micro_batch) * double(m.seq) / double(l.cp), tokens_gpu = tokens / double(l.tp);
  RankTime t;
  const Compute& c = t.c = compute_of(m, hw, l, st, s, set, received);
  const double a2a = t.a2a = all_to_all_of(m, hw, l, st, set, received, t.a2a_note);
  double tp_comm = l.tp > 1 ? 4 * st.layers * reduce_scatter_time(nvlink(hw), l.tp, tokens * h * kB) : 0;
  // Megatron's --tp-comm-overlap splits the GEMMs beside TP's collectives into pieces, each piece's
  // collective behind another's GEMM: what outlasts the dense GEMMs stays exposed.
  if (set.framework.tp_comm_overlap) tp_comm = std::max(0.0, tp_comm - c.dense);
  t.tp_note = set.framework.tp_comm_overlap ? "behind the dense GEMMs where they are shorter" : "exposed";
  if (kv_heads_gathered(m, l)) {
    // TP above the kv heads: each layer's forward gathers the QKV projection's output over TP, its
    // backward reduce-scatters the gradient (attention.py all_gather_last_dim_from_tensor_parallel_region),
    // beside no GEMM.
    const double qkv = tokens * double((m.heads + 2 * m.kv_heads) * m.head_dim) * kB;
    tp_comm += st.layers * (all_gather_time(nvlink(hw), l.tp, qkv) + reduce_scatter_time(nvlink(hw), l.tp, qkv));
    t.tp_note += ", and the QKV projection's output gathered over TP (TP above the kv heads)";
  }
  const Link dp_link = outer_link(hw, l);
  // A micro-batch's activation sent on and its gradient sent back: exposed, or, where the framework
  // overlaps the interleaved schedule's, once a virtual stage behind the micro-batch's compute.
  const double send = l.pp > 1 ? send_time(dp_link, tokens_gpu * h * kB) : 0;
  const bool pp_hidden = l.vpp > 1 && set.framework.p2p_overlap_interleaved;
  const double pp_comm = pp_hidden ? std::max(0.0, 2 * double(l.vpp) * send - c.total) : 2 * send;
  t.pp_note = pp_hidden ? "; pipeline sends behind the virtual stages' compute" : "; pipeline sends exposed";
  double a2a_exposed = a2a;
  if (set.framework.ep_overlap && micro > 1) {
    const double paired = paired_share(l, rank, micro);
    a2a_exposed = paired * overlapped_a2a(hw, st, set, c, a2a) + (1 - paired) * a2a;
    t.overlap_note = ", each beside a compute of another micro-batch in Megatron's 1F1B pairs (the warmup's and "
                     "cooldown's passes alone), at most " + four_digits(100 * set.framework.ep_overlap_hidden) +
                     "% of it hidden, slowed by the dispatcher's SMs";
  }
  // ChunkedEP: chunk i+1's dispatch runs behind chunk i's experts, in the forward and in a replay
  // for backward; all but the first chunk's, where the experts' forward is at least as long.
  double hidden = 0;
  if (s.dispatch_ahead && s.chunks > 1) {
    const double C = double(s.chunks), per_pass = (C - 1) / C * std::min(a2a_exposed / 4, c.experts / 3);
    hidden = per_pass * (replays_moe(s) ? 2 : 1);
  }
  t.comm = a2a_exposed + tp_comm + pp_comm - std::min(hidden, a2a_exposed);
  t.recompute = recompute_of(s, c, a2a_exposed) + c.modules_again;
  // torchtitan's op-level checkpointing before its list kept the all-to-alls: backward runs the
  // forward's dispatch and combine again to rebuild the routed rows.
  if (op_level_checkpointing(set, s) && !set.framework.selective_op_all_to_all) t.recompute += a2a_exposed / 2;
  // Offloading's copies against a layer's own compute (the next layer's forward, the previous one's backward).
  if (s.offload.encodes() && hw.hbm_gb_s > 0) {
    // Encoding reads each element and writes its code; decoding reads the code and writes it back.
    const double per_layer = mem.encoded_bytes / std::max(1.0, mem.layers_in_flight);
    t.wait = st.layers * per_layer * 2 * (1 + s.offload.code_fraction(kB)) / (hw.hbm_gb_s * 1e9);
  }
  if (s.offload.to_host && s.offload.any()) {
    const double off_layer = mem.host_bytes / std::max(1.0, mem.layers_in_flight);
    const double layer_fwd = c.forward() / std::max(1.0, st.layers);
    t.wait += st.layers * std::max({0.0, off_layer / (hw.device_to_host_gb_s * 1e9) - layer_fwd,
                                    off_layer / (hw.host_to_device_gb_s * 1e9) - 2 * layer_fwd});
  }
  // FSDP gathers every layer's weights for the forward and again for the backward, behind the
  // micro-batch's compute where it can.
  if (set.framework.fsdp) {
    const double expert_dp = expert_data_parallel(l);
    const double gather =
        2 * (all_gather_time(dp_link, l.dp * l.cp, mem.stage_params * 2) +
             (expert_dp > 1 ? all_gather_time(dp_link, int64_t(expert_dp), mem.stage_expert_params * 2) : 0));
    t.fsdp_exposed = std::max(0.0, gather - c.total - t.recompute);
  }
  // Paged Stash where the hottest rank overflows: every step runs twice, the second without the stash.
  t.rerun = stash_reruns(s.stash, received, tokens * double(m.topk) / double(l.tp)) ? c.total + t.comm : 0;
  const double on_gpu = c.total + t.recompute + t.comm + t.fsdp_exposed + t.wait + t.rerun;
  t.launch = launch_wait(hw, st, s, set.framework, c.modules_launches, on_gpu, t.launch_note);
  return t;
}

}  // namespace

double dp_step_time(const Link& dp_link, const Layout& l, const StepMemory& mem, bool fsdp) {
  const double expert_dp = expert_data_parallel(l);
  const double grads = mem.stage_params * 4, expert_grads = mem.stage_expert_params * 4;
  double t = reduce_scatter_time(dp_link, l.dp * l.cp, grads) + all_gather_time(dp_link, l.dp * l.cp, grads / 2);
  if (expert_dp > 1) {
    t += reduce_scatter_time(dp_link, int64_t(expert_dp), expert_grads);
    // Megatron's distributed optimizer gathers the experts' weights as it gathers the rest
    // (core/distributed/distributed_data_parallel.py start_param_sync walks
    // expert_parallel_bucket_groups too).
    if (!fsdp) t += all_gather_time(dp_link, int64_t(expert_dp), expert_grads / 2);
  }
  return t;
}

double eager_launch_share(const ModelConfig& m, const Layout& l, const ProjectSetting& set) {
  Stage whole;
  for (const RankShape& r : rank_shapes(m, l, set.pipeline_layout)) {
    const Stage st = stage_of(m, r);
    whole.layers += st.layers, whole.dense += st.dense, whole.moe += st.moe;
  }
  const FrameworkSetting& f = set.framework;
  const double all =
      stage_launches(whole, whole.moe, f.forward, f, false) + stage_launches(whole, whole.moe, f.backward, f, false);
  if (all <= 0) return 1;
  return (stage_launches(whole, whole.moe, f.forward, f, true) +
          stage_launches(whole, whole.moe, f.backward, f, true)) /
         all;
}

double layer_passes(const ModelConfig& m, const Layout& l) {
  // A pass on any rank waits the same: the fill and drain wait for the other ranks' passes as the
  // bubble waits for their kernels, (p-1)/v micro-batches a schedule.
  const double fill_drain = double(l.grad_accumulation) * double(l.pp - 1) / double(l.vpp);
  return (double(micro_batches(l)) + fill_drain) * double(m.layers) / double(l.pp);
}

StepParts step_time(const ModelConfig& m, const Hardware& hw, const Layout& l, const StrategyShape& s,
                    const ProjectSetting& set, double received, const StepMemory& mem) {
  const int64_t micro = micro_batches(l);
  // Every pipeline rank's micro-batch: the slowest sets the pace of the steady state.
  std::vector<double> per_rank;
  RankTime slowest;
  const std::vector<RankShape> ranks = rank_shapes(m, l, set.pipeline_layout);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankTime t = rank_time(m, hw, l, stage_of(m, ranks[i]), s, set, received, mem, micro, int64_t(i));
    per_rank.push_back(t.per_micro());
    if (per_rank.size() == 1 || t.per_micro() > slowest.per_micro()) slowest = t;
  }
  const Compute& c = slowest.c;
  const double per_micro = slowest.per_micro();
  const Link dp_link = outer_link(hw, l);
  const double expert_dp = expert_data_parallel(l);
  // DP's collectives once a step, behind all but the last micro-batch's backward.
  const double dp_exposed = std::max(0.0, dp_step_time(dp_link, l, mem, set.framework.fsdp) - per_micro * 2 / 3);
  StepParts p;
  std::string optimizer_note;
  // The optimizer step: what it moves through memory at the HBM rate (memory-bound kernels).
  if (hw.hbm_gb_s > 0) {
    const FrameworkSetting& f = set.framework;
    optimizer_note = "; the optimizer step moves " + four_digits(f.optimizer_bytes) + " bytes a parameter of " +
                     (f.optimizer_sharded ? "its shard" : "the rank") + " at the HBM rate, once a step";
    const double shard = f.optimizer_sharded ? mem.stage_params / double(l.dp * l.cp) + mem.stage_expert_params / expert_dp
                                             : mem.stage_params + mem.stage_expert_params;
    p.optimizer = (shard * f.optimizer_bytes + (mem.stage_params + mem.stage_expert_params) * f.grad_zero_bytes) /
                  (hw.hbm_gb_s * 1e9);
  }
  p.compute = double(micro) * (c.total - c.chunk), p.chunk_overhead = double(micro) * c.chunk;
  p.recompute = double(micro) * (slowest.recompute + slowest.rerun), p.offload_wait = double(micro) * slowest.wait;
  p.comm = double(micro) * (slowest.comm + slowest.fsdp_exposed) + dp_exposed;
  p.all_to_all = double(micro) * slowest.a2a;
  p.launch = double(micro) * slowest.launch;
  std::tie(p.moe_layer_forward, p.moe_layer_backward) = moe_layer_pass(m, hw, l, s, set, received);
  p.bubble = double(l.grad_accumulation) * pipeline_bubble_time(per_rank, l.vpp);  // a fill and drain per schedule
  // The notes of the terms priced above (the slowest rank's, which set the step).
  p.notes = {"compute: " + c.note + optimizer_note + slowest.launch_note,
             "pipeline: each rank's layers, MTP modules and output layer (" +
                 (set.pipeline_layout.empty() ? std::string("the layers split evenly in order")
                                              : "the layout " + set.pipeline_layout) +
                 "); the slowest rank's micro-batches set the step, the others' are the fill and drain",
             "communication: the all-to-all (4 per MoE layer, " + slowest.a2a_note + slowest.overlap_note +
                 ") exposed; TP's sequence-parallel collectives " + slowest.tp_note + slowest.pp_note +
                 "; CP's ring and DP's gradient reduce-scatter and weight all-gather hidden behind compute but for "
                 "the last micro-batch"};
  return p;
}

}  // namespace memfine
