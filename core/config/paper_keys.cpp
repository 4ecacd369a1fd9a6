#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/config/sections.h"

namespace memfine {

const Section<PaperScaleConfig>& paper_keys() {
  using namespace fields;
  using P = PaperScaleConfig;
  static const Section<P> s{
      "paper",
      {bytes<P>("device_memory", &P::device_memory, false, "device memory, \"64 GB per GPU\" in the paper"),
       number<P>("alpha", &P::alpha, 1e-9, 1, "Eq. 3: the share of device memory available (not given in the paper)"),
       integer<P>("pipeline", &P::pipeline, 1, 1 << 20, "pipeline stages `p`"),
       integer<P>("layers_per_stage", &P::layers_per_stage, 0, 1 << 20, "0: layers / pipeline"),
       number<P>("bytes_param", &P::bytes_param, 0, 64, "bytes per parameter (bf16 weights: 2)"),
       number<P>("bytes_grad", &P::bytes_grad, 0, 64, "bytes per gradient (fp32: 4)"),
       number<P>("bytes_optimizer", &P::bytes_optimizer, 0, 64,
                 "optimizer bytes per parameter (fp32 master and two moments: 12)"),
       text<P>("received", &P::received, "`figure2` or a number",
               "s': the hottest layer's p99 of the Figure 2 CSV times the local experts, or a number of rows"),
       text<P>("figure2", &P::figure2, "path",
               "the paper's Figure 2 statistics (`layer,p99,...`), relative to the YAML"),
       number<P>("m_g", &P::m_g, 1e-9, 1e6, "stored layers' worth of activations (1 under full recomputation)")}};
  return s;
}

// Figure 2's CSV: a header, then `layer,p99,...` rows of a whole layer and a positive p99; why not
// (FILE:LINE and the row's start) or "".
std::string read_figure2(const std::string& path, std::vector<std::pair<int64_t, double>>& rows) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "'" + path + "' is not a regular file";
  std::ifstream in(path);
  if (!in) return "cannot read '" + path + "'";
  std::string line;
  std::getline(in, line);  // the header
  for (int n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::string layer, p99;
    std::getline(ss, layer, ',');
    std::getline(ss, p99, ',');
    char* end = nullptr;
    const long long l = std::strtoll(layer.c_str(), &end, 10);
    const bool layer_ok = !layer.empty() && *end == '\0' && l >= 0;
    const double v = std::strtod(p99.c_str(), &end);
    if (!layer_ok || p99.empty() || *end != '\0' || !std::isfinite(v) || v <= 0)
      return path + ":" + std::to_string(n) + ": expected `layer,p99_tokens_per_expert,...` (a layer number and "
             "tokens above 0), got '" + line.substr(0, 60) + (line.size() > 60 ? "...'" : "'");
    rows.push_back({int64_t(l), v});
  }
  return rows.empty() ? "'" + path + "' has no rows of Figure 2 (layer,p99_tokens_per_expert,...)" : "";
}

void parse_paper(const YAML::Node& node, const std::string& dir, PaperScaleConfig& ps, Problems& p) {
  ps.enabled = true;
  MapReader r(node, "paper", p);
  read_section(paper_keys(), r, ps);
  r.check_unknown();
  if (!ps.figure2.empty()) {
    ps.figure2 = resolve_path(ps.figure2, dir);
    if (const std::string why = read_figure2(ps.figure2, ps.figure2_rows); !why.empty())
      p.add(r.child("figure2"), "paper.figure2", why);
  } else if (ps.received == "figure2") {
    p.add(node, "paper.figure2", "received: figure2 needs the Figure 2 CSV");
  }
}

}  // namespace memfine
