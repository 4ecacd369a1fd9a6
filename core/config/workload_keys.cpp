#include <filesystem>

#include "core/config/sections.h"

namespace memfine {

const Section<WorkloadConfig>& workload_keys() {
  using namespace fields;
  using W = WorkloadConfig;
  static const Section<W> s{
      "workload",
      {text<W>("kind", &W::kind, "`balanced` \\| `zipf` \\| `lognormal` \\| `hot` \\| `trace` \\| `router`",
               "who routes to which expert: evenly, by a law (below), a recorded trace, or the router's own top-k"),
       number<W>("alpha", &W::alpha, 0, 100, "zipf: expert popularity ~ rank^-alpha"),
       number<W>("sigma", &W::sigma, 0, 100, "lognormal: per-expert load ~ exp(sigma * N(0,1))"),
       number<W>("hot_fraction", &W::hot_fraction, 0, 1,
                 "hot: this share of all assignments goes to `hot_experts` experts"),
       integer<W>("hot_experts", &W::hot_experts, 1, 65536, "hot: how many experts are hot"),
       choice<W>("hot_placement", &W::hot_placement, {"random", "one_rank"},
                 "hot: `random` draws the hot experts anywhere (anew in each layer); `one_rank` makes them "
                 "consecutive experts from one expert-parallel rank's first (the same rank in every layer), so "
                 "that rank receives the whole hot share: its overload is `hot_fraction * ep` when `hot_experts` "
                 "fit on it"),
       text<W>(
           "trace", &W::trace, "path",
           "trace: CSV `layer,expert,tokens`, or `step,layer,expert,tokens` as `memfine train --trace-out` writes, "
           "or Megatron-Core's router trace (--moe-routing-trace-path: a folder of router_trace_rank{r}.jsonl or "
           "one of them; its decoder layers in order, its MTP records apart; one whose top-k or MoE layers are not "
           "the model's is refused) (relative to the YAML's folder); a CSV's layers and steps it lacks cycle through "
           "those it has; counts are replayed exactly when they add up to `ep * seq * micro_batch * topk`, scaled "
           "otherwise. At most 256 MiB, whole integers, at most 2^40 tokens a row; no step or layer may route none"),
       choice<W>(
           "schedule", &W::schedule, {"none", "figure5", "trace"},
           "`trace`: step s replays the trace's s-th step (`peak_step` picks the step at which the hottest rank is "
           "chosen). `figure5`: imbalance changes over steps and depth like the paper's Figures 2 and 5 (calm "
           "first steps, hot around `peak_step`, deeper layers more imbalanced)"),
       number<W>("peak_step", &W::peak_step, -1e6, 1e6, "the schedule's hottest step"),
       number<W>("width", &W::width, 1e-6, 1e6, "the schedule's spread in steps")}};
  return s;
}

void parse_workload(const YAML::Node& node, const std::string& dir, WorkloadConfig& w, Problems& p,
                    const std::string& key) {
  MapReader r(node, key, p);
  read_section(workload_keys(), r, w);  // `kind` is checked against the registered laws above config
  r.check_unknown();
  if (w.kind != "trace") return;
  if (w.trace.empty()) {
    p.add(node, key + ".trace", "kind 'trace' needs a trace file");
    return;
  }
  // Absolute, so that the record's config names the same file from anywhere.
  std::filesystem::path tp(w.trace);
  w.trace = tp.is_relative() && std::filesystem::exists(tp) ? std::filesystem::absolute(tp).lexically_normal().string()
                                                            : resolve_path(w.trace, dir);
}

std::string resolve_path(const std::string& path, const std::string& dir) {
  std::filesystem::path p(path);
  if (p.is_relative()) p = std::filesystem::path(dir.empty() ? "." : dir) / p;
  return std::filesystem::absolute(p).lexically_normal().string();
}

}  // namespace memfine
