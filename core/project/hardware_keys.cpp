// A hardware preset's keys (experiments/project/hardware.yaml, or a project file's `hardware:` map).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "core/config/sections.h"
#include "core/project/config.h"
#include "core/project/rates.h"

namespace memfine {

namespace {

// The least rate a key takes (GB/s, TFLOP/s): a rate of 0 would divide by zero, a rate near it
// would print times with hundreds of digits; not a machine either way. A loaded CPU's measured
// expert GEMM at a few rows (scripts/project_here.py) runs near a GFLOP/s, so the floor lies far
// below that.
constexpr double kLeastRate = 1e-6;
// A grid's or curve's values (rows, head dims, shapes) and rates at most these.
constexpr double kMostShape = 1e12, kMostRate = 1e6;

// A list of at most 65536 rows of `width` numbers each, every one finite and above 0, the last (a
// rate) at least kLeastRate and at most kMostRate, the others at most kMostShape; empty if the node
// is not one.
std::vector<std::vector<double>> positive_rows(const YAML::Node& c, size_t width) {
  std::vector<std::vector<double>> rows;
  if (!c.IsSequence() || c.size() == 0 || c.size() > 65536) return {};
  for (const YAML::Node& row : c) {
    if (!row.IsSequence() || row.size() != width) return {};
    std::vector<double> x;
    try {
      for (const YAML::Node& v : row) x.push_back(v.as<double>());
    } catch (const YAML::Exception&) {
      return {};
    }
    if (std::any_of(x.begin(), x.end(), [](double v) { return !std::isfinite(v) || v <= 0 || v > kMostShape; }))
      return {};
    if (x.back() < kLeastRate || x.back() > kMostRate) return {};
    rows.push_back(std::move(x));
  }
  return rows;
}

// A key holding a list of rows of `width` numbers above 0: `keep` checks them and stores them in the
// hardware (false: the key is refused, saying what it `expects`).
using KeepRows = std::function<bool(const std::vector<std::vector<double>>&, Hardware&)>;
// Each dispatcher's keys: its prefix and what its rate inside a node is.
struct DispatcherKeys {
  const char* prefix;
  const char* nvlink_help;
};
const std::map<Dispatcher, DispatcherKeys>& dispatcher_keys() {
  static const std::map<Dispatcher, DispatcherKeys> k = {
      {Dispatcher::AllToAll,
       {"all_to_all", "NCCL's all-to-all (dispatcher `alltoall`), its measured rate inside a node (0: the link's)"}},
      {Dispatcher::DeepEp, {"deepep", "DeepEP's dispatch and combine, measured, inside a node (0: the link's)"}},
      {Dispatcher::HybridEp, {"hybridep", "HybridEP's dispatch and combine, measured, inside a node (0: the link's)"}}};
  return k;
}

// `<prefix>_nvlink_gb_s` or `<prefix>_network_gb_s`: a dispatcher's rate in Hardware::dispatch_rates.
Field<Hardware> rate_key(Dispatcher d, bool nvlink) {
  const DispatcherKeys& k = dispatcher_keys().at(d);
  const std::string key = std::string(k.prefix) + (nvlink ? "_nvlink_gb_s" : "_network_gb_s");
  auto member = nvlink ? &DispatchRate::nvlink_gb_s : &DispatchRate::network_gb_s;
  return {key,
          "number, " + fields::range(0, 1e6),
          "0",
          nvlink ? k.nvlink_help : "and across nodes (0: the link's)",
          [key, d, member](MapReader& r, Hardware& h) { r.read_number(key, h.dispatch_rates[d].*member, 0, 1e6); },
          [d, member](const Hardware& h) {
            auto it = h.dispatch_rates.find(d);
            return nlohmann::json(it == h.dispatch_rates.end() ? 0.0 : it->second.*member);
          }};
}

Field<Hardware> rows_key(const std::string& key, const std::string& type, const std::string& help, size_t width,
                         const std::string& expects, KeepRows keep, std::function<nlohmann::json(const Hardware&)> write) {
  return {key, type, "none", help,
          [=](MapReader& r, Hardware& h) {
            YAML::Node c = r.child(key);
            if (!c.IsDefined()) return;
            const auto rows = positive_rows(c, width);
            if (rows.empty() || !keep(rows, h)) r.problems().add(c, r.key(key), expects);
          },
          std::move(write)};
}

// A key holding [x, y] pairs (y TFLOP/s unless named), x rising, into `curve` of the hardware.
using Curve = std::vector<std::pair<double, double>> Hardware::*;
Field<Hardware> curve_key(const std::string& key, const std::string& x, Curve curve, const std::string& help,
                          const std::string& y = "TFLOP/s") {
  return rows_key(
      key, "list of `[" + x + ", " + y + "]`", help, 2,
      "expected a list of [" + x + ", " + y + "] pairs, " + x + " rising, both above 0 (" + y + " at least 1e-06)",
      [curve](const std::vector<std::vector<double>>& rows, Hardware& h) {
        (h.*curve).clear();
        for (size_t i = 1; i < rows.size(); ++i)
          if (rows[i][0] <= rows[i - 1][0]) return false;
        for (const auto& r : rows) (h.*curve).push_back({r[0], r[1]});
        return true;
      },
      [curve](const Hardware& h) { return nlohmann::json(h.*curve); });
}

// `flex_attention_head_dim_curve`: [head dim, TFLOP/s] pairs, head dims rising.
Field<Hardware> flex_curve_key() {
  return curve_key("flex_attention_head_dim_curve", "head dim", &Hardware::flex_attention_head_dim_curve,
                   "PyTorch's FlexAttention, forward and backward, measured at rising query and key head dims "
                   "(TFLOP/s of three times a causal forward's FLOPs): a file with framework.flex_attention takes "
                   "it at the model's head dim, which must lie within the curve's (log-linear between its points)");
}

// `grouped_gemm_curve`: [rows, TFLOP/s] pairs, rows rising.
Field<Hardware> grouped_curve_key() {
  return curve_key("grouped_gemm_curve", "rows", &Hardware::grouped_gemm_curve,
                   "the grouped expert GEMM's rate measured at rising rows per expert, interpolated log-linearly in "
                   "rows (flat beyond its ends); replaces the two rates and the knee");
}

// `grouped_gemm_work_curve`: [GFLOP, TFLOP/s] pairs, work rising.
Field<Hardware> grouped_work_curve_key() {
  return curve_key("grouped_gemm_work_curve", "GFLOP", &Hardware::grouped_gemm_work_curve,
                   "the grouped expert GEMM's best measured rate at rising work of one layer's call (GFLOP of its "
                   "local experts' FC1 and FC2 forward, rows split evenly), interpolated log-linearly in work (flat "
                   "beyond its ends): it caps the rate by rows per expert, since a call of less work (few rows, few or "
                   "narrow experts) fills the GPU less");
}

// Each FP8 recipe's curve (rates.h fp8_recipes): [rows, FP8 over bf16] pairs, rows rising.
Field<Hardware> fp8_curve_key(const Fp8Recipe& r) {
  const std::string precision = r.precision;
  return curve_key(r.key, "rows", r.curve,
                   std::string("a linear's GEMM in FP8 (") + r.scaling +
                       ", bf16 out) over the same GEMM in bf16, both measured at the same shapes at rising rows: a run "
                       "at `precision: " +
                       precision +
                       "` divides each of its linears' GEMM times at the bf16 rate by it at "
                       "the GEMM's rows (log-linear in rows, flat beyond its ends); none: the preset cannot price " +
                       precision,
                   "FP8 / bf16");
}

// `attention_head_dim_curve`: [head dim, TFLOP/s] pairs, head dims rising.
Field<Hardware> head_dim_curve_key() {
  return curve_key("attention_head_dim_curve", "head dim", &Hardware::attention_head_dim_curve,
                   "the attention kernel's rate at rising head dims (one sequence length): attention_tflops, "
                   "taken at head dim 128, is scaled by its ratio at the model's head dim to that at 128, "
                   "interpolated log-linearly (flat beyond its ends)");
}

// `sink_attention_head_dim_curve`: [head dim, TFLOP/s] pairs, head dims rising.
Field<Hardware> sink_curve_key() {
  return curve_key("sink_attention_head_dim_curve", "head dim", &Hardware::sink_attention_head_dim_curve,
                   "the rate of the attention kernel Transformer Engine runs for learnable softmax sinks (gpt-oss), "
                   "from the benchmark of attention_head_dim_curve: for a model with sinks under a framework that "
                   "runs it, attention_tflops is scaled by its value at the model's head dim over "
                   "attention_head_dim_curve's at 128 (needs that curve)");
}

// `gemm_table`: [m, n, k, TFLOP/s] rows covering every combination of their m, n and k once.
Field<Hardware> table_key() {
  return rows_key(
      "gemm_table", "list of `[m, n, k, TFLOP/s]`",
      "a dense bf16 GEMM's rate by shape (rows m, outputs n, inputs k) over a full grid of them, interpolated "
      "linearly in the logarithms of m, n and k (flat beyond the grid); replaces gemm_tflops",
      4, "expected a list of [m, n, k, TFLOP/s], every combination of its m, n and k once, all above 0 (rates 0.001 to 1e6)",
      [](const std::vector<std::vector<double>>& rows, Hardware& h) {
        h.gemm_table = {};
        GemmTable t;
        auto axis = [&](size_t j) {
          std::vector<double> a;
          for (const auto& x : rows) a.push_back(x[j]);
          std::sort(a.begin(), a.end());
          a.erase(std::unique(a.begin(), a.end()), a.end());
          return a;
        };
        t.m = axis(0), t.n = axis(1), t.k = axis(2);
        if (rows.size() != t.m.size() * t.n.size() * t.k.size()) return false;
        t.tflops.assign(rows.size(), 0);
        auto at = [](const std::vector<double>& a, double v) {
          return size_t(std::lower_bound(a.begin(), a.end(), v) - a.begin());
        };
        for (const auto& x : rows) {
          double& cell = t.tflops[(at(t.m, x[0]) * t.n.size() + at(t.n, x[1])) * t.k.size() + at(t.k, x[2])];
          if (cell != 0) return false;  // each shape once
          cell = x[3];
        }
        h.gemm_table = std::move(t);
        return true;
      },
      [](const Hardware& h) {
        nlohmann::json j = nlohmann::json::array();
        const GemmTable& t = h.gemm_table;
        for (size_t i = 0; i < t.m.size(); ++i)
          for (size_t a = 0; a < t.n.size(); ++a)
            for (size_t b = 0; b < t.k.size(); ++b)
              j.push_back({t.m[i], t.n[a], t.k[b], t.tflops[(i * t.n.size() + a) * t.k.size() + b]});
        return j;
      });
}

// `assumed`: the preset's own keys whose values are assumed, not measured, each once.
Field<Hardware> assumed_key() {
  return {"assumed",
          "list of this map's keys",
          "[]",
          "the keys whose values are assumed, not measured (an answer on the preset names them)",
          [](MapReader& r, Hardware& h) {
            const YAML::Node n = r.child("assumed");
            if (!n.IsDefined() || n.IsNull()) return;
            auto refuse = [&](const std::string& why) { r.problems().add(n, r.key("assumed"), why); };
            if (!n.IsSequence()) return refuse("expected a list of this map's keys, got '" + MapReader::dump(n) + "'");
            h.assumed.clear();
            for (const YAML::Node& e : n) {
              const std::string key = e.IsScalar() ? e.Scalar() : MapReader::dump(e);
              const auto& f = hardware_keys().fields;
              if (key == "assumed" ||
                  std::none_of(f.begin(), f.end(), [&](const Field<Hardware>& x) { return x.key == key; }))
                return refuse("'" + key + "' is not a hardware key");
              if (std::find(h.assumed.begin(), h.assumed.end(), key) != h.assumed.end())
                return refuse(key + " given twice");
              h.assumed.push_back(key);
            }
          },
          [](const Hardware& h) { return nlohmann::json(h.assumed); },
          [](const Hardware& h) { return h.assumed.empty(); }};
}

}  // namespace

bool Hardware::has_rates() const {
  return (gemm_tflops > 0 || !gemm_table.empty()) && attention_tflops > 0 &&
         (!grouped_gemm_curve.empty() || (grouped_gemm_tflops > 0 && grouped_gemm_small_tflops > 0));
}

double Hardware::dispatcher_gb_s(Dispatcher dispatcher, bool in_node) const {
  auto it = dispatch_rates.find(dispatcher);
  if (it == dispatch_rates.end()) return 0;
  return in_node ? it->second.nvlink_gb_s : it->second.network_gb_s;
}

const Section<Hardware>& hardware_keys() {
  using namespace fields;
  using H = Hardware;
  static const Section<H> s{
      "hardware",
      {number<H>("memory_gb", &H::memory_gb, 1e-3, 1e6,
                 "a GPU's memory as PyTorch reports its total (total_memory), GB of 1e9 bytes (required)"),
       integer<H>("gpus_per_node", &H::gpus_per_node, 1, 1 << 16, "GPUs a node's fast link (NVLink) joins"),
       number<H>("bf16_dense_tflops", &H::bf16_dense_tflops, kLeastRate, 1e6,
                 "the datasheet's dense bf16 peak: MFU's denominator, no rate divides by it"),
       number<H>("gemm_tflops", &H::gemm_tflops, kLeastRate, 1e6, "a large dense bf16 GEMM's measured rate"),
       number<H>("attention_tflops", &H::attention_tflops, kLeastRate, 1e6,
                 "the attention kernel's measured rate (forward and backward, head dim 128)"),
       number<H>("grouped_gemm_tflops", &H::grouped_gemm_tflops, kLeastRate, 1e6,
                 "grouped expert GEMMs at large rows per expert"),
       number<H>("grouped_gemm_small_tflops", &H::grouped_gemm_small_tflops, kLeastRate, 1e6, "and at small ones"),
       number<H>("grouped_gemm_knee_rows", &H::grouped_gemm_knee_rows, 1, 1e9,
                 "rows per expert where the large rate is reached (linear below)"),
       head_dim_curve_key(),
       sink_curve_key(),
       flex_curve_key(),
       grouped_curve_key(),
       grouped_work_curve_key(),
       fp8_curve_key(fp8_recipes()[0]),
       fp8_curve_key(fp8_recipes()[1]),
       fp8_curve_key(fp8_recipes()[2]),
       table_key(),
       number<H>("nvlink_gb_s", &H::nvlink_gb_s, kLeastRate, 1e6, "inside a node, per GPU and direction"),
       number<H>("network_gb_s", &H::network_gb_s, kLeastRate, 1e6, "across nodes, per GPU and direction"),
       number<H>("nvlink_latency_us", &H::nvlink_latency_us, 0, 1e6, "a message's latency inside a node"),
       number<H>("network_latency_us", &H::network_latency_us, 0, 1e6, "and across nodes"),
       number<H>("host_to_device_gb_s", &H::host_to_device_gb_s, kLeastRate, 1e6, "offloading's copies back"),
       number<H>("device_to_host_gb_s", &H::device_to_host_gb_s, kLeastRate, 1e6, "offloading's copies out"),
       number<H>("hbm_gb_s", &H::hbm_gb_s, kLeastRate, 1e7,
                 "what memory-bound kernels (norms, SwiGLU's product, permutes, the loss) move"),
       number<H>("host_forward_launch_us", &H::host_forward_launch_us, 0, 1e6,
                 "the host's time to launch a kernel from a framework's Python forward (0: launches not priced)"),
       number<H>("host_backward_launch_us", &H::host_backward_launch_us, 0, 1e6,
                 "and from the autograd engine in backward"),
       number<H>("sms", &H::sms, 0, 1e6,
                 "the GPU's streaming multiprocessors: an overlapped dispatcher's SMs slow the compute beside it "
                 "(0: not priced)"),
       rate_key(Dispatcher::AllToAll, true),
       rate_key(Dispatcher::AllToAll, false),
       rate_key(Dispatcher::DeepEp, true),
       rate_key(Dispatcher::DeepEp, false),
       rate_key(Dispatcher::HybridEp, true),
       rate_key(Dispatcher::HybridEp, false),
       assumed_key()}};
  return s;
}

Hardware read_hardware(const YAML::Node& n, const std::string& path, Problems& p, bool in_presets) {
  Hardware h;
  h.name = path;
  if (!n.IsMap()) {
    p.add(n, path, "expected a map of hardware keys");
    return h;
  }
  MapReader r(n, path, p);
  if (in_presets) r.child("extends");  // merged by core/project/presets.cpp
  read_section(hardware_keys(), r, h);
  r.check_unknown();
  if (!n["memory_gb"].IsDefined()) p.add(n, r.key("memory_gb"), "missing");
  if (!h.sink_attention_head_dim_curve.empty() && h.attention_head_dim_curve.empty())
    p.add(r.child("sink_attention_head_dim_curve"), r.key("sink_attention_head_dim_curve"),
          "needs attention_head_dim_curve: its rates are taken over that curve's at head dim 128");
  return h;
}

}  // namespace memfine
