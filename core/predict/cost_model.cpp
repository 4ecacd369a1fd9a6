#include "core/predict/cost_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "core/model/flops.h"

namespace memfine {

CostModel CostModel::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read cost model '" + path + "' (fit it with scripts/fit-cost-model)");
  CostModel cm;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    cm.s0_ = j.at("layer_ms").at("stored").get<double>();
    cm.m1_ = j.at("layer_ms").at("chunked_1").get<double>();
    cm.per_chunk_ = j.at("per_chunk_ms").get<double>();
    for (const auto& p : j.at("expert_fwd_bwd_ms")) cm.fwd_bwd_.emplace_back(p[0].get<double>(), p[1].get<double>());
    std::sort(cm.fwd_bwd_.begin(), cm.fwd_bwd_.end());
    const auto& ctx = j.at("context");
    auto num = [&](const char* k) { return std::stoll(ctx.at(std::string("model_") + k).get<std::string>()); };
    ModelConfig ref;
    ref.layers = 1, ref.hidden = num("hidden"), ref.heads = num("heads"), ref.kv_heads = num("kv_heads");
    ref.head_dim = num("head_dim"), ref.ffn_hidden = num("ffn_hidden"), ref.experts = num("experts");
    ref.topk = num("topk"), ref.seq = num("seq"), ref.micro_batch = num("micro_batch");
    cm.ref_flops_ = step_flops(ref, int64_t(j.at("rows").get<double>())).total();
    cm.machine_ = ctx.value("cpu_model", std::string("a machine")) + ", " + ctx.value("libtorch_threads", std::string("?")) +
                  " threads";
  } catch (const std::exception& e) {
    throw std::runtime_error("cost model '" + path + "' is malformed: " + e.what());
  }
  if (!(cm.s0_ > 0)) throw std::runtime_error("cost model '" + path + "' has no stored layer time");
  if (cm.fwd_bwd_.size() < 2) throw std::runtime_error("cost model '" + path + "' has too few expert timings");
  return cm;
}

double CostModel::expert_ms(double rows) const {
  if (rows <= 0) return 0;
  const auto& p = fwd_bwd_;
  if (rows <= p.front().first) return p.front().second * rows / p.front().first;
  if (rows >= p.back().first) return p.back().second * rows / p.back().first;
  auto hi = std::upper_bound(p.begin(), p.end(), std::make_pair(rows, 0.0));
  auto lo = hi - 1;
  const double t = (std::log(rows) - std::log(lo->first)) / (std::log(hi->first) - std::log(lo->first));
  return std::exp(std::log(lo->second) + t * (std::log(hi->second) - std::log(lo->second)));
}

double CostModel::layer_ms(const ModelConfig& m, const std::vector<int64_t>& expert_rows, int64_t chunks) const {
  // The measured layer steps, scaled by this layer's model FLOPs against the benchmarked one.
  ModelConfig one = m;
  one.layers = 1;
  int64_t rows = 0;
  for (int64_t r : expert_rows) rows += r;
  const double scale = step_flops(one, rows).total() / ref_flops_;
  if (chunks == 0) return s0_ * scale;
  // Each expert runs once per chunk on its share of its rows: a small share runs its matrix
  // products far below their rate, which is most of what a chunk costs on a CPU.
  double split = 0;
  for (int64_t r : expert_rows) split += double(chunks) * expert_ms(double(r) / double(chunks)) - expert_ms(double(r));
  return m1_ * scale + double(chunks - 1) * per_chunk_ + split;
}

}  // namespace memfine
