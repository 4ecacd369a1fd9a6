#include "core/run/step.h"

#include <ATen/ATen.h>

#include "core/dist/dist.h"
#include "core/meter/memory_meter.h"
#include "core/meter/timer.h"

namespace memfine {

GuardedStep::GuardedStep(const ExperimentConfig& c, const Dist* dist, bool plans_agree)
    : c_(c), dist_(dist), plans_agree_(plans_agree) {}

StepOutcome GuardedStep::run(int64_t step, int64_t static_bytes, const std::function<double()>& step_fn) {
  MemoryMeter& meter = MemoryMeter::get(c_.device);
  StepOutcome o;
  int64_t start = 0;
  const std::string at = "step " + std::to_string(step) + ": ";
  try {
    StepThread::shared().run([&] {
      meter.reset_peak();
      start = meter.current_bytes();
      // The configured budget's activation room above what is in use now (every state alive).
      const int64_t limit = c_.budget >= 0 && !dist_ ? start + c_.budget - static_bytes : -1;
      Timer timer(c_.device);
      {
        MemoryLimitGuard guard(meter, limit);
        HostWorkCounter host;
        o.loss = step_fn();
        o.host = host.counted();
      }
      o.ms = timer.elapsed_ms();
      o.peak = meter.peak_bytes() - start;
    });
  } catch (const std::exception& e) {
    StepThread::shared().replace();  // what the failed step left in the thread's autograd queue goes with it
    const auto* planned = dynamic_cast<const PlannedOutOfMemory*>(&e);
    if (dist_ && !(planned && plans_agree_)) throw;
    const std::string msg = e.what();
    o.status = is_out_of_memory(e) ? "oom" : "error";
    if (o.status == "error")
      o.error = at + msg.substr(0, msg.find('\n'));
    else if (planned)
      o.error = at + planned->reason;  // the strategy's own terms
    else if (const auto* oom = dynamic_cast<const OutOfMemory*>(&e))
      o.error = at + "activations exceed " + budget_terms(c_.budget, static_bytes) + ": at " +
                fmt_bytes(double(oom->in_use - start)) + ", " + fmt_bytes(double(oom->requested)) + " more was asked";
    else  // ours, rethrown by ATen inside its own error
      o.error = at + "activations exceed " + budget_terms(c_.budget, static_bytes) + ", having reached " +
                fmt_bytes(double(meter.peak_bytes() - start));
    return o;
  }
  o.slowest_ms = o.ms, o.fullest_peak = o.peak;
  if (dist_) {
    const at::Tensor worst = dist_->allreduce_max(at::tensor({o.ms, double(o.peak)}, at::kDouble));
    o.slowest_ms = worst[0].item<double>(), o.fullest_peak = int64_t(worst[1].item<double>());
    if (c_.budget >= 0 && o.fullest_peak > c_.budget - static_bytes) {  // every rank ends the strategy alike
      o.status = "oom";
      o.error = over_budget_after_step(step, c_.budget, static_bytes, o.fullest_peak);
    }
  }
  return o;
}

}  // namespace memfine
