#include "core/workload/workload.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core/util/format.h"

namespace memfine {

std::vector<std::string> workload_kinds() { return {"balanced", "zipf", "lognormal", "hot", "trace", "router"}; }

namespace {

// Portable normal sampling (std::normal_distribution differs between standard libraries).
double normal(std::mt19937_64& rng) {
  const double u1 = (double(rng() >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (double(rng() >> 11) + 0.5) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<int64_t> shuffled_ids(int64_t n, std::mt19937_64& rng) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(ids[i], ids[rng() % uint64_t(i + 1)]);
  return ids;
}

// Integer counts proportional to `weights`, summing to `total`, none above `cap`: water-filling
// for the cap, then largest remainders for the rounding.
std::vector<int64_t> counts_from_weights(const std::vector<double>& weights, int64_t total, int64_t cap) {
  const size_t n = weights.size();
  std::vector<double> share(n, 0.0);
  std::vector<bool> capped(n, false);
  double left = double(total);
  for (size_t round = 0; round <= n; ++round) {
    double wsum = 0;
    for (size_t e = 0; e < n; ++e)
      if (!capped[e]) wsum += weights[e];
    bool changed = false;
    for (size_t e = 0; e < n; ++e) {
      if (capped[e]) continue;
      share[e] = wsum > 0 ? left * weights[e] / wsum : 0.0;
      if (share[e] > double(cap)) {
        share[e] = double(cap);
        capped[e] = true;
        left -= double(cap);
        changed = true;
      }
    }
    if (!changed) break;
  }
  std::vector<int64_t> counts(n);
  int64_t sum = 0;
  std::vector<std::pair<double, size_t>> rem;
  for (size_t e = 0; e < n; ++e) {
    counts[e] = int64_t(std::floor(share[e]));
    sum += counts[e];
    rem.emplace_back(share[e] - double(counts[e]), e);
  }
  std::stable_sort(rem.begin(), rem.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = 0; sum < total; i = (i + 1) % n) {
    if (counts[rem[i].second] < cap) ++counts[rem[i].second], ++sum;
  }
  return counts;
}

}  // namespace

namespace {
// A whole integer field ("1.9", "1e3" and "8\\0junk" are not): the trace counts rows exactly.
bool parse_int(const std::string& text, int64_t& out) {
  const char* s = text.c_str();
  const char* stop = s + text.size();
  while (*s == ' ') ++s;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || errno == ERANGE) return false;
  while (*end == ' ' || *end == '\r') ++end;
  if (end != stop) return false;  // strtoll stops at a NUL byte: the field must end there too
  out = v;
  return true;
}
}  // namespace

namespace {

// A trace file parsed: step -> layer -> its rows (expert, tokens), in memory in proportion to the
// file (a file without a step column is all step 0), and where its largest expert id is (checked
// against a model's experts when read).
struct LayerRows {
  std::vector<std::pair<int64_t, int64_t>> rows;
  int64_t tokens = 0;
  int first_line = 0;
};
struct ParsedTrace {
  std::map<int64_t, std::map<int64_t, LayerRows>> by_step;
  int64_t max_expert = -1;
  int max_expert_line = 0;
};

ParsedTrace parse_trace(const std::string& path) {
  ParsedTrace t;
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read trace file '" + path + "': " + std::strerror(errno));
  std::string line;
  int lineno = 0, columns = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    if (columns == 0) columns = int(cells.size());
    if (lineno == 1 && line.find("layer") != std::string::npos) continue;  // header
    if (int(cells.size()) != columns || (columns != 3 && columns != 4))
      throw std::invalid_argument(path + ":" + std::to_string(lineno) +
                                  ": expected 'layer,expert,tokens' or 'step,layer,expert,tokens' on every line");
    int64_t v[4] = {0, 0, 0, 0};
    for (int k = 0; k < columns; ++k)
      if (!parse_int(cells[size_t(k)], v[4 - columns + k]))
        throw std::invalid_argument(path + ":" + std::to_string(lineno) + ": not integers: '" + printable(line) + "'");
    const int64_t step = v[0], layer = v[1], e = v[2], n = v[3];
    const std::string at = path + ":" + std::to_string(lineno) + ": ";
    if (n > (int64_t(1) << 40)) throw std::invalid_argument(at + "tokens " + std::to_string(n) + " is absurd");
    if (e < 0 || n < 0 || step < 0 || layer < 0)
      throw std::invalid_argument(at + "step, layer, expert and tokens must be >= 0");
    if (e > t.max_expert) t.max_expert = e, t.max_expert_line = lineno;
    LayerRows& l = t.by_step[step][layer];
    if (l.rows.empty()) l.first_line = lineno;
    l.rows.emplace_back(e, n);
    l.tokens += n;
    // A layer's assignments past 2^50 overflow what routing tables count in: refused, not wrapped.
    if (l.tokens > (int64_t(1) << 50))
      throw std::invalid_argument(at + "the tokens of step " + std::to_string(step) + ", layer " +
                                  std::to_string(layer) + " add up past 2^50");
  }
  for (const auto& [step, layers] : t.by_step)
    for (const auto& [layer, l] : layers)
      if (l.tokens == 0)
        throw std::invalid_argument(path + ":" + std::to_string(l.first_line) + ": step " + std::to_string(step) +
                                    ", layer " + std::to_string(layer) +
                                    " routes no tokens (its every row is 0): a routing to replay needs some");
  if (t.by_step.empty()) throw std::invalid_argument("trace file '" + path + "' has no rows");
  return t;
}

// Parsed once per file and version: a stepped replay reads it for every layer of every step.
const ParsedTrace& trace_of(const std::string& path) {
  // A regular file of bounded size: /dev/zero or a FIFO would read forever or block.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::invalid_argument("cannot read trace file '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument("trace file '" + path + "' is not a regular file");
  if (st.st_size > (int64_t(1) << 28)) throw std::invalid_argument("trace file '" + path + "' is larger than 256 MiB");
  static std::map<std::string, std::pair<std::pair<int64_t, int64_t>, ParsedTrace>> cache;
  const std::pair<int64_t, int64_t> version{int64_t(st.st_size),
                                            int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  auto it = cache.find(path);
  if (it == cache.end() || it->second.first != version)
    it = cache.insert_or_assign(path, std::make_pair(version, parse_trace(path))).first;
  return it->second.second;
}

}  // namespace

std::vector<int64_t> read_trace(const std::string& path, int64_t layer, int64_t experts, int64_t step) {
  const ParsedTrace& t = trace_of(path);
  if (t.max_expert >= experts)
    throw std::invalid_argument(path + ":" + std::to_string(t.max_expert_line) + ": expert must be in [0, " +
                                std::to_string(experts) + ")");
  // Steps and layers the file lacks cycle through those it has, in order.
  auto pick = [](const auto& m, int64_t key) {
    auto it = m.find(key);
    if (it != m.end()) return it;
    it = m.begin();
    std::advance(it, key % int64_t(m.size()));
    return it;
  };
  std::vector<int64_t> counts(size_t(experts), 0);
  for (const auto& [e, n] : pick(pick(t.by_step, std::max<int64_t>(step, 0))->second, layer)->second.rows)
    counts[size_t(e)] += n;
  return counts;
}

std::string trace_csv(const std::vector<StepRouting>& steps) {
  std::string csv = "step,layer,expert,tokens\n";
  for (const auto& [step, layers] : steps)
    for (size_t l = 0; l < layers.size(); ++l)
      for (size_t e = 0; e < layers[l].size(); ++e)
        csv += std::to_string(step) + "," + std::to_string(l) + "," + std::to_string(e) + "," +
               std::to_string(layers[l][e]) + "\n";
  return csv;
}

int64_t trace_steps(const std::string& path) { return int64_t(trace_of(path).by_step.size()); }

void validate_workload(const WorkloadConfig& w, const ModelConfig& m, int64_t ep, bool training) {
  if (w.kind == "router" && ep != 1 && !training)
    throw std::invalid_argument(
        "kind 'router' (the router's own top-k decides) needs parallel.ep = 1: "
        "an emulated rank's peers need a workload to route their tokens");
  if (w.kind == "hot" && w.hot_experts > m.experts)
    throw std::invalid_argument("hot_experts (" + std::to_string(w.hot_experts) + ") exceeds experts (" +
                                std::to_string(m.experts) + ")");
  if (w.hot_placement != "random" && w.kind != "hot")
    throw std::invalid_argument("hot_placement places the hot experts of kind 'hot'; kind is '" + w.kind + "'");
  if (w.schedule == "trace" && w.kind != "trace")
    throw std::invalid_argument("schedule 'trace' replays a trace's steps: it needs kind 'trace'");
  if (w.kind == "trace") {
    if (w.schedule == "trace" && trace_steps(w.trace) < 2)
      throw std::invalid_argument("schedule 'trace' needs a trace with a step column ('step,layer,expert,tokens'); '" +
                                  w.trace + "' has one step");
    auto c = read_trace(w.trace, 0, m.experts);
    if (std::accumulate(c.begin(), c.end(), int64_t(0)) == 0)
      throw std::invalid_argument("trace file '" + w.trace + "' routes no tokens");
  }
}

std::vector<int64_t> expert_counts(const WorkloadConfig& w, const ModelConfig& m, int64_t ep, int64_t layer,
                                   uint64_t seed, int64_t step) {
  const int64_t E = m.experts;
  const int64_t total_tokens = ep * m.tokens();
  const int64_t total = total_tokens * m.topk;
  // Which experts are popular stays fixed over steps; a schedule only changes how strongly.
  std::mt19937_64 rng(mix_seed(seed, 1000 + layer));
  const double strength = w.intensity(step, layer, m.layers);
  std::vector<double> weight(E, 1.0);
  // Which experts are popular is random (seeded); how popular follows the workload's law.
  const std::vector<int64_t> order = shuffled_ids(E, rng);
  if (w.kind == "zipf") {
    for (int64_t r = 0; r < E; ++r) weight[order[r]] = std::pow(double(r + 1), -w.alpha * strength);
  } else if (w.kind == "lognormal") {
    for (int64_t e = 0; e < E; ++e) weight[e] = std::exp(w.sigma * strength * normal(rng));
  } else if (w.kind == "hot") {
    const int64_t hot = std::min(w.hot_experts, E);
    // With a schedule the hot share moves between balanced (hot/E) and hot_fraction.
    const double frac = double(hot) / double(E) + strength * (w.hot_fraction - double(hot) / double(E));
    std::vector<int64_t> hot_ids(order.begin(), order.begin() + hot);
    if (w.hot_placement == "one_rank") {
      // Drawn from the seed alone (not the layer), so every layer's hot share lands on one rank.
      std::mt19937_64 pick(mix_seed(seed, 999));
      const int64_t local = std::max<int64_t>(1, E / std::max<int64_t>(ep, 1));
      const int64_t base = int64_t(pick() % uint64_t(std::max<int64_t>(1, E / local))) * local;
      for (int64_t i = 0; i < hot; ++i) hot_ids[size_t(i)] = (base + i) % E;
    }
    const double cold = hot == E ? 0.0 : (1.0 - frac) / double(E - hot);
    std::fill(weight.begin(), weight.end(), cold);
    for (int64_t e : hot_ids) weight[size_t(e)] = frac / double(hot);
  } else if (w.kind == "trace") {
    const auto trace = read_trace(w.trace, layer, E, w.schedule == "trace" ? step : 0);
    for (int64_t e = 0; e < E; ++e) weight[e] = double(trace[e]);
    // Replayed exactly when the trace matches this model's assignment total; scaled otherwise.
    if (std::accumulate(trace.begin(), trace.end(), int64_t(0)) == total &&
        *std::max_element(trace.begin(), trace.end()) <= total_tokens)
      return trace;
  }
  return counts_from_weights(weight, total, total_tokens);
}

at::Tensor assign_experts(const std::vector<int64_t>& counts, int64_t total_tokens, int64_t topk, uint64_t seed) {
  // Slot j of the expert-sorted list goes to token j % T in column j / T. Since no expert has more
  // than T slots, a token never gets the same expert twice.
  std::vector<int64_t> slots;
  slots.reserve(size_t(total_tokens * topk));
  for (size_t e = 0; e < counts.size(); ++e) slots.insert(slots.end(), size_t(counts[e]), int64_t(e));
  if (int64_t(slots.size()) != total_tokens * topk)
    throw std::logic_error("assign_experts: counts do not add up to tokens * topk");
  std::mt19937_64 rng(mix_seed(seed, 77));
  const std::vector<int64_t> token_of = shuffled_ids(total_tokens, rng);
  at::Tensor ids = at::empty({total_tokens, topk}, at::kLong);
  auto acc = ids.accessor<int64_t, 2>();
  for (int64_t j = 0; j < total_tokens * topk; ++j) acc[token_of[j % total_tokens]][j / total_tokens] = slots[j];
  return ids;
}

}  // namespace memfine
