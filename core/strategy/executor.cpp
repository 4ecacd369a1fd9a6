#include "core/strategy/executor.h"

#include <optional>

#include "core/moe/dispatcher.h"
#include "core/moe/expert_storage.h"
#include "core/moe/ranged.h"
#include "core/strategy/memfine/chunked_moe.h"
#include "core/strategy/recompute.h"
#include "core/util/modules.h"

namespace memfine {

LayerOutput layer_forward(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe) {
  const ModelConfig& m = in.model->cfg;
  const LayerWeights& w = *in.weights;
  const RankRouting& rr = in.rank->layers[size_t(in.layer)];
  at::Tensor h = x;
  if (m.attention == "gqa") {
    at::Tensor xn1;
    {
      ModuleScope norm(Module::AttnNorm);
      xn1 = rms_norm(x, w.norm1);
    }
    h = x + attention(xn1, w, m, in.config->attention_kernel == "sdpa");
  }
  at::Tensor xn;
  {
    ModuleScope norm(Module::MlpNorm);
    xn = rms_norm(h, w.norm2);
  }
  const TrainConfig& t = in.config->train;
  Routed r = route(xn, w, rr.own_experts, m.topk, t.enabled ? t.aux_loss : 0);
  if (in.expert_counts && !recomputing_for_backward())
    in.expert_counts->at(size_t(in.layer)) = at::bincount(r.expert_ids.reshape(-1), {}, m.experts);
  MoeRouting routing;
  routing.dist = in.dist;
  routing.dispatcher = &token_dispatcher(in.dist);
  routing.rank = &rr;
  routing.tables = in.rank;
  routing.expert_ids = r.expert_ids;
  routing.loss_norm = double(x.numel());
  routing.fused = in.config->kernels == "fused";
  routing.grouped = in.config->expert_gemm == "grouped";
  routing.wgrad_per_expert = in.config->expert_wgrad == "per_expert";
  routing.expert = s.expert();
  // Offloading (or encoding) the experts' modules reads what autograd saves inside them, module by
  // module: those keep the stages' own graph.
  const OffloadSpec& off = s.shape().offload;
  routing.ranged = !off.has(Module::ExpertFc1) && !off.has(Module::MoeAct) && !off.has(Module::ExpertFc2);
  routing.weighted_act = s.shape().skip_dead;
  routing.outputs_dead = routing.weighted_act && recomputing_for_backward();
  s.cap_routing(routing, r.probs.detach());
  Combined c = moe(xn, r.probs, routing, w);
  at::Tensor y = c.y;
  if (w.shared_in.defined()) {
    ModuleScope shared(Module::SharedExpert);
    y = y + swiglu(xn, w.shared_in, w.shared_out);
  }
  return {h + y, c.peer_loss + r.aux_loss};
}

namespace {
RangeKeep stored_keep(const MoeRouting& r) {
  return r.expert.act_recomputed ? RangeKeep::ActRecomputed : RangeKeep::Stored;
}
}  // namespace

Combined moe_stored(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                    const LayerWeights& w) {
  if (ranged_moe(routing)) return ranged_moe_layer(x_norm, probs, routing, w, 1, stored_keep(routing));
  return routing.dispatcher->moe_range(x_norm, probs, w, routing, 0, x_norm.size(0), nullptr);
}

Combined moe_stored_in_chunks(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                              const LayerWeights& w, int64_t chunks) {
  if (ranged_moe(routing)) return ranged_moe_layer(x_norm, probs, routing, w, chunks, stored_keep(routing));
  const int64_t n = x_norm.size(0);
  std::vector<at::Tensor> ys;
  at::Tensor peer_loss;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t a = c * n / chunks, b = (c + 1) * n / chunks;
    if (a == b) continue;  // every rank's chunks are the same ranges: all skip it
    Combined part =
        routing.dispatcher->moe_range(x_norm.narrow(0, a, b - a), probs.narrow(0, a, b - a), w, routing, a, b, nullptr);
    ys.push_back(part.y);
    peer_loss = peer_loss.defined() ? peer_loss + part.peer_loss : part.peer_loss;
  }
  return {at::cat(ys), peer_loss};
}

Combined moe_as_one_block(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                          const LayerWeights& w) {
  if (ranged_moe(routing))  // kept: its inputs; run again in its backward
    return ranged_moe_layer(x_norm, probs, routing, w, 1, RangeKeep::Recomputed, recomputing_for_backward());
  const LayerWeights* wp = &w;
  RecomputeFn fn = [routing, wp](const TensorList& a) {
    MoeRouting r = routing;
    r.outputs_dead = r.weighted_act && recomputing_for_backward();  // the replay for backward
    Combined c = moe_stored(a[0], a[1], r, *wp);
    return TensorList{c.y, c.peer_loss};
  };
  TensorList params = w.w_in;
  params.insert(params.end(), w.w_out.begin(), w.w_out.end());
  TensorList out = recompute(fn, {x_norm, probs}, params);
  return {out[0], out[1]};
}

LayerOutput layer_recomputed(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe) {
  Strategy* sp = &s;
  RecomputeFn fn = [in, sp, moe](const TensorList& a) {
    LayerOutput o = layer_forward(a[0], in, *sp, moe);
    return TensorList{o.hidden, o.aux_loss};
  };
  TensorList out = recompute(fn, {x}, in.weights->parameters());
  return {out[0], out[1]};
}

LayerOutput run_shape(const at::Tensor& x, const LayerInput& in, Strategy& s, const StrategyShape& shape) {
  MoeFn moe = moe_stored;
  if (shape.moe == MoeMode::RecomputedBlock) moe = moe_as_one_block;
  const int64_t chunks = shape.chunks;
  if (shape.moe == MoeMode::Chunked) {
    const ChunkReplay replay = shape.replay;
    moe = [chunks, replay](const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& r, const LayerWeights& w) {
      return chunked_moe(xn, probs, r, w, chunks, replay);
    };
  } else if (shape.moe == MoeMode::Stored && chunks > 1) {
    moe = [chunks](const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& r, const LayerWeights& w) {
      return moe_stored_in_chunks(xn, probs, r, w, chunks);
    };
  }
  Offloader* off = s.offloader();
  if (!off) return shape.recompute_layer ? layer_recomputed(x, in, s, moe) : layer_forward(x, in, s, moe);
  // Every layer's backward is marked: where the groups below come back, offloaded or not.
  LayerOutput out;
  {
    std::optional<Offloader::LayerScope> scope;
    if (shape.offload.offloads(in.layer, in.model->cfg.layers)) scope.emplace(*off, in.layer);
    out = shape.recompute_layer ? layer_recomputed(x, in, s, moe) : layer_forward(x, in, s, moe);
  }
  out.hidden = off->mark_backward(out.hidden, in.layer);
  return out;
}

LayerOutput Strategy::run_layer(const at::Tensor& x, const LayerInput& in) { return run_shape(x, in, *this, shape_); }

ExpertPath Strategy::expert() const { return expert_path(shape_.experts, shape_.keep_act, shape_.block_rows); }

json Strategy::merge_rank_counters(const std::vector<json>& ranks) const {
  if (ranks.empty()) return json::object();
  for (const auto& r : ranks)
    if (r != ranks.front()) return {{"per_rank", ranks}};
  return ranks.front();
}

Prediction Strategy::predict(const ExperimentConfig& c, const EmulatedRank& rank) const {
  if (!why_.empty()) throw NotModelled(why_);
  StrategyShape s = shape_;
  const ExpertPath path = expert();
  s.own_expert = path.fn && !path.act_recomputed;
  return predict_step(c, rank, s);
}

}  // namespace memfine
