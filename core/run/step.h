// The one guarded step of `memfine run` and `memfine train`, on one process and on real ranks: the
// budget enforced by the meter, the step timed, out of memory and errors turned into a result in
// the budget's terms, and on real ranks the fullest rank's peak compared with the budget after the
// step. Steps run on a StepThread, replaced after a failed one (core/run/step_thread.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/config/config.h"
#include "core/meter/host_work.h"
#include "core/run/step_thread.h"

namespace memfine {

class Dist;

struct StepOutcome {
  std::string status = "ok", error;  // ok | oom | error; error says which step and why
  double loss = 0;
  double ms = 0;     // this rank's step time
  int64_t peak = 0;  // this rank's activation peak: bytes above those in use when the step began
  // Real ranks: the slowest rank's time and the fullest rank's peak; one process: its own.
  double slowest_ms = 0;
  int64_t fullest_peak = 0;
  HostWork host;  // this rank's operators and reads of device values (core/meter/host_work.h)
  bool ok() const { return status == "ok"; }
};

class GuardedStep {
 public:
  // On real ranks a rank cannot skip a step alone (the others would wait in its collectives): a
  // step there runs whole and its peak is checked after it, and a step that throws ends the job
  // (rethrown), except a planned out of memory where every rank plans alike (`plans_agree`: from
  // counts the ranks share, as MACT over learned routing does).
  GuardedStep(const ExperimentConfig& c, const Dist* dist, bool plans_agree = false);
  // Runs `step_fn` (a training step; it returns the loss) as step `step` of a state holding
  // `static_bytes`.
  StepOutcome run(int64_t step, int64_t static_bytes, const std::function<double()>& step_fn);

 private:
  const ExperimentConfig& c_;
  const Dist* dist_;
  bool plans_agree_;
};

}  // namespace memfine
