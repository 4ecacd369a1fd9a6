// `memfine checkpoint`: how often to checkpoint and what failures leave (core/project/goodput.h:
// Young's, Daly's and Kokolis et al.'s formulas).
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/cli/commands.h"
#include "core/cli/run_flags.h"
#include "core/project/goodput.h"

namespace memfine::cli {

namespace {

int checkpoint(const Args& a) {
  auto number = [&](const char* flag, double fallback) {
    const std::string t = a.text(flag, "");
    if (t.empty()) return fallback;
    size_t used = 0;
    double v = std::nan("");
    try {
      v = std::stod(t, &used);
    } catch (const std::exception&) {
    }
    if (used != t.size() || !std::isfinite(v) || v < 0)
      throw std::invalid_argument(std::string(flag) + ": expected a number >= 0, got '" + t + "'");
    return v;
  };
  CheckpointPlan plan;
  std::string rate_source, rate_text = "--mtbf-h as given";
  try {
    double mtbf = number("--mtbf-h", 0);
    if (mtbf <= 0) {
      const double nodes = number("--nodes", 0);
      if (nodes < 1) throw std::invalid_argument("give --mtbf-h, or --nodes (and --reliability)");
      const std::string rel = a.text("--reliability", "llama3");
      const double rate = std::isdigit(static_cast<unsigned char>(rel[0])) ? number("--reliability", 0) / 24000
                                                                           : reliability_preset(rel).node_failure_rate;
      if (rate <= 0) throw std::invalid_argument("--reliability: a rate must be above 0");
      rate_source = rel;
      rate_text = std::isdigit(static_cast<unsigned char>(rel[0]))
                      ? rel + " failures per 1000 node-days (as given)"
                      : reliability_preset(rel).source;
      mtbf = job_mttf(int64_t(nodes), rate);
    }
    const double write = number("--write-min", -1);
    if (write <= 0) throw std::invalid_argument("--write-min: give a checkpoint's write time above 0");
    plan = checkpoint_plan(mtbf, write / 60, number("--restart-min", 10) / 60);
  } catch (const std::invalid_argument& e) {
    std::cerr << "memfine checkpoint: " << e.what() << "\n";
    return 2;
  }
  if (a.has("--json")) {
    nlohmann::json j{
        {"mttf_h", plan.mttf},        {"write_min", plan.write * 60},           {"restart_min", plan.restart * 60},
        {"reliability", rate_source}, {"reliability_source", rate_text}, {"young_interval_min", plan.young * 60},  {"daly_interval_min", plan.daly * 60},
        {"ettr", plan.ettr},          {"daly_efficiency", plan.daly_efficiency}};
    for (const auto& [k, v] : made_stamp()) j[k] = v;
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("job MTBF %.3g h, checkpoint write %.3g min, restart %.3g min\n", plan.mttf, plan.write * 60,
              plan.restart * 60);
  std::printf("failure rate: %s (--reliability: llama3, rsc1, rsc2 or a rate)\n", rate_text.c_str());
  std::printf("interval: Young (and Kokolis et al.'s optimum) %.3g min, Daly %.3g min\n", plan.young * 60,
              plan.daly * 60);
  std::printf("expected ETTR at Young's interval (Kokolis et al.): %.3f\n", plan.ettr);
  std::printf("Daly's efficiency at his interval (time without failures / wall time): %.3f\n", plan.daly_efficiency);
  return 0;
}

}  // namespace

Command checkpoint_command() {
  return {"checkpoint",
          "",
          "how often to checkpoint, and what failures leave: Young's, Daly's and Kokolis et al.'s formulas",
          R"(For a job that fails every --mtbf-h hours on average (or on --nodes nodes at a --reliability
preset's or a written rate of failures per 1000 node-days), writing a checkpoint in --write-min and
restarting in --restart-min: the checkpoint interval by Young's formula (Kokolis et al.'s optimum is
the same) and by Daly's higher-order one, Kokolis et al.'s expected effective training time ratio
(ETTR) at Young's interval, and Daly's efficiency (time without failures over expected wall time)
at his. core/project/goodput.h names each source; memfine project applies the same formulas.

exit status: 0, or 2 for a missing or absurd value.
)",
          {{"--mtbf-h", "H", "the job's mean time between failures, hours"},
           {"--nodes", "N", "nodes in the job (with --reliability instead of --mtbf-h)"},
           {"--reliability", "NAME|RATE", "llama3, rsc1, rsc2, or failures per 1000 node-days (default llama3)"},
           {"--write-min", "MIN", "a checkpoint's write time, minutes"},
           {"--restart-min", "MIN", "a restart's cost, minutes (default 10)"},
           {"--json", "", "one JSON object instead of the text"}},
          0,
          0,
          checkpoint};
}

}  // namespace memfine::cli
