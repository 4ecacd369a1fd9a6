#include "core/config/sections.h"

namespace memfine {

const Section<TrainConfig>& train_keys() {
  using namespace fields;
  using T = TrainConfig;
  static const Section<T> s{
      "train",
      {integer<T>("steps", &T::steps, 1, 10000000, "optimizer steps; each sees `seq * micro_batch` tokens per rank"),
       number<T>("lr", &T::lr, 0, 10,
                 "Adam's peak learning rate, reached after `warmup` linear steps, then cosine decay"),
       integer<T>("warmup", &T::warmup, 0, 10000000, "linear warmup steps"),
       number<T>("min_lr", &T::min_lr, 0, 10, "the learning rate at the last step; at most `lr`"),
       integer<T>("eval_every", &T::eval_every, 1, 10000000,
                  "held-out loss (no auxiliary loss) every N steps and at the last"),
       integer<T>("eval_batches", &T::eval_batches, 1, 100000, "fixed held-out batches per evaluation"),
       integer<T>("checkpoint_every", &T::checkpoint_every, 1, 10000000,
                  "the whole training state (weights, Adam's moments and step count, the expert bias) every N steps in "
                  "`DIR/checkpoints/`, checksummed; `--resume` continues the records from it"),
       number<T>("aux_loss", &T::aux_loss, 0, 100,
                 "Switch Transformer's load-balancing loss coefficient (`coef * experts * sum_e f_e P_e` over top-k "
                 "assignments); 0 turns it off"),
       number<T>(
           "bias_update", &T::bias_update, 0, 10,
           "DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias added to the router's probabilities for "
           "the top-k choice only, moved by this much after each step towards balance (0.001 in the DeepSeek-V3 "
           "report); 0 turns it off"),
       unsigned_integer<T>("data_seed", &T::data_seed,
                           "the data order (which sequences each step reads), apart from `seed`"),
       text<T>(
           "corpus", &T::corpus, "path",
           "a folder of plain-text files, entries separated by lines holding `%`; every 20th entry is held out; both "
           "splits must hold a sequence. The default is Debian's `fortunes` package (`scripts/setup-deps`)"),
       integer<T>(
           "stats_ep", &T::stats_ep, 1, 65536,
           "with `parallel.ep: 1`: `s'` in the records is that of the hottest of this many expert-parallel ranks "
           "(experts split evenly in order); with `parallel.ep` N > 1 it is N (leave it out)")}};
  return s;
}

void parse_train(const YAML::Node& node, const YAML::Node& workload, const std::string& dir, ExperimentConfig& c,
                 Problems& p) {
  TrainConfig& t = c.train;
  t.enabled = true;
  MapReader r(node, "train", p);
  read_section(train_keys(), r, t);
  r.check_unknown();
  t.corpus = resolve_path(t.corpus, dir);
  if (t.min_lr > t.lr) p.add(r.child("min_lr"), "train.min_lr", "exceeds train.lr");
  if (c.model.vocab == 0)
    p.add(node, "train", "training needs a language model: set model.vocab (256 for the byte tokenizer)");
  // Training learns its routing: the router's own top-k decides.
  if (!workload.IsDefined() || workload.IsNull() || !workload["kind"].IsDefined())
    c.workload.kind = "router";
  else if (c.workload.kind != "router")
    p.add(workload["kind"], "workload.kind", "training learns its routing: use 'router' (or leave workload out)");
  if (c.ep > 1) {
    // Real ranks (memfine launch) measure s' on themselves: the hottest of parallel.ep.
    if (r.child("stats_ep").IsDefined() && t.stats_ep != c.ep)
      p.add(r.child("stats_ep"), "train.stats_ep",
            "parallel.ep is " + std::to_string(c.ep) + ": real ranks measure s' themselves; leave stats_ep out");
    t.stats_ep = c.ep;
  }
  if (c.model.experts % t.stats_ep != 0)
    p.add(r.child("stats_ep"), "train.stats_ep",
          "experts (" + std::to_string(c.model.experts) + ") is not divisible by stats_ep (" +
              std::to_string(t.stats_ep) + ")");
}

}  // namespace memfine
