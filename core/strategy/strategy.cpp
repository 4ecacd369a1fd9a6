#include "core/config/reader.h"
#include "core/strategy/strategy.h"

#include "core/strategy/recompute.h"

namespace memfine {

LayerOutput layer_forward(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe) {
  const ModelConfig& m = in.model->cfg;
  const LayerWeights& w = *in.weights;
  const RankRouting& rr = in.rank->layers[size_t(in.layer)];
  at::Tensor h = m.attention == "gqa" ? x + attention(rms_norm(x, w.norm1), w, m) : x;
  at::Tensor xn = rms_norm(h, w.norm2);
  const TrainConfig& t = in.config->train;
  Routed r = route(xn, w, rr.own_experts, m.topk, t.enabled ? t.aux_loss : 0);
  if (in.expert_counts && !recomputing_for_backward())
    in.expert_counts->at(size_t(in.layer)) = at::bincount(r.expert_ids.reshape(-1), {}, m.experts);
  MoeRouting routing;
  routing.dist = in.dist;
  routing.rank = &rr;
  routing.tables = in.rank;
  routing.expert_ids = r.expert_ids;
  routing.loss_norm = double(x.numel());
  routing.fused = in.config->kernels == "fused";
  routing.expert = s.expert();
  s.cap_routing(routing, r.probs.detach());
  Combined c = moe(xn, r.probs, routing, w);
  at::Tensor y = c.y;
  if (w.shared_in.defined()) y = y + swiglu(xn, w.shared_in, w.shared_out);
  return {h + y, c.peer_loss + r.aux_loss};
}

Combined moe_stored(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                    const LayerWeights& w) {
  return moe_range(x_norm, probs, w, routing, 0, x_norm.size(0));
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

json Strategy::merge_rank_counters(const std::vector<json>& ranks) const {
  if (ranks.empty()) return json::object();
  for (const auto& r : ranks)
    if (r != ranks.front()) return {{"per_rank", ranks}};
  return ranks.front();
}

Prediction Strategy::predict(const ExperimentConfig& c, const EmulatedRank& rank) const {
  const std::optional<StrategyShape> shape = memory_shape();
  if (!shape) throw NotModelled(unmodelled_why());
  return predict_step(c, rank, *shape);
}

namespace {
std::map<std::string, StrategyInfo>& registry() {
  static std::map<std::string, StrategyInfo> r;
  return r;
}
}  // namespace

const std::map<std::string, StrategyInfo>& strategy_registry() { return registry(); }

bool register_strategy(StrategyInfo info) {
  const std::string name = info.name;
  registry()[name] = std::move(info);
  return true;
}

std::string strategy_of_role(Role role) {
  for (const auto& [name, info] : registry())
    if (info.role == role) return name;
  return "";
}

StrategySpec resolve_strategy(const StrategySpec& spec, std::vector<ParamProblem>& problems) {
  auto it = registry().find(spec.name);
  if (it == registry().end()) {
    std::vector<std::string> names;
    for (const auto& [n, info] : registry()) names.push_back(n);
    problems.push_back({"", "unknown strategy '" + spec.name + "'" + did_you_mean(spec.name, names)});
    return spec;
  }
  return resolve_params(spec, it->second.params, problems);
}

std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec) {
  if (!spec.resolved) {
    std::vector<ParamProblem> problems;
    const StrategySpec r = resolve_strategy(spec, problems);
    if (!problems.empty())
      throw std::invalid_argument(spec.label() + ": " + (problems[0].key.empty() ? "" : problems[0].key + ": ") +
                                  problems[0].message);
    return make_strategy(r);
  }
  return registry().at(spec.name).make(spec);
}

}  // namespace memfine
