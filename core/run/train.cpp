#include "core/run/train.h"

#include <ATen/core/grad_mode.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/dist/dist.h"
#include "core/dist/gather.h"
#include "core/dist/launch.h"
#include "core/meter/memory_meter.h"
#include "core/meter/timer.h"
#include "core/record/environment.h"
#include "core/record/record.h"
#include "core/record/results.h"
#include "core/run/progress.h"
#include "core/run/threads.h"
#include "core/run/train_step.h"
#include "core/run/validate.h"
#include "core/workload/corpus.h"
#include "core/workload/workload.h"

namespace memfine {

namespace fs = std::filesystem;

namespace {

// Peak learning rate after a linear warmup, then cosine decay to min_lr at the last step.
double learning_rate(const TrainConfig& t, int64_t step) {
  if (step < t.warmup) return t.lr * double(step + 1) / double(t.warmup);
  const double p = t.steps - t.warmup > 1 ? double(step - t.warmup) / double(t.steps - t.warmup - 1) : 1.0;
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + std::cos(M_PI * std::min(p, 1.0)));
}

// A step's tokens: inputs and next tokens of `micro_batch` sequences, the same for every strategy.
void set_tokens(TrainState& st, const at::Tensor& seqs) {
  const int64_t s = seqs.size(1) - 1;
  st.input.copy_(seqs.narrow(1, 0, s).reshape(-1));
  st.target.copy_(seqs.narrow(1, 1, s).reshape(-1));
}

uint64_t step_seed(const TrainConfig& t, int64_t step) { return mix_seed(t.data_seed, uint64_t(step) + 1); }
uint64_t eval_seed(const TrainConfig& t, int64_t batch) { return mix_seed(mix_seed(t.data_seed, 0xe7a1), uint64_t(batch)); }

// This rank's sequences of a step: real ranks share one global batch of micro_batch * world
// sequences, rank r taking the r-th micro_batch of them, so N ranks see what one process with
// micro_batch * N would.
at::Tensor rank_batch(const at::Tensor& text, const ModelConfig& m, uint64_t seed, const Dist* d) {
  const int64_t world = d ? d->world() : 1, rank = d ? d->rank() : 0;
  return sample_sequences(text, m.micro_batch * world, m.seq, seed).narrow(0, rank * m.micro_batch, m.micro_batch);
}

// --- what real ranks agree on ---------------------------------------------------------------------

// Rank 0's value (>= 0) on every rank.
int64_t from_rank0(const Dist* d, int64_t v) {
  if (!d) return v;
  at::Tensor t = at::tensor({d->rank() == 0 ? v : int64_t(0)}, at::kLong);
  d->allreduce_sum(t);
  return t.item<int64_t>();
}
int64_t min_over_ranks(const Dist* d, int64_t v) {
  return d ? -d->allreduce_max(at::tensor({-v}, at::kLong)).item<int64_t>() : v;
}

// Mean next-token loss over the fixed held-out batches (no auxiliary loss, no gradients); real
// ranks evaluate their shares of each batch together.
double evaluate(TrainState& st, Strategy& plain, const Corpus& corpus) {
  const TrainConfig t = st.cfg.train;
  st.cfg.train.aux_loss = 0;
  std::vector<at::Tensor>* counts = st.expert_counts;
  st.expert_counts = nullptr;
  double sum = 0;
  {
    at::NoGradGuard no_grad;
    for (int64_t b = 0; b < t.eval_batches; ++b) {
      set_tokens(st, rank_batch(corpus.validation, st.cfg.model, eval_seed(t, b), st.dist));
      sum += forward_loss(st, plain, -1).item<double>();  // real ranks: 1/world of the batch's mean
    }
  }
  st.cfg.train = t;
  st.expert_counts = counts;
  at::Tensor mean = at::tensor({sum / double(t.eval_batches)}, at::kDouble);
  if (st.dist) st.dist->allreduce_sum(mean);
  return mean.item<double>();
}

// --- checkpoints: parameters, Adam's moments and step count, and the training step --------------

std::string safe_name(const std::string& s) {
  std::string out;
  for (char ch : s) out += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.') ? ch : '_';
  return out;
}

std::vector<at::Tensor> state_tensors(const TrainState& st) {
  std::vector<at::Tensor> all = st.adam->params();
  for (const auto& m : st.adam->first_moments()) all.push_back(m);
  for (const auto& v : st.adam->second_moments()) all.push_back(v);
  for (const auto& l : st.model.layers)
    if (l.expert_bias.defined()) all.push_back(l.expert_bias);
  return all;
}

// DeepSeek-V3's auxiliary-loss-free balancing, after a step: each expert's bias moves by `rate`
// towards balance, up when it got fewer than the mean of the assignments, down when more.
void update_expert_bias(TrainState& st, const std::vector<at::Tensor>& counts, double rate) {
  at::NoGradGuard no_grad;
  for (size_t l = 0; l < counts.size(); ++l) {
    at::Tensor& b = st.model.layers[l].expert_bias;
    if (!b.defined() || !counts[l].defined()) continue;
    const at::Tensor n = counts[l].to(b.options());
    b.add_(at::sign(n.mean() - n) * rate);
  }
}

void save_checkpoint(const std::string& path, const TrainState& st, const std::string& point, const std::string& label,
                     int64_t step) {
  const std::vector<at::Tensor> ts = state_tensors(st);
  json head = {{"format", "memfine-checkpoint-1"}, {"point", point}, {"strategy", label}, {"step", step},
               {"adam_steps", st.adam->steps_taken()}, {"tensors", json::array()}};
  for (const auto& t : ts) head["tensors"].push_back({{"numel", t.numel()}, {"dtype", std::string(c10::toString(t.scalar_type()))}});
  std::string bytes = head.dump() + "\n";
  for (const auto& t : ts) {
    const at::Tensor c = t.detach().contiguous().cpu();
    bytes.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  replace_file(path, bytes);
}

// The step the checkpoint was taken after, its state loaded into `st`; -1 when there is none.
int64_t load_checkpoint(const std::string& path, TrainState& st, const std::string& point, const std::string& label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return -1;
  std::string line;
  std::getline(in, line);
  json head;
  try {
    head = json::parse(line);
  } catch (const json::exception&) {
    throw std::runtime_error(path + ": not a memfine checkpoint; remove it to train from the start");
  }
  const std::vector<at::Tensor> ts = state_tensors(st);
  if (head.value("format", "") != "memfine-checkpoint-1" || head.value("point", "") != point ||
      head.value("strategy", "") != label || !head["tensors"].is_array() || head["tensors"].size() != ts.size())
    throw std::runtime_error(path + ": a checkpoint of another run or model (point '" + head.value("point", "?") +
                             "', strategy '" + head.value("strategy", "?") + "'); remove it to train from the start");
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (head["tensors"][i]["numel"].get<int64_t>() != ts[i].numel())
      throw std::runtime_error(path + ": tensor " + std::to_string(i) + " has another shape than this model's");
    at::Tensor host = at::empty(ts[i].sizes(), ts[i].options().device(at::kCPU));
    in.read(static_cast<char*>(host.data_ptr()), std::streamsize(host.nbytes()));
    if (!in) throw std::runtime_error(path + ": truncated (tensor " + std::to_string(i) + "); remove it to train from the start");
    at::Tensor dst = ts[i];
    dst.copy_(host);
  }
  st.adam->set_steps_taken(head["adam_steps"].get<int64_t>());
  return head["step"].get<int64_t>();
}

// Where a run's state is saved. One process: BASE.ckpt, replaced atomically. Real ranks: each rank
// its own, named by step (BASE.rankR.stepS.ckpt); the older go once every rank has written the
// newer, so a kill between two ranks' writes still leaves a step that every rank has.
class Checkpoints {
 public:
  Checkpoints(std::string base, const Dist* d) : base_(std::move(base)), dist_(d) {}

  // The step the checkpoint was taken after, its state loaded into `st`; -1 when there is none.
  int64_t load(TrainState& st, const std::string& point, const std::string& label) const {
    if (!dist_) return load_checkpoint(base_ + ".ckpt", st, point, label);
    const std::vector<int64_t> mine = steps();
    const int64_t agreed = min_over_ranks(dist_, mine.empty() ? -1 : mine.back());
    if (agreed < 0) return -1;
    const int64_t got = load_checkpoint(path(agreed), st, point, label);
    if (got != agreed) throw std::runtime_error(path(agreed) + ": missing or of another step; remove the run's checkpoints");
    return got;
  }

  void save(const TrainState& st, const std::string& point, const std::string& label, int64_t step) const {
    if (!dist_) return save_checkpoint(base_ + ".ckpt", st, point, label, step);
    save_checkpoint(path(step), st, point, label, step);
    at::Tensor done = at::ones({1});
    dist_->allreduce_sum(done);  // every rank has this step's
    for (int64_t s : steps())
      if (s < step) remove(s);
  }

  // The run is whole in the records; its state would only take disk.
  void remove_all() const {
    if (!dist_) {
      std::error_code ec;
      fs::remove(base_ + ".ckpt", ec);
      return;
    }
    for (int64_t s : steps()) remove(s);
  }

 private:
  std::string prefix() const { return fs::path(base_).filename().string() + ".rank" + std::to_string(dist_->rank()) + ".step"; }
  std::string path(int64_t step) const { return base_ + ".rank" + std::to_string(dist_->rank()) + ".step" + std::to_string(step) + ".ckpt"; }
  void remove(int64_t step) const {
    std::error_code ec;
    fs::remove(path(step), ec);
  }
  // This rank's checkpoints' steps, ascending.
  std::vector<int64_t> steps() const {
    std::vector<int64_t> out;
    std::error_code ec;
    const std::string pre = prefix();
    for (const auto& e : fs::directory_iterator(fs::path(base_).parent_path(), ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind(pre, 0) != 0 || n.size() <= pre.size() + 5 || n.substr(n.size() - 5) != ".ckpt") continue;
      const std::string digits = n.substr(pre.size(), n.size() - pre.size() - 5);
      if (!digits.empty() && std::all_of(digits.begin(), digits.end(), ::isdigit)) out.push_back(std::stoll(digits));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string base_;
  const Dist* dist_;
};

// --- one strategy's training run -----------------------------------------------------------------

struct RunContext {
  const SweepPoint* point;
  const Corpus* corpus;
  ResultsFile* results;  // rank 0's; null on the other ranks
  Progress* progress;
  std::string ckpt_dir;
  const PointContext* ctx;
  const Dist* dist;  // real ranks; null: one process
  bool recorded(const std::string& label, int64_t step) const { return results && results->has(point->id, label, step); }
  void append(const std::string& label, const json& rec) const {
    if (results && !results->has(point->id, label, rec["step"].get<int64_t>())) results->append(rec);
  }
};

// s' of a layer as `ep` ranks would see it: the rows of the hottest rank (experts split evenly in
// order). The overload factor is s' over the mean, s' * ep / sum(counts): readers derive it.
int64_t hottest_rank_rows(const at::Tensor& counts, int64_t ep) { return counts.view({ep, -1}).sum(1).max().item<int64_t>(); }

// Returns false when the run failed (an error, not out of memory).
bool train_one(const RunContext& rc, const StrategySpec& spec) {
  const ExperimentConfig& c = rc.point->config;
  const TrainConfig& t = c.train;
  const Dist* dist = rc.dist;
  const std::string label = spec.label();
  bool all_done = true;
  for (int64_t s = 0; s < t.steps && all_done; ++s) all_done = rc.recorded(label, s);
  if (from_rank0(dist, all_done)) {
    for (int64_t s = 0; s < t.steps; ++s) rc.progress->tick(label + ": recorded");
    return true;
  }
  MemoryMeter& meter = MemoryMeter::get(c.device);
  auto st = dist ? make_rank_state(c, *dist) : make_train_state(c);
  std::vector<at::Tensor> counts;
  st->expert_counts = &counts;
  auto strategy = make_strategy(spec);
  auto plain = make_strategy(StrategySpec{strategy_of_role(Role::Reference), {}});
  const Checkpoints ckpt((fs::path(rc.ckpt_dir) / (safe_name(rc.point->id) + "__" + safe_name(label))).string(), dist);
  const int64_t first = ckpt.load(*st, rc.point->id, label) + 1;
  for (int64_t s = 0; s < first; ++s) rc.progress->tick("");  // done before the checkpoint
  const int64_t static_bytes = st->static_bytes();
  const char* kill_after = std::getenv("MEMFINE_FAULT_KILL_AFTER_STEPS");  // tests/test_train.cpp
  int64_t ran = 0;
  // A run's head (its strategy's name and role, static bytes, the config and the environment) is in
  // its first step's record; every step's names its run and step and holds what changes.
  json head = new_record(c, *rc.ctx, rc.point->id, spec, "ok");
  head["static_bytes"] = static_bytes;  // real ranks: rank 0's (the ranks hold alike)
  head["stats_ep"] = t.stats_ep;
  if (dist) head["ranks"] = dist->world();
  const json lean = {{"experiment", head["experiment"]}, {"point", head["point"]}, {"strategy", head["strategy"]},
                     {"seed", head["seed"]}, {"status", "ok"}};
  // A run that cannot go on: its step's record says why, the rest of its steps are ticked off.
  auto end_run = [&](json& rec, const std::string& status, const std::string& why) {
    rec["status"] = status;
    rec["error"] = why;
    rc.append(label, rec);
    for (int64_t s = rec["step"].get<int64_t>(); s < t.steps; ++s) rc.progress->tick(label + ": " + status);
  };
  for (int64_t step = first; step < t.steps; ++step) {
    json rec = step == 0 ? head : lean;
    rec["step"] = step;
    const double lr = learning_rate(t, step);
    st->adam->set_lr(lr);
    set_tokens(*st, rank_batch(rc.corpus->train, c.model, step_seed(t, step), dist));
    meter.reset_peak();
    const int64_t start = meter.current_bytes();
    double loss = 0;
    Timer timer(c.device);
    // Real ranks cannot stop one rank mid-step (the others would wait in its collectives): they run
    // the step whole and compare the fullest rank's peak with the budget after it.
    const int64_t room = c.budget >= 0 ? c.budget - static_bytes : -1;
    try {
      MemoryLimitGuard guard(meter, room >= 0 && !dist ? start + room : -1);
      loss = train_step(*st, *strategy, step);
    } catch (const std::exception& e) {
      // A real rank cannot skip a step alone (the others wait in its collectives), but a planned
      // out of memory is planned alike on every rank from the counts they share.
      if (dist && !dynamic_cast<const PlannedOutOfMemory*>(&e)) throw;
      const bool oom = is_out_of_memory(e);
      const std::string msg = e.what();
      end_run(rec, oom ? "oom" : "error", "step " + std::to_string(step) + ": " + msg.substr(0, msg.find('\n')));
      return oom;
    }
    double ms = timer.elapsed_ms();
    int64_t peak = meter.peak_bytes() - start;
    if (dist) {
      // The job's: every layer's routing over all ranks, and the slowest and fullest rank.
      for (auto& n : counts) dist->allreduce_sum(n);
      const at::Tensor worst = dist->allreduce_max(at::tensor({ms, double(peak)}, at::kDouble));
      ms = worst[0].item<double>(), peak = int64_t(worst[1].item<double>());
      if (room >= 0 && peak > room) {
        rec["peak_activation_bytes"] = peak;
        end_run(rec, "oom", over_budget_after_step(step, c.budget, static_bytes, peak));
        return true;
      }
    }
    if (t.bias_update > 0) update_expert_bias(*st, counts, t.bias_update);
    if (!std::isfinite(loss)) {
      end_run(rec, "error", "step " + std::to_string(step) + ": the loss is not finite (" + std::to_string(loss) +
                                "): lower train.lr");
      return false;
    }
    rec["loss"] = loss;
    rec["lr"] = lr;
    rec["step_ms"] = ms;
    rec["peak_activation_bytes"] = peak;
    json experts = json::array(), received = json::array();
    for (const auto& layer : counts) {
      const at::Tensor n = layer.cpu();
      experts.push_back(std::vector<int64_t>(n.data_ptr<int64_t>(), n.data_ptr<int64_t>() + n.numel()));
      received.push_back(hottest_rank_rows(n, t.stats_ep));
    }
    rec["expert_tokens"] = experts;
    rec["tokens_received_per_layer"] = received;
    json counters = strategy->step_counters();
    if (dist) {
      const auto all = gather_records(*dist, "train/" + rc.point->id + "/" + label + "/" + std::to_string(step), {counters});
      counters = dist->rank() == 0 ? strategy->merge_rank_counters(all) : json::object();
    }
    for (const auto& [key, value] : counters.items()) rec[key] = value;  // as `run` writes them
    const bool eval = (step + 1) % t.eval_every == 0 || step + 1 == t.steps;
    if (eval) rec["eval_loss"] = evaluate(*st, *plain, *rc.corpus);
    rc.append(label, rec);
    // The last step needs none: a run whose every step is recorded is skipped on resume.
    if ((step + 1) % t.checkpoint_every == 0 && step + 1 < t.steps) ckpt.save(*st, rc.point->id, label, step);
    char what[160];
    std::snprintf(what, sizeof what, "%s step %lld loss %.3f%s  %.0f tok/s", label.c_str(), (long long)step, loss,
                  eval ? (" eval " + std::to_string(rec["eval_loss"].get<double>()).substr(0, 5)).c_str() : "",
                  double(c.model.tokens() * (dist ? dist->world() : 1)) / ms * 1e3);
    rc.progress->tick(what);
    if (kill_after && ++ran == std::atoll(kill_after)) ::raise(SIGKILL);
  }
  ckpt.remove_all();
  return true;
}

}  // namespace

int train_experiment(const std::string& yaml, const RunOptions& opt) {
  std::vector<std::string> errors;
  std::vector<SweepPoint> points = load_and_validate(yaml, errors);
  for (const auto& p : points)
    if (errors.empty() && !p.config.train.enabled) errors.push_back(yaml + ": no train: section (memfine run benchmarks such a file)");
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << e << "\n";
    return 2;
  }
  const ExperimentConfig& base = points.front().config;
  std::unique_ptr<Dist> dist;
  try {
    dist = join_job(base.device);
  } catch (const std::exception& e) {
    std::cerr << "memfine train: " << yaml << ": " << e.what() << "\n";
    return 2;
  }
  const bool writer = !dist || dist->rank() == 0;
  for (const auto& p : points) {
    const int64_t world = dist ? dist->world() : 1;
    if (p.config.ep == world) continue;
    // Every rank finds it; rank 0 says it.
    if (writer)
      std::cerr << p.config.where("parallel.ep") << ": parallel.ep is " << p.config.ep
                << (dist ? " but WORLD_SIZE is " + std::to_string(world) : std::string(" and this is one process"))
                << ": train on one real rank per expert-parallel rank (memfine launch --nproc " << p.config.ep << " "
                << yaml << "), or set parallel.ep to 1 (train.stats_ep computes s' for more ranks)\n";
    return 2;
  }
  Corpus corpus;
  try {
    corpus = read_corpus(base.train.corpus);
    for (const auto& p : points)
      if (p.config.train.corpus != base.train.corpus)
        throw std::runtime_error(p.config.where("train.corpus") + ": every point of a file trains on one corpus");
  } catch (const std::exception& e) {
    if (writer) std::cerr << base.where("train.corpus") << ": " << e.what() << "\n";
    return 2;
  }
  const std::string dir = opt.out_dir.empty()
                              ? (fs::path("results") / device_class(base.device) / base.name).string()
                              : opt.out_dir;
  // Rank 0 alone reads and writes the records; the other ranks learn what it found.
  std::unique_ptr<ResultsFile> results;
  bool opened = true;
  if (writer) {
    try {
      results = std::make_unique<ResultsFile>(dir, opt.resume, true, "train.jsonl");
      fs::create_directories(fs::path(dir) / "checkpoints");
    } catch (const std::exception& e) {
      std::cerr << "memfine train: " << e.what() << "\n";
      opened = false;
    }
  }
  if (!from_rank0(dist.get(), opened)) return 2;
  if (results && !results->repaired_note().empty()) std::cerr << "memfine train: " << results->repaired_note() << "\n";
  if (writer)
    std::cerr << "memfine train: corpus " << corpus.dir << ": " << corpus.train.numel() << " training and "
              << corpus.validation.numel() << " held-out byte tokens (" << corpus.entries_train << " and "
              << corpus.entries_validation << " entries, " << corpus.files.size() << " files)"
              << (dist ? "; " + std::to_string(dist->world()) + " real ranks (" + dist->backend() + ")" : std::string()) << "\n";
  int64_t total = 0;
  for (const auto& p : points) total += int64_t(p.config.strategies.size()) * p.config.train.steps;
  Progress progress(total, opt.progress && writer);
  bool failed = false;
  for (auto& p : points) {
    if (opt.threads >= 0) p.config.threads = opt.threads;
    p.config.threads = apply_threads(p.config.threads);
    const PointContext ctx = point_context(p.config);
    RunContext rc{&p, &corpus, results.get(), &progress, (fs::path(dir) / "checkpoints").string(), &ctx, dist.get()};
    for (const auto& spec : p.config.strategies) {
      try {
        failed |= !train_one(rc, spec);
      } catch (const std::exception& e) {
        std::cerr << "memfine train: " << (dist ? "rank " + std::to_string(dist->rank()) + ": " : std::string()) << p.id
                  << " " << spec.label() << ": " << e.what() << "\n";
        if (dist) return 1;  // the other ranks' collectives time out and they exit too
        failed = true;
      }
    }
  }
  if (!writer) return failed ? 1 : 0;
  if (!opt.trace_out.empty()) {
    // The first strategy of the first point, every recorded step: `step,layer,expert,tokens`, the
    // trace workload's format with a step column (experiments/README.md, schedule: trace).
    const std::string point = points.front().id, label = points.front().config.strategies.front().label();
    std::string csv = "step,layer,expert,tokens\n";
    int64_t rows = 0;
    for (const auto& r : results->records()) {
      if (r["point"] != point || r["strategy"] != label || r["status"] != "ok") continue;
      const auto& layers = r["expert_tokens"];
      for (size_t l = 0; l < layers.size(); ++l)
        for (size_t e = 0; e < layers[l].size(); ++e, ++rows)
          csv += std::to_string(r["step"].get<int64_t>()) + "," + std::to_string(l) + "," + std::to_string(e) + "," +
                 std::to_string(layers[l][e].get<int64_t>()) + "\n";
    }
    try {
      replace_file(opt.trace_out, csv);
      std::cout << "trace: " << opt.trace_out << " (" << point << ", " << label << ", " << rows << " rows)\n";
    } catch (const std::exception& e) {
      std::cerr << "memfine train: " << e.what() << "\n";
      failed = true;
    }
  }
  std::cout << "\nrecords: " << results->path() << " (" << results->records().size() << " steps)\n";
  if (failed) std::cerr << "memfine train: some runs failed; see 'error' in the records\n";
  return failed ? 1 : 0;
}

}  // namespace memfine
