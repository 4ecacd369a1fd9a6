// The resolved config as JSON, keyed as the YAML is: what every record carries.
#include <cstdlib>
#include <string>

#include "core/config/config.h"

namespace memfine {

using json = nlohmann::json;

json yaml_to_json(const YAML::Node& n) {
  if (n.IsSequence()) {
    json a = json::array();
    for (const auto& v : n) a.push_back(yaml_to_json(v));
    return a;
  }
  if (n.IsMap()) {
    json o = json::object();
    for (const auto& kv : n) o[kv.first.as<std::string>()] = yaml_to_json(kv.second);
    return o;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string t = n.Scalar();
  if (n.Tag() == "!") return t;  // quoted in the YAML: a string
  char* end = nullptr;
  const long long i = std::strtoll(t.c_str(), &end, 10);
  if (!t.empty() && *end == '\0') return int64_t(i);
  const double d = std::strtod(t.c_str(), &end);
  if (!t.empty() && *end == '\0') return d;
  if (t == "true" || t == "false") return t == "true";
  return t;
}

json config_to_json(const ExperimentConfig& c) {
  const ModelConfig& m = c.model;
  const WorkloadConfig& w = c.workload;
  json strategies = json::array();
  for (const auto& s : c.strategies) {
    // As resolved, the parameters the label names: loading it back gives the same strategy.
    json j = {{"name", s.name}};
    if (s.resolved) j.update(s.shown);
    else
      for (const auto& [k, v] : s.written) j[k] = yaml_to_json(v);
    strategies.push_back(j);
  }
  json out = {{"name", c.name}, {"seed", c.seed}, {"device", c.device}, {"dtype", c.dtype}, {"kernels", c.kernels},
              {"threads", c.threads}, {"warmup", c.warmup}, {"repeats", c.repeats}, {"verify", c.verify},
              {"model", {{"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                         {"head_dim", m.head_dim}, {"ffn_hidden", m.ffn_hidden}, {"experts", m.experts},
                         {"topk", m.topk}, {"seq", m.seq}, {"micro_batch", m.micro_batch},
                         {"shared_experts", m.shared_experts}, {"attention", m.attention}, {"vocab", m.vocab}}},
              {"parallel", {{"ep", c.ep}, {"rank", c.rank < 0 ? json("hottest") : json(c.rank)}}},
              {"workload", {{"kind", w.kind}, {"alpha", w.alpha}, {"sigma", w.sigma}, {"hot_fraction", w.hot_fraction},
                            {"hot_experts", w.hot_experts}, {"trace", w.trace}, {"schedule", w.schedule},
                            {"peak_step", w.peak_step}, {"width", w.width}}},
              {"memory", {{"budget", c.budget < 0 ? json(nullptr) : json(c.budget)}}},
              {"cost_model", c.cost_model.empty() ? json(nullptr) : json(c.cost_model)},
              {"strategies", strategies}};
  if (c.paper.enabled) {
    const PaperScaleConfig& p = c.paper;
    out["paper"] = {{"device_memory", p.device_memory}, {"alpha", p.alpha}, {"pipeline", p.pipeline},
                    {"layers_per_stage", p.layers_per_stage}, {"dense_layers", p.dense_layers},
                    {"dense_ffn", p.dense_ffn}, {"vocab", p.vocab}, {"q_lora_rank", p.q_lora_rank},
                    {"kv_lora_rank", p.kv_lora_rank}, {"qk_nope_dim", p.qk_nope_dim}, {"qk_rope_dim", p.qk_rope_dim},
                    {"v_head_dim", p.v_head_dim}, {"bytes_param", p.bytes_param}, {"bytes_grad", p.bytes_grad},
                    {"bytes_optimizer", p.bytes_optimizer}, {"received", p.received}, {"figure2", p.figure2},
                    {"m_g", p.m_g}};
  }
  if (c.train.enabled) {
    const TrainConfig& t = c.train;
    out["train"] = {{"steps", t.steps}, {"lr", t.lr}, {"warmup", t.warmup}, {"min_lr", t.min_lr},
                    {"eval_every", t.eval_every}, {"eval_batches", t.eval_batches},
                    {"checkpoint_every", t.checkpoint_every}, {"aux_loss", t.aux_loss}, {"bias_update", t.bias_update}, {"data_seed", t.data_seed},
                    {"corpus", t.corpus}, {"stats_ep", t.stats_ep}};
  }
  return out;
}

}  // namespace memfine
