#include "core/project/pipeline.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <stdexcept>


namespace memfine {

namespace {

// Megatron's two unrolling passes, in its order: "(...)*n" first (no nesting), then "x*n". A layout
// that unrolls beyond kMostUnrolled characters is refused before it is made (a model has far fewer
// layers; repeats multiply across the two passes).
constexpr size_t kMostUnrolled = size_t(1) << 20;
const char* kTooLong = "unrolls to more than 1048576 stages and layers";

std::string unroll(std::string s, std::string& why) {
  auto count_at = [&](size_t& i) {
    size_t j = i;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == i || j - i > 6) return int64_t(-1);
    const int64_t n = std::stoll(s.substr(i, j - i));
    i = j;
    return n;
  };
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '(') {
      const size_t close = s.find(')', i);
      if (close == std::string::npos || close == i + 1 || s.compare(close + 1, 1, "*") != 0) {
        why = "a '(' needs a group and ')*N' after it";
        return "";
      }
      size_t k = close + 2;
      const int64_t n = count_at(k);
      if (n < 0) {
        why = "')*' needs a count after it";
        return "";
      }
      const std::string group = s.substr(i + 1, close - i - 1);
      if (double(group.size()) * double(n) + double(out.size()) > double(kMostUnrolled)) {
        why = kTooLong;
        return "";
      }
      for (int64_t r = 0; r < n; ++r) out += group;
      i = k;
    } else {
      out += s[i++];
    }
  }
  s = out, out.clear();
  for (size_t i = 0; i < s.size();) {
    if (i + 1 < s.size() && s[i + 1] == '*') {
      size_t k = i + 2;
      const int64_t n = count_at(k);
      if (n < 0) {
        why = "'*' needs a count after it";
        return "";
      }
      if (out.size() + size_t(n) > kMostUnrolled) {
        why = kTooLong;
        return "";
      }
      out.append(size_t(n), s[i]);
      i = k;
    } else {
      out += s[i++];
    }
  }
  return out;
}

}  // namespace

std::string parse_pipeline_layout(const std::string& text, std::vector<std::string>& stages) {
  std::string s;
  for (char c : text)
    if (c != ',' && !std::isspace(static_cast<unsigned char>(c))) s += c;
  std::string why;
  s = unroll(s, why);
  if (!why.empty()) return why;
  stages.assign(1, "");
  for (char c : s) {
    if (c == '|') {
      stages.emplace_back();
    } else if (c == 'E' || c == 't' || c == 'm' || c == 'L') {
      stages.back() += c;
    } else {
      return std::string("'") + c + "' is not a layer (E embedding, t decoder layer, m MTP module, L loss)";
    }
  }
  return "";
}

namespace {

// The layout's virtual stages, checked against the model and PP x VPP; or, with no layout, the
// layers in order, ceil(layers / stages) each, the embedding first, MTP and the loss last. `why`
// says what is wrong with a given layout ("" when nothing).
std::vector<std::string> virtual_stages(const ModelConfig& m, const Layout& l, const std::string& layout,
                                        std::string& why) {
  const int64_t stages = l.pp * l.vpp;
  std::vector<std::string> virt;
  if (layout.empty()) {
    const int64_t per = (m.layers + stages - 1) / stages;
    virt.assign(size_t(stages), "");
    for (int64_t i = 0; i < stages; ++i)
      virt[size_t(i)].append(size_t(std::max<int64_t>(0, std::min(per, m.layers - i * per))), 't');
    virt.front().insert(0, "E");
    virt.back().append(size_t(m.mtp_layers), 'm').append("L");
    return virt;
  }
  if ((why = parse_pipeline_layout(layout, virt)).empty()) {
    std::string all;
    for (const auto& st : virt) all += st;
    const auto n = [&](char c) { return int64_t(std::count(all.begin(), all.end(), c)); };
    if (int64_t(virt.size()) != stages)
      why = "has " + std::to_string(virt.size()) + " virtual stages, PP x VPP is " + std::to_string(stages);
    else if (n('t') != m.layers)
      why = "has " + std::to_string(n('t')) + " decoder layers, the model " + std::to_string(m.layers);
    else if (n('m') != m.mtp_layers)
      why = "has " + std::to_string(n('m')) + " MTP modules, the model " + std::to_string(m.mtp_layers);
    else if (n('E') != 1 || all.front() != 'E')
      why = "needs one embedding (E), first";
    else if (n('L') != 1 || all.back() != 'L')
      why = "needs one loss (L), last";
  }
  return virt;
}

}  // namespace

std::string pipeline_layout_problem(const ModelConfig& m, const Layout& l, const std::string& layout) {
  std::string why;
  virtual_stages(m, l, layout, why);
  return why;
}

std::vector<RankShape> rank_shapes(const ModelConfig& m, const Layout& l, const std::string& layout) {
  std::string why;
  const std::vector<std::string> virt = virtual_stages(m, l, layout, why);
  if (!why.empty()) throw std::invalid_argument("pipeline_layout " + why);
  std::vector<RankShape> ranks(size_t(l.pp));
  int64_t layer = 0;  // decoder layers are numbered in virtual-stage order; the dense ones lead
  for (size_t i = 0; i < virt.size(); ++i) {
    RankShape& r = ranks[i % size_t(l.pp)];
    for (char c : virt[i]) {
      if (c == 't') ++(layer++ < m.dense_layers ? r.dense : r.moe);
      if (c == 'm') ++r.mtp;
      if (c == 'E') r.embedding = true;
      if (c == 'L') r.loss = true;
    }
  }
  return ranks;
}

int64_t warmup_passes(const Layout& l, int64_t rank, bool ep_overlap) {
  const int64_t ahead = l.pp - rank - 1;
  return (l.vpp > 1 ? 2 * ahead + (l.vpp - 1) * l.pp : ahead) + (ep_overlap ? 1 : 0);
}

double pipeline_bubble_time(int64_t stages, int64_t virtual_stages, double micro_batch_time) {
  return double(stages - 1) / double(virtual_stages) * micro_batch_time;
}

double pipeline_bubble_time(const std::vector<double>& rank_micro_batch_time, int64_t virtual_stages) {
  if (rank_micro_batch_time.empty()) return 0;
  const double sum = std::accumulate(rank_micro_batch_time.begin(), rank_micro_batch_time.end(), 0.0);
  const double slowest = *std::max_element(rank_micro_batch_time.begin(), rank_micro_batch_time.end());
  return (sum - slowest) / double(virtual_stages);
}

double pipeline_bubble_fraction(int64_t stages, int64_t virtual_stages, int64_t micro_batches) {
  const double idle = double(stages - 1) / double(virtual_stages);
  return idle / (double(micro_batches) + idle);
}

}  // namespace memfine
