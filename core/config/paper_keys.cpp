#include <filesystem>

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

void parse_paper(const YAML::Node& node, const std::string& dir, PaperScaleConfig& ps, Problems& p) {
  ps.enabled = true;
  MapReader r(node, "paper", p);
  read_section(paper_keys(), r, ps);
  r.check_unknown();
  if (!ps.figure2.empty()) {
    ps.figure2 = resolve_path(ps.figure2, dir);
    if (!std::filesystem::exists(ps.figure2))
      p.add(r.child("figure2"), "paper.figure2", "cannot read '" + ps.figure2 + "'");
  } else if (ps.received == "figure2") {
    p.add(node, "paper.figure2", "received: figure2 needs the Figure 2 CSV");
  }
}

}  // namespace memfine
