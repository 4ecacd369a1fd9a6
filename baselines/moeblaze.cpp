// Baseline: MoEBlaze-style buffer-free experts (arXiv 2601.05296; SonicMoE does the same in
// code): everything outside the routed experts is stored as in no_recompute, and the experts run
// buffer-free (core/moe/buffer_free.h): index-only dispatch, rows read through their index block
// by block, the weighted combine written into the output, z = [a | b] kept and SiLU(a) * b
// recomputed, the router gradient as a row reduction. `keep_act: true` keeps SiLU(a) * b too (readings of the paper
// disagree on whether it does). On real ranks the rows that arrived are kept once per rank.
#include "core/moe/expert_storage.h"
#include "core/strategy/strategy.h"

namespace memfine {
namespace {

class MoeBlaze : public Strategy {
 public:
  explicit MoeBlaze(StrategySpec spec) : Strategy(std::move(spec)) {
    keep_act_ = spec_.value("keep_act").get<bool>();
    block_rows_ = spec_.value("block_rows").get<int64_t>();
  }
  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    return layer_forward(x, in, *this, moe_stored);
  }
  ExpertPath expert() const override { return expert_path(ExpertStorage::BufferFree, keep_act_, block_rows_); }
  std::optional<StrategyShape> memory_shape() const override {
    StrategyShape s;
    s.experts = ExpertStorage::BufferFree;
    s.keep_act = keep_act_;
    s.block_rows = block_rows_;
    return s;
  }
  // Under the paper's model (Eq. 2): one pass, fewer widths kept per received row.
  std::optional<PaperChunks> paper_chunks(double, double) const override {
    PaperChunks c;
    c.row_h = 1, c.row_g = keep_act_ ? 3 : 2;
    return c;
  }

 private:
  bool keep_act_ = false;
  int64_t block_rows_ = 256;
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "moeblaze",
    "MoEBlaze-style buffer-free experts: index-only dispatch, z kept and SiLU recomputed, combine into the output",
    {bool_param("keep_act", "also keep SiLU(a)*b instead of recomputing it", false),
     int_param("block_rows", "rows per block of an expert's forward and backward, the tile of a fused kernel", 256, 1,
               int64_t(1) << 30)},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new MoeBlaze(s)); }});

}  // namespace
}  // namespace memfine
