#include "core/run/train.h"

#include <ATen/core/grad_mode.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

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

// Mean next-token loss over the fixed held-out batches (no auxiliary loss, no gradients).
double evaluate(TrainState& st, Strategy& plain, const Corpus& corpus) {
  const TrainConfig t = st.cfg.train;
  st.cfg.train.aux_loss = 0;
  std::vector<at::Tensor>* counts = st.expert_counts;
  st.expert_counts = nullptr;
  double sum = 0;
  {
    at::NoGradGuard no_grad;
    for (int64_t b = 0; b < t.eval_batches; ++b) {
      set_tokens(st, sample_sequences(corpus.validation, st.cfg.model.micro_batch, st.cfg.model.seq, eval_seed(t, b)));
      sum += forward_loss(st, plain, -1).item<double>();
    }
  }
  st.cfg.train = t;
  st.expert_counts = counts;
  return sum / double(t.eval_batches);
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

// --- one strategy's training run -----------------------------------------------------------------

struct RunContext {
  const SweepPoint* point;
  const Corpus* corpus;
  ResultsFile* results;
  Progress* progress;
  std::string ckpt_dir;
  const PointContext* ctx;
};

// s' of a layer as `ep` ranks would see it: the rows of the hottest rank (experts split evenly in
// order). The overload factor is s' over the mean, s' * ep / sum(counts): readers derive it.
int64_t hottest_rank_rows(const at::Tensor& counts, int64_t ep) { return counts.view({ep, -1}).sum(1).max().item<int64_t>(); }

// Returns false when the run failed (an error, not out of memory).
bool train_one(const RunContext& rc, const StrategySpec& spec) {
  const ExperimentConfig& c = rc.point->config;
  const TrainConfig& t = c.train;
  const std::string label = spec.label();
  bool all_done = true;
  for (int64_t s = 0; s < t.steps && all_done; ++s) all_done = rc.results->has(rc.point->id, label, s);
  if (all_done) {
    for (int64_t s = 0; s < t.steps; ++s) rc.progress->tick(label + ": recorded");
    return true;
  }
  MemoryMeter& meter = MemoryMeter::get(c.device);
  auto st = make_train_state(c);
  std::vector<at::Tensor> counts;
  st->expert_counts = &counts;
  auto strategy = make_strategy(spec);
  auto plain = make_strategy(StrategySpec{strategy_of_role(Role::Reference), {}});
  const std::string ckpt = (fs::path(rc.ckpt_dir) / (safe_name(rc.point->id) + "__" + safe_name(label) + ".ckpt")).string();
  const int64_t first = load_checkpoint(ckpt, *st, rc.point->id, label) + 1;
  for (int64_t s = 0; s < first; ++s) rc.progress->tick("");  // done before the checkpoint
  const int64_t static_bytes = st->static_bytes();
  const char* kill_after = std::getenv("MEMFINE_FAULT_KILL_AFTER_STEPS");  // tests/test_train.cpp
  int64_t ran = 0;
  // A run's head (its strategy's name and role, static bytes, the config and the environment) is in
  // its first step's record; every step's names its run and step and holds what changes.
  json head = new_record(c, *rc.ctx, rc.point->id, spec, "ok");
  head["static_bytes"] = static_bytes;
  head["stats_ep"] = t.stats_ep;
  const json lean = {{"experiment", head["experiment"]}, {"point", head["point"]}, {"strategy", head["strategy"]},
                     {"seed", head["seed"]}, {"status", "ok"}};
  for (int64_t step = first; step < t.steps; ++step) {
    json rec = step == 0 ? head : lean;
    rec["step"] = step;
    const double lr = learning_rate(t, step);
    st->adam->set_lr(lr);
    set_tokens(*st, sample_sequences(rc.corpus->train, c.model.micro_batch, c.model.seq, step_seed(t, step)));
    meter.reset_peak();
    const int64_t start = meter.current_bytes();
    double loss = 0;
    Timer timer(c.device);
    try {
      MemoryLimitGuard guard(meter, c.budget >= 0 ? start - static_bytes + c.budget : -1);
      loss = train_step(*st, *strategy, step);
    } catch (const std::exception& e) {
      const bool oom = is_out_of_memory(e);
      std::string msg = e.what();
      rec["status"] = oom ? "oom" : "error";
      rec["error"] = "step " + std::to_string(step) + ": " + msg.substr(0, msg.find('\n'));
      if (!rc.results->has(rc.point->id, label, step)) rc.results->append(rec);
      for (int64_t s = step; s < t.steps; ++s) rc.progress->tick(label + ": " + rec["status"].get<std::string>());
      return oom;
    }
    const double ms = timer.elapsed_ms();
    if (t.bias_update > 0) update_expert_bias(*st, counts, t.bias_update);
    if (!std::isfinite(loss)) {
      rec["status"] = "error";
      rec["error"] = "step " + std::to_string(step) + ": the loss is not finite (" + std::to_string(loss) + "): lower train.lr";
      if (!rc.results->has(rc.point->id, label, step)) rc.results->append(rec);
      return false;
    }
    rec["loss"] = loss;
    rec["lr"] = lr;
    rec["step_ms"] = ms;
    rec["peak_activation_bytes"] = meter.peak_bytes() - start;
    json experts = json::array(), received = json::array();
    for (const auto& layer : counts) {
      const at::Tensor n = layer.cpu();
      experts.push_back(std::vector<int64_t>(n.data_ptr<int64_t>(), n.data_ptr<int64_t>() + n.numel()));
      received.push_back(hottest_rank_rows(n, t.stats_ep));
    }
    rec["expert_tokens"] = experts;
    rec["tokens_received_per_layer"] = received;
    const json counters = strategy->step_counters();
    for (const auto& [key, value] : counters.items()) rec[key] = value;  // as `run` writes them
    const bool eval = (step + 1) % t.eval_every == 0 || step + 1 == t.steps;
    if (eval) rec["eval_loss"] = evaluate(*st, *plain, *rc.corpus);
    if (!rc.results->has(rc.point->id, label, step)) rc.results->append(rec);
    // The last step needs none: a run whose every step is recorded is skipped on resume.
    if ((step + 1) % t.checkpoint_every == 0 && step + 1 < t.steps) save_checkpoint(ckpt, *st, rc.point->id, label, step);
    char what[160];
    std::snprintf(what, sizeof what, "%s step %lld loss %.3f%s  %.0f tok/s", label.c_str(), (long long)step, loss,
                  eval ? (" eval " + std::to_string(rec["eval_loss"].get<double>()).substr(0, 5)).c_str() : "",
                  double(c.model.tokens()) / ms * 1e3);
    rc.progress->tick(what);
    if (kill_after && ++ran == std::atoll(kill_after)) ::raise(SIGKILL);
  }
  std::error_code ec;
  fs::remove(ckpt, ec);  // the run is whole in the records; its state would only take disk
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
  Corpus corpus;
  try {
    corpus = read_corpus(base.train.corpus);
    for (const auto& p : points)
      if (p.config.train.corpus != base.train.corpus)
        throw std::runtime_error(p.config.where("train.corpus") + ": every point of a file trains on one corpus");
  } catch (const std::exception& e) {
    std::cerr << base.where("train.corpus") << ": " << e.what() << "\n";
    return 2;
  }
  const std::string dir = opt.out_dir.empty()
                              ? (fs::path("results") / device_class(base.device) / base.name).string()
                              : opt.out_dir;
  std::unique_ptr<ResultsFile> results;
  try {
    results = std::make_unique<ResultsFile>(dir, opt.resume, true, "train.jsonl");
    fs::create_directories(fs::path(dir) / "checkpoints");
  } catch (const std::exception& e) {
    std::cerr << "memfine train: " << e.what() << "\n";
    return 2;
  }
  if (!results->repaired_note().empty()) std::cerr << "memfine train: " << results->repaired_note() << "\n";
  std::cerr << "memfine train: corpus " << corpus.dir << ": " << corpus.train.numel() << " training and "
            << corpus.validation.numel() << " held-out byte tokens (" << corpus.entries_train << " and "
            << corpus.entries_validation << " entries, " << corpus.files.size() << " files)\n";
  int64_t total = 0;
  for (const auto& p : points) total += int64_t(p.config.strategies.size()) * p.config.train.steps;
  Progress progress(total, opt.progress);
  bool failed = false;
  for (auto& p : points) {
    if (opt.threads >= 0) p.config.threads = opt.threads;
    p.config.threads = apply_threads(p.config.threads);
    const PointContext ctx = point_context(p.config);
    RunContext rc{&p, &corpus, results.get(), &progress, (fs::path(dir) / "checkpoints").string(), &ctx};
    for (const auto& spec : p.config.strategies) {
      try {
        failed |= !train_one(rc, spec);
      } catch (const std::exception& e) {
        std::cerr << "memfine train: " << p.id << " " << spec.label() << ": " << e.what() << "\n";
        failed = true;
      }
    }
  }
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
