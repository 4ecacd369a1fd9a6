#include "core/project/estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "core/model/flops.h"
#include "core/project/comm.h"
#include "core/project/pipeline.h"
#include "core/project/work.h"

namespace memfine {

std::string Layout::text() const {
  std::ostringstream o;
  o << "TP" << tp << " PP" << pp;
  if (vpp > 1) o << "x" << vpp;
  o << " EP" << ep << " DP" << dp << " CP" << cp << " mb" << micro_batch;
  if (grad_accumulation > 1) o << " GA" << grad_accumulation;
  return o.str();
}

ProjectStrategy project_strategy(const std::string& name) {
  ProjectStrategy s;
  s.name = name;
  if (name == "no_recompute")
    s.keep = Keep::Stored;
  else if (name == "full_recompute")
    s.keep = Keep::Full;
  else if (name == "moe_act_recompute")
    s.keep = Keep::MoeAct;
  else if (name == "memfine")
    s.keep = Keep::MemFine;
  else if (name == "offload")
    s.keep = Keep::Offload;
  else if (name == "capacity")
    s.keep = Keep::Capacity;
  else
    throw std::invalid_argument("'" + name +
                                "' is not a strategy memfine project models: one of 'no_recompute', 'full_recompute', "
                                "'moe_act_recompute', 'memfine', 'offload', 'capacity'");
  return s;
}

namespace {

// The grouped expert GEMM's rate at `rows` per expert: the small shapes' rate rising linearly to
// the large shapes' at the knee (both measured kernel rates, hardware file).
double grouped_rate(const Hardware& hw, double rows) {
  const auto& c = hw.grouped_gemm_curve;
  if (!c.empty()) {
    // A measured curve: log-linear in rows between its points, flat beyond its ends.
    if (rows <= c.front().first) return c.front().second * 1e12;
    for (size_t i = 1; i < c.size(); ++i)
      if (rows <= c[i].first) {
        const double f = std::log(rows / c[i - 1].first) / std::log(c[i].first / c[i - 1].first);
        return (c[i - 1].second + f * (c[i].second - c[i - 1].second)) * 1e12;
      }
    return c.back().second * 1e12;
  }
  const double f = std::min(1.0, rows / hw.grouped_gemm_knee_rows);
  return (hw.grouped_gemm_small_tflops + f * (hw.grouped_gemm_tflops - hw.grouped_gemm_small_tflops)) * 1e12;
}

// A rate or count as a person reads it: four significant digits.
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

Link nvlink(const Hardware& hw) { return {hw.nvlink_latency_us * 1e-6, hw.nvlink_gb_s * 1e9}; }
Link network(const Hardware& hw) { return {hw.network_latency_us * 1e-6, hw.network_gb_s * 1e9}; }

}  // namespace

Estimate estimate(const ProjectModel& m, const Hardware& hw, const Layout& l, const ProjectStrategy& s,
                  const ProjectSetting& set) {
  Estimate e;
  e.layout = l, e.strategy = s;
  const double kBytes = set.element_bytes;  // activations' element (bf16: 2)
  auto& why = e.assumptions;
  const double h = double(m.hidden), g = double(m.ffn_hidden), E = double(m.experts), V = double(m.vocab);
  const double seq = double(m.seq), mb = double(l.micro_batch), tp = double(l.tp), cp = double(l.cp);
  const int64_t micro = l.global_batch / (l.dp * l.micro_batch);  // micro-batches per step and DP rank
  const int64_t per_flush = micro / l.grad_accumulation;          // per pipeline schedule
  const int64_t mtp = m.mtp_layers;
  // Layers per virtual stage, the last ones shorter when PP x VPP does not divide them (Megatron's
  // and NeMo's uneven layouts). The first rank holds the embedding, the dense leading layers and the
  // most micro-batches in flight; the last rank the output head, the loss's logits and DeepSeek's
  // multi-token prediction (MTP) layers with their own copy of the embedding.
  const int64_t per_chunk = (m.layers + l.pp * l.vpp - 1) / (l.pp * l.vpp);
  const int64_t stage_layers = std::min(m.layers, per_chunk * l.vpp);
  const int64_t stage_dense = std::min(m.dense_layers, per_chunk), stage_moe = stage_layers - stage_dense;
  // Micro-batches whose activations a rank keeps at once, in whole-rank units: 1F1B's warm-up keeps
  // PP - rank; interleaved 1F1B keeps 2 (PP - rank - 1) + (VPP - 1) PP + 1 virtual-stage micro-batches
  // of 1 / VPP of the rank's layers each (Megatron's schedule); fewer if the schedule has fewer.
  auto inflight_at = [&](int64_t rank) {
    const double warm =
        l.vpp == 1 ? double(l.pp - rank) : double(2 * (l.pp - rank - 1) + (l.vpp - 1) * l.pp + 1) / double(l.vpp);
    return std::min(warm, double(per_flush));
  };
  const double tokens = mb * seq / cp;    // a micro-batch's tokens on a CP rank
  const double tokens_gpu = tokens / tp;  // sequence parallel inside TP
  const double local_experts = E / double(l.ep);
  const double overload = s.keep == Keep::Capacity ? std::min(set.overload, s.capacity_factor) : set.overload;
  const double received = overload * tokens_gpu * double(m.topk);  // rows the hottest rank's experts get

  // ---- Parameters (bf16 weights of every kind) per layer on one GPU.
  const double attn_params = attention_proj_flops(m) / 2 / tp;
  const double dense_layer_params = attn_params + 3 * h * double(m.dense_ffn_hidden) / tp;
  const double moe_layer_params = attn_params + h * E + 3 * h * g * double(m.shared_experts) / tp;
  const double layer_expert_params = local_experts * 3 * h * g;
  const double table = V * h / tp;           // the embedding, or the output head
  const double mtp_params = 2 * h * h / tp;  // an MTP module's projection beside its MoE layer
  const double dp_shard = double(l.dp * l.cp), expert_dp = double(l.dp * l.cp * l.tp) / double(l.ep);
  // Megatron's distributed optimizer keeps bf16 weights and fp32 gradients whole and shards the fp32
  // master weights and Adam's moments (12 bytes a parameter); FSDP (PyTorch's, in mixed precision)
  // shards fp32 weights, fp32 gradients and the moments (16 bytes) and gathers two layers' bf16
  // weights at a time (the one running and the one prefetched).
  auto static_of = [&](double params, double expert_params) {
    if (set.fsdp)
      return params * 16 / dp_shard + expert_params * 16 / expert_dp + 2 * 2 * (moe_layer_params + layer_expert_params);
    return params * (2 + 4 + 12 / dp_shard) + expert_params * (2 + 4 + 12 / expert_dp);
  };
  why.push_back(std::string(set.fsdp ? "static: FSDP: fp32 weights, gradients and Adam moments "
                                       "sharded over DP x CP (experts: DP x CP x TP / EP), two layers' weights gathered"
                                     : "static: bf16 weights, fp32 gradients, fp32 master weights and Adam moments "
                                       "sharded over DP x CP (experts: over DP x CP x TP / EP) by the distributed "
                                       "optimizer") +
                "; the hotter of the first stage (embedding, dense layers, most micro-batches in flight) and the "
                "last (head, logits, MTP)");

  // ---- Activations per micro-batch and layer on this GPU.
  // The paper's Eq. 2, its s term (norms, attention, router) with t = TP, c = CP.
  const double s_term =
      kBytes * tokens_gpu * (5 * h + double(m.heads * m.head_dim) + 2 * double(m.kv_heads * m.head_dim));
  const double router = kBytes * tokens_gpu * E;
  const double shared = kBytes * tokens * 4 * g * double(m.shared_experts) / tp;
  const double dense_ffn = kBytes * tokens * 4 * double(m.dense_ffn_hidden) / tp;
  // Per received row, what this suite's implementation model measured the experts keep: the input,
  // output and weighted rows (3 h) and z, SiLU(a) and the product (4 g); moe_act drops the last two
  // (z alone, 2 g).
  const double row_g = s.keep == Keep::MoeAct ? 2 : 4;
  const double per_row = kBytes * (3 * h + row_g * g);
  auto moe_layer = [&](double chunks) { return s_term + router + shared + per_row * received / chunks; };
  const double dense_layer = s_term + dense_ffn;
  const double input = kBytes * tokens_gpu * h;  // a layer's input, what a recomputed layer keeps
  // The loss's logits, one micro-batch at a time: bf16 and the fp32 softmax (vocabulary split by TP).
  const double logits = tokens * V / tp * (2 + 4);
  why.push_back("activations: the paper's Eq. 2 s term per layer (t = TP, c = CP) plus 3h + " +
                std::string(row_g == 2 ? "2g" : "4g") +
                " bf16 per received row (this suite's implementation model), x the micro-batches the schedule "
                "keeps in flight on the rank; the logits in bf16 and fp32");
  const double usable = set.usable_memory * hw.memory_gb * 1e9;
  // A rank's activations with `chunks` MemFine chunks (1: whole).
  struct Stage {
    double dense, moe, params, expert_params, inflight, logits;
  };
  auto activations = [&](const Stage& st, double chunks) {
    const double whole = st.dense * dense_layer + st.moe * moe_layer(1);
    const double biggest = std::max(st.dense > 0 ? dense_layer : 0.0, st.moe > 0 ? moe_layer(chunks) : 0.0);
    switch (s.keep) {
      case Keep::Full:
      case Keep::MemFine:
        return st.inflight * (st.dense + st.moe) * input + biggest + st.logits;
      case Keep::Offload: {
        // Megatron's recommended modules: attention's core (q, k, v as its kernel saves them) and the
        // experts' first GEMM input; the layer being run and the one prefetched stay on the device.
        const double off = kBytes * tokens_gpu * (double(m.heads * m.head_dim) + 2 * double(m.kv_heads * m.head_dim)) +
                           kBytes * received * h;
        const double moved = st.inflight * (st.dense + st.moe) * off;
        return st.inflight * whole - moved + std::min(moved, 2 * off) + st.logits;
      }
      default:
        return st.inflight * whole + st.logits;
    }
  };
  auto offloaded = [&](const Stage& st) {
    const double off = kBytes * tokens_gpu * (double(m.heads * m.head_dim) + 2 * double(m.kv_heads * m.head_dim)) +
                       kBytes * received * h;
    return st.inflight * (st.dense + st.moe) * off;
  };
  std::vector<Stage> stages;
  const double last_layers =
      double((l.vpp - 1) * per_chunk + std::max<int64_t>(0, m.layers - (l.pp * l.vpp - 1) * per_chunk));
  if (l.pp == 1) {
    stages.push_back({double(m.dense_layers), double(m.moe_layers() + mtp),
                      (double(m.dense_layers) * dense_layer_params + double(m.moe_layers() + mtp) * moe_layer_params +
                       2 * table + double(mtp) * mtp_params),
                      double(m.moe_layers() + mtp) * layer_expert_params, inflight_at(0), logits * double(1 + mtp)});
  } else {
    stages.push_back({double(stage_dense), double(stage_moe),
                      double(stage_dense) * dense_layer_params + double(stage_moe) * moe_layer_params + table,
                      double(stage_moe) * layer_expert_params, inflight_at(0), 0});
    const double moe_last = last_layers + double(mtp);
    stages.push_back({0, moe_last, moe_last * moe_layer_params + table + double(mtp) * (table + mtp_params),
                      moe_last * layer_expert_params, inflight_at(l.pp - 1), logits * double(1 + mtp)});
  }
  auto peak_of = [&](double chunks, size_t& hottest) {
    double peak = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      const double b = static_of(stages[i].params, stages[i].expert_params) + activations(stages[i], chunks);
      if (b > peak) peak = b, hottest = i;
    }
    return peak;
  };
  size_t hottest = 0;
  double chunks_used = 1;
  if (s.keep == Keep::MemFine) {
    // MACT: the fewest chunks that fit (the most where none does).
    for (int64_t c : s.bins) {
      chunks_used = double(c), e.chunks = c;
      if (peak_of(chunks_used, hottest) <= usable) break;
    }
  }
  const double peak = peak_of(chunks_used, hottest);
  const Stage& hot = stages[hottest];
  const double static_bytes = static_of(hot.params, hot.expert_params);
  if (s.keep == Keep::Offload) {
    e.host_gb = offloaded(hot) / 1e9;
    why.push_back("offload: core_attn and expert_fc1 of every layer but the one running and the one prefetched");
  }
  e.hottest_stage = stages.size() == 1 ? "only" : hottest == 0 ? "first" : "last";
  e.static_gb = static_bytes / 1e9, e.peak_gb = peak / 1e9, e.activation_gb = (peak - static_bytes) / 1e9;
  e.fits = peak <= usable;
  if (!e.fits) {
    std::ostringstream o;
    o.precision(3);
    o << "out of memory: needs " << e.peak_gb << " GB (static " << e.static_gb << ") of " << usable / 1e9
      << " usable on the " << e.hottest_stage << " stage";
    e.why = o.str();
  }
  // The first stage's parameters, for the data-parallel communication below.
  const double stage_params = stages[0].params, expert_params = stages[0].expert_params;

  // ---- Time of one micro-batch on one stage (the model's work spread over the stages).
  const TokenFlops tf = token_flops(m);
  const double pp = double(l.pp);
  const double dense_flops = 3 * (tf.attention_proj + tf.dense_ffn + tf.shared + tf.lm_head) * tokens / tp / pp;
  const double core_flops = 3 * tf.attention_core * tokens / tp / pp;
  const double moe_layers = double(m.moe_layers() + mtp) / pp;
  const double expert_flops = 3 * moe_layers * expert_forward_flops(received, h, g);
  const double rows_per_expert = received / local_experts;
  const double dense_t = dense_flops / (hw.gemm_tflops * 1e12) + tf.router * 3 * tokens / pp / (hw.gemm_tflops * 1e12);
  const double core_t = core_flops / (hw.attention_tflops * 1e12);
  const double chunks = s.keep == Keep::MemFine ? double(std::max<int64_t>(e.chunks, 1)) : 1;
  const double expert_t = expert_flops / grouped_rate(hw, rows_per_expert / chunks);
  // What MemFine's chunks cost: the same expert GEMMs at fewer rows per expert (the rate's curve).
  const double chunk_t = expert_t - expert_flops / grouped_rate(hw, rows_per_expert);
  // Memory-bound kernels at the HBM rate: what the layers on this stage move per token, the routed
  // rows on the hottest rank, and the loss (work.h), forward and the backward's twice that.
  const LayerBytes mbytes = memory_bound_bytes(m, set.element_bytes);
  const double token_bytes = double(m.layers) * mbytes.attention + double(m.dense_layers) * mbytes.dense_ffn +
                             double(m.moe_layers()) * mbytes.moe_token + mbytes.head;
  const double memory_t =
      hw.hbm_gb_s > 0
          ? 3 * (token_bytes * tokens / tp / pp + moe_layers * mbytes.routed_row * received) / (hw.hbm_gb_s * 1e9)
          : 0;
  const double compute = dense_t + core_t + expert_t + memory_t;
  double recompute = 0;
  // Recomputing a layer runs its forward again, the dispatch and combine all-to-alls with it (below).
  if (s.keep == Keep::Full || s.keep == Keep::MemFine) recompute = compute / 3;
  // moe_act recomputes SwiGLU's product of the routed rows: memory-bound work, at the HBM rate.
  if (s.keep == Keep::MoeAct && hw.hbm_gb_s > 0)
    recompute = moe_layers * received * kBytes * 3 * g / (hw.hbm_gb_s * 1e9);
  why.push_back("compute: dense GEMMs at " + num(hw.gemm_tflops) + " TFLOP/s, attention at " +
                num(hw.attention_tflops) + ", grouped expert GEMMs " + num(hw.grouped_gemm_small_tflops) + "-" +
                num(hw.grouped_gemm_tflops) + " by rows per expert (knee " + num(hw.grouped_gemm_knee_rows) +
                "); MemFine's chunks run at their rows per chunk; memory-bound kernels (norms, residuals, "
                "rotary, permutes, SwiGLU's product, the loss) at " +
                num(hw.hbm_gb_s) +
                " GB/s; recomputation adds a forward with its dispatch and combine; MTP layers count as MoE layers");
  // Communication of one micro-batch on one stage, exposed.
  const bool ep_in_node = l.ep * l.tp <= hw.gpus_per_node;
  Link ep_link = ep_in_node ? nvlink(hw) : network(hw);
  if (const double r = ep_in_node ? hw.all_to_all_nvlink_gb_s : hw.all_to_all_network_gb_s; r > 0)
    ep_link.beta = r * 1e9;
  const double a2a_bytes = std::max(received, tokens_gpu * double(m.topk)) * h * kBytes;  // the hottest rank's rows
  double a2a_one = all_to_all_time(ep_link, l.ep, a2a_bytes);
  if (!ep_in_node) {
    // Across nodes the network carries the rows bound for other nodes; a node-aware dispatcher
    // (DeepEP) sends a token once per node it needs and forwards it over NVLink there: of a
    // token's topk experts spread evenly over n nodes, it reaches n (1 - (1 - 1/n)^topk) nodes.
    const double n = std::ceil(double(l.ep * l.tp) / double(hw.gpus_per_node)), k = double(m.topk);
    const double per_node = set.node_dedup ? n * (1 - std::pow(1 - 1 / n, k)) / k : 1;
    a2a_one = (n - 1) * ep_link.alpha + a2a_bytes * (n - 1) / n * per_node / ep_link.beta;
  }
  const double a2a = 4 * moe_layers * a2a_one;
  const double tp_comm =
      l.tp > 1 ? 4 * double(m.layers) / pp * reduce_scatter_time(nvlink(hw), l.tp, tokens * h * kBytes) : 0;
  const Link pp_link = l.gpus() > hw.gpus_per_node ? network(hw) : nvlink(hw);
  const double pp_comm = l.pp > 1 ? 2 * send_time(pp_link, tokens_gpu * h * kBytes) : 0;
  const double comm = a2a + tp_comm + pp_comm;
  if (s.keep == Keep::Full || s.keep == Keep::MemFine) recompute += a2a / 2;
  why.push_back("communication: the all-to-all (4 per MoE layer, " +
                std::string(ep_in_node       ? "NVLink"
                            : set.node_dedup ? "network, once per node (DeepEP)"
                                             : "network") +
                ") and TP's sequence-parallel collectives exposed; pipeline sends exposed; CP's ring and DP's "
                "gradient reduce-scatter and weight all-gather hidden behind compute but for the last micro-batch");
  // Offloading's copies against the layer's own compute (the next layer's forward, the previous one's backward).
  double wait = 0;
  if (s.keep == Keep::Offload) {
    const double off_layer = e.host_gb * 1e9 / std::max(1.0, hot.inflight * (hot.dense + hot.moe));
    const double layer_fwd = compute / 3 / std::max(1.0, double(m.layers) / pp);
    wait = double(m.layers) / pp *
           std::max({0.0, off_layer / (hw.device_to_host_gb_s * 1e9) - layer_fwd,
                     off_layer / (hw.host_to_device_gb_s * 1e9) - 2 * layer_fwd});
  }
  // FSDP gathers every layer's weights for the forward and again for the backward, behind the
  // micro-batch's compute where it can.
  double fsdp_exposed = 0;
  if (set.fsdp) {
    const Link dp_link = network(hw);
    const double gather = 2 * (all_gather_time(dp_link, l.dp * l.cp, stage_params * 2) +
                               (expert_dp > 1 ? all_gather_time(dp_link, int64_t(expert_dp), expert_params * 2) : 0));
    fsdp_exposed = std::max(0.0, gather - compute - recompute);
  }
  const double per_micro = compute + recompute + comm + fsdp_exposed + wait;
  // DP: gradients reduce-scattered and weights all-gathered once a step, behind all but the last
  // micro-batch's backward.
  const Link dp_link = network(hw);
  const double grads = stage_params * 4, expert_grads = expert_params * 4;
  const double dp_t = reduce_scatter_time(dp_link, l.dp * l.cp, grads) +
                      all_gather_time(dp_link, l.dp * l.cp, grads / 2) +
                      (expert_dp > 1 ? reduce_scatter_time(dp_link, int64_t(expert_dp), expert_grads) : 0);
  const double dp_exposed = std::max(0.0, dp_t - per_micro * 2 / 3);
  e.compute = double(micro) * (compute - chunk_t), e.chunk_overhead = double(micro) * chunk_t;
  e.recompute = double(micro) * recompute, e.offload_wait = double(micro) * wait;
  e.comm = double(micro) * (comm + fsdp_exposed) + dp_exposed;
  e.all_to_all = double(micro) * a2a;
  e.bubble =
      double(l.grad_accumulation) * pipeline_bubble_time(l.pp, l.vpp, per_micro);  // a fill and drain per schedule
  e.step = e.compute + e.chunk_overhead + e.recompute + e.comm + e.offload_wait + e.bubble;
  const double gpus = double(l.gpus());
  e.tokens_per_s_gpu = double(l.global_batch) * seq / e.step / gpus;
  e.model_tflops_gpu = e.tokens_per_s_gpu * tf.training() / 1e12;
  // Goodput: the step's speed less what failures and checkpoints take.
  const double nodes = std::max(1.0, gpus / double(hw.gpus_per_node));
  // A checkpoint: bf16 weights, fp32 master weights and Adam's moments of every parameter, once
  // (each data-parallel shard writes its part), every node writing at the same time.
  const double state = total_parameters(m) * (2 + 12) / 1e9;  // GB
  const double write_h = state / (set.checkpoint_gb_s_per_node * nodes) / 3600;
  e.goodput = goodput(int64_t(nodes), set.reliability.node_failure_rate, set.restart_h, write_h, e.tokens_per_s_gpu);
  why.push_back(
      "goodput: " + (set.reliability.name.empty() ? std::string("a written rate of ") : set.reliability.name + "'s ") +
      num(set.reliability.node_failure_rate * 24000) + " failures per 1000 node-days, restart " +
      num(set.restart_h * 60) + " min, a checkpoint of " + num(state) + " GB (14 bytes a parameter) written at " +
      num(set.checkpoint_gb_s_per_node) +
      " GB/s per node, at Kokolis et al.'s optimal "
      "interval");
  return e;
}

}  // namespace memfine
