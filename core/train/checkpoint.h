// A training run's whole state (parameters, Adam's moments and step count, the expert bias) saved
// every train.checkpoint_every steps, so that --resume continues it. The records are the truth:
// a checkpoint is used only at or before the last recorded step, and the steps after it are run
// again (not written again). Every file carries its run, its configuration's digest and a checksum
// of its bytes; a damaged or foreign one is refused naming the file, before any state is touched.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace memfine {

class Dist;
struct TrainState;

// One process: BASE.ckpt, replaced atomically. Real ranks: each rank its own, named by step
// (BASE.rankR.stepS.ckpt); the older go once every rank has written the newer, so a kill between
// two ranks' writes still leaves a step that every rank has.
class Checkpoints {
 public:
  // `digest`: the run's configuration (config_digest), checked on load.
  Checkpoints(std::string base, const Dist* dist, std::string point, std::string strategy, std::string digest);
  // Loads the newest checkpoint at or before step `last` that every rank has into `st` and returns
  // its step; -1 when there is none (train from the start). Checkpoints past `last` (ahead of the
  // records) are removed. Throws std::runtime_error naming a damaged or foreign file.
  int64_t load(TrainState& st, int64_t last) const;
  void save(const TrainState& st, int64_t step) const;
  // The run is whole in the records; its state would only take disk.
  void remove_all() const;

 private:
  std::string path(int64_t step) const;
  std::vector<int64_t> steps() const;  // this rank's, ascending (real ranks)
  void remove(int64_t step) const;
  std::string base_, point_, strategy_, digest_;
  const Dist* dist_;
};

}  // namespace memfine
