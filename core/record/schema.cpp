#include "core/record/schema.h"

#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

namespace memfine {

namespace {

const char* kAll = "measured train predicted";

}  // namespace

const std::vector<FieldSpec>& record_schema() {
  static const std::vector<FieldSpec> fields = {
      // The head every record has.
      {"experiment", "string", "", "the experiment's name (its results folder)", kAll},
      {"point", "string", "", "the sweep assignment (`model.seq=512`), or `base` without a sweep", kAll},
      {"strategy", "string", "",
       "the strategy's label with the parameters it shows (`memfine(chunks=4)`): the results' key", kAll},
      {"name", "string", "", "the registered strategy (train: the first step's record)", kAll},
      {"params", "object", "", "every parameter the strategy declares, resolved (train: the first step's)", kAll},
      {"role", "string|null", "",
       "`reference` (what verify compares with), `baseline` (what tables divide by), or null", kAll},
      {"status", "string", "",
       "`ok`, `oom` (the budget was exceeded: a result), `error`; predict's `predicted` or `unpredicted`", kAll},
      {"error", "string|null", "", "what went wrong, in the strategy's or the budget's terms", kAll},
      {"seed", "integer", "", "the experiment's seed", kAll},
      {"ep", "integer", "", "expert-parallel ranks, emulated or real (train: the first step's)", kAll},
      {"config", "object", "", "the whole resolved configuration, keyed as the YAML (loads back to it)", kAll},
      {"env", "object", "", "git commit, LibTorch version, device name, threads, BLAS, date (and the matmul ceiling)",
       kAll},
      // Where it ran and what it received.
      {"rank", "integer", "", "the rank the record is of: emulated (one process) or real", "measured predicted"},
      {"world_size", "integer", "", "processes of a real-rank job; 1 one process", "measured"},
      {"backend", "string", "", "real ranks' process group (gloo, nccl)", "measured"},
      {"tokens_received", "integer|number", "rows",
       "s': the rows this rank's experts receive in the most loaded layer (under a schedule: at the hottest "
       "timed step; paper scale: the paper's s')",
       "measured predicted"},
      {"tokens_received_per_layer", "list", "rows",
       "s' per layer (under a schedule: its most over the timed steps; train: of the hottest of stats_ep ranks)",
       "measured train"},
      {"tokens_received_per_step", "list", "rows", "under a schedule: s' per timed step and layer", "measured"},
      {"expert_tokens", "list", "rows", "the assignments each expert receives, per layer (all ranks)",
       "measured train"},
      {"expert_tokens_step", "integer", "", "the step whose routing expert_tokens is", "measured"},
      {"overload_factor", "number", "", "s' over the balanced share (tokens x topk); under a schedule the most of any "
       "timed step and layer", "measured"},
      // Memory.
      {"static_bytes", "integer", "bytes", "parameters + gradients + Adam state + inputs of this rank",
       "measured train"},
      {"peak_activation_bytes", "integer|null", "bytes",
       "the step's peak less the bytes in use when it began (the largest over timed steps)", "measured train"},
      {"predicted_activation_bytes", "integer|null", "bytes",
       "the implementation memory model's prediction for the step of that peak", "measured predicted"},
      {"predicted_offload_host_peak_bytes", "integer", "bytes", "the model's host peak where the strategy offloads",
       "measured"},
      {"unpredicted_why", "string", "", "why the memory model does not cover the strategy", "measured predicted"},
      {"budget_bytes", "integer|null", "bytes", "memory.budget, null without one", "measured"},
      // Time and work.
      {"step_ms", "spread|number|null", "ms",
       "measured: {median, min, max} over the timed steps; train: the step's (the slowest rank's)", "measured train"},
      {"step_ms_all", "list", "ms", "every timed step, in order", "measured"},
      {"tokens_per_s", "number|null", "tokens/s", "the rank's tokens over the median step", "measured"},
      {"tflops", "number|null", "TFLOP/s", "model FLOPs (recomputation not counted) over the median step", "measured"},
      {"ceiling_fraction", "number", "", "tflops over the machine's measured matmul ceiling", "measured"},
      {"loss", "number|null", "", "the step's loss (measured: the last timed step's)", "measured train"},
      {"ops_per_step", "integer", "operators",
       "operators the host dispatched in a step (forward, recomputation, backward and optimizer) at the top level, "
       "autograd's derivatives included, the operators they call inside not; counted on the dispatcher, median over "
       "the timed steps (train: the step's, this rank's)",
       "measured train"},
      {"graphs", "string", "",
       "with `graphs` asked for: what the timed steps ran, `step` (a CUDA graph of forward and backward replayed, "
       "the optimizer eager) or `none`",
       "measured"},
      {"graph_err", "number", "",
       "the replayed graph's largest relative error of loss and gradients against the same step run eagerly "
       "(max |a - b| / max |b| per tensor); above the dtype's verify tolerance the strategy is an error",
       "measured"},
      {"graphs_why", "string", "", "graphs were asked for and the strategy ran eagerly: why", "measured"},
      {"graph_pool_bytes", "integer", "bytes",
       "the captured graph's private memory pool, held between replays (the step's activations live in it)",
       "measured"},
      {"host_syncs_per_step", "integer", "reads",
       "reads of device values the host waited for in a step: `item` and the copies to the host the code asks for "
       "(on the CPU the same calls, counted alike); median over the timed steps (train: the step's, this rank's)",
       "measured train"},
      // Correctness.
      {"grad_max_rel_err", "number|null", "",
       "verify: the largest relative difference of loss and gradients against the reference (a lossy strategy's: "
       "measured in every run, its result)",
       "measured train"},
      {"verify_tolerance", "number|null", "", "what verify accepts for the dtype", "measured train"},
      {"verified", "boolean|null", "", "grad_max_rel_err within verify_tolerance; null: not checked, or lossy (held to none)", "measured train"},
      // Training.
      {"step", "integer", "", "the training step", "train"},
      {"lr", "number", "", "the step's learning rate", "train"},
      {"eval_loss", "number", "", "the held-out loss, on evaluated steps", "train"},
      {"stats_ep", "integer", "", "the ranks s' and the overload are computed over", "train"},
      {"ranks", "integer", "", "real ranks' world size (the first step's record)", "train"},
      // Predictions.
      {"model", "string", "", "`implementation` (this code's) or `paper` (the paper's equations)", "predicted"},
      {"predicted_static_bytes", "integer|null", "bytes", "the model's static bytes", "predicted"},
      {"peak_phase", "string", "", "where in the step the predicted peak happens", "predicted"},
      {"fits", "boolean|null", "", "static + activation within the budget (the device at paper scale)", "predicted"},
      {"fits_why", "string", "", "a strategy that plans found no plan that fits the budget", "predicted"},
      {"chunks", "integer|list|null", "",
       "the MoE's chunk count: a fixed count, or per layer (per step and layer where a plan or a schedule "
       "chooses it per step), 0 a layer stored whole",
       "measured train predicted"},
      {"chunk_steps", "list", "", "the steps whose chunks those are", "measured predicted"},
      {"step_tflop", "number", "TFLOP", "model FLOPs of one training step", "predicted"},
      {"routing", "string", "", "`tokens` (as run routes) or `counts` (the workload's counts)", "predicted"},
      {"parameters", "number", "", "paper scale: the most loaded stage's parameters", "predicted"},
      {"static_gb", "number", "GB", "paper scale: Eq. 1", "predicted"},
      {"activation_gb", "number", "GB", "paper scale: Eq. 2", "predicted"},
      {"total_gb", "number", "GB", "paper scale: static + activation", "predicted"},
      {"s_recv_max", "number", "rows", "paper scale: Eq. 8", "predicted"},
      {"device_gb", "number", "GB", "paper scale: the device's memory", "predicted"},
      {"assumptions", "string", "", "paper scale: every assumption of the projection", "predicted"},
      // Real ranks whose counters differ: each rank's (Strategy::merge_rank_counters).
      {"per_rank", "list", "", "real ranks whose strategy counters differ: each rank's", "measured"},
      // Older records.
      {"host_bandwidth_gbps", "object", "GB/s", "offloading's host bandwidths (now its parameters)", "measured", true},
  };
  return fields;
}

const FieldSpec* record_field(const std::string& key) {
  static const std::map<std::string, const FieldSpec*> by_key = [] {
    std::map<std::string, const FieldSpec*> m;
    for (const auto& f : record_schema()) m[f.key] = &f;
    return m;
  }();
  auto it = by_key.find(key);
  return it == by_key.end() ? nullptr : it->second;
}

void put(json& record, const std::string& key, json value) {
  if (!record_field(key))
    throw std::logic_error("record field '" + key + "' is not declared in core/record/schema.cpp");
  record[key] = std::move(value);
}

bool of_type(const json& v, const FieldSpec& spec) {
  std::stringstream types(spec.type);
  for (std::string t; std::getline(types, t, '|');) {
    // JSON has one kind of number: a whole one written 100.0 is an integer too.
    const bool whole = v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
    if ((t == "string" && v.is_string()) || (t == "integer" && whole) || (t == "number" && v.is_number()) ||
        (t == "boolean" && v.is_boolean()) || (t == "object" && v.is_object()) || (t == "list" && v.is_array()) ||
        (t == "null" && v.is_null()))
      return true;
    if (t == "spread" && v.is_object() && v.contains("median") && v["median"].is_number()) return true;
  }
  return false;
}

namespace {
// A number that is a result: finite, and not negative where it has a unit (a time, a size, a
// count); within objects and lists alike (a spread, a per-layer list).
bool a_result(const json& v, bool measured) {
  if (v.is_number()) {
    const double x = v.get<double>();
    return std::isfinite(x) && (!measured || x >= 0);
  }
  if (v.is_object() || v.is_array()) {
    for (const auto& e : v)
      if (!a_result(e, measured)) return false;
  }
  return true;
}
}  // namespace

json RecordView::get(const std::string& key) const { return raw && raw->contains(key) ? (*raw)[key] : json(); }

RecordView view_of(const json& r, const std::string& where) {
  if (!r.is_object()) throw std::runtime_error(where + (where.empty() ? "" : ": ") + "a record is a JSON object");
  for (const auto& [k, v] : r.items()) {
    const FieldSpec* f = record_field(k);
    if (f && !of_type(v, *f))
      throw std::runtime_error(where + (where.empty() ? "" : ": ") + k + ": expected " + f->type + ", got " +
                               v.dump().substr(0, 60));
    if (f && k != "config" && k != "env" && !a_result(v, !f->unit.empty()))
      throw std::runtime_error(where + (where.empty() ? "" : ": ") + k + ": not a result (" +
                               (f->unit.empty() ? "not finite" : "negative or not finite") + "): " +
                               v.dump().substr(0, 60));
  }
  RecordView o;
  o.raw = &r;
  auto text = [&](const char* k) { return r.contains(k) && r[k].is_string() ? r[k].get<std::string>() : ""; };
  auto num = [&](const char* k) -> std::optional<double> {
    if (r.contains(k) && r[k].is_number()) return r[k].get<double>();
    return std::nullopt;
  };
  o.experiment = text("experiment"), o.point = text("point"), o.strategy = text("strategy"), o.name = text("name");
  o.role = text("role"), o.status = text("status"), o.error = text("error");
  o.rank = r.value("rank", int64_t(0)), o.world_size = r.value("world_size", int64_t(1)),
  o.ep = r.value("ep", int64_t(1));
  if (r.contains("step") && r["step"].is_number_integer()) o.step = r["step"].get<int64_t>();
  o.tokens_received = num("tokens_received"), o.static_bytes = num("static_bytes");
  o.peak_activation_bytes = num("peak_activation_bytes");
  o.predicted_activation_bytes = num("predicted_activation_bytes"), o.budget_bytes = num("budget_bytes");
  o.grad_max_rel_err = num("grad_max_rel_err"), o.verify_tolerance = num("verify_tolerance");
  o.eval_loss = num("eval_loss"), o.loss = num("loss");
  if (r.contains("step_ms") && r["step_ms"].is_object()) {
    const json& s = r["step_ms"];
    o.step_ms = Spread{s["median"].get<double>(), s.value("min", s["median"].get<double>()),
                       s.value("max", s["median"].get<double>())};
  } else if (const auto ms = num("step_ms")) {
    o.step_ms = Spread{*ms, *ms, *ms};
  }
  if (r.contains("step_ms_all") && r["step_ms_all"].is_array())
    for (const auto& x : r["step_ms_all"])
      if (x.is_number()) o.step_ms_all.push_back(x.get<double>());
  if (r.contains("verified") && r["verified"].is_boolean()) o.verified = r["verified"].get<bool>();
  o.params = r.value("params", json()), o.config = r.value("config", json()), o.env = r.value("env", json());
  return o;
}

}  // namespace memfine
