#include "core/config/sections.h"

namespace memfine {

const Section<ModelConfig>& model_keys() {
  using namespace fields;
  using M = ModelConfig;
  static const Section<M> s{
      "model",
      {integer<M>("layers", &M::layers, 1, 4096, "decoder layers"),
       integer<M>("hidden", &M::hidden, 1, 65536, "hidden size `h`"),
       integer<M>("heads", &M::heads, 1, 1024, "attention heads; divisible by `kv_heads` (grouped-query attention)"),
       integer<M>("kv_heads", &M::kv_heads, 1, 1024, "key and value heads"),
       integer<M>("head_dim", &M::head_dim, 1, 4096, "width of a head"),
       integer<M>("ffn_hidden", &M::ffn_hidden, 1, 262144, "routed expert's SwiGLU width `g_e`"),
       integer<M>("experts", &M::experts, 1, 65536, "routed experts over all expert-parallel ranks"),
       integer<M>("topk", &M::topk, 1, 65536, "experts per token; at most `experts`"),
       integer<M>("seq", &M::seq, 1, 1 << 20,
                  "tokens per sequence (the paper's `s`); `seq * micro_batch` tokens per rank, at most 16,777,216"),
       integer<M>("micro_batch", &M::micro_batch, 1, 65536, "sequences per rank (the paper's `b`)"),
       integer<M>("shared_experts", &M::shared_experts, 0, 64,
                  "a shared expert of width `shared_experts * ffn_hidden`; 0 = none"),
       choice<M>("attention", &M::attention, {"gqa", "none"}, "causal grouped-query attention, or MoE-only layers"),
       integer<M>(
           "vocab", &M::vocab, 0, 1 << 20,
           "a language model over this many token ids (at least 256: the byte tokenizer): embedding, output head "
           "tied to it, next-token cross-entropy; needs `train:`. 0: the benchmark's stand-in (random hidden states "
           "in, a regression target out)")}};
  return s;
}

void parse_model(const YAML::Node& node, ModelConfig& m, Problems& p) {
  MapReader r(node, "model", p);
  read_section(model_keys(), r, m);
  r.check_unknown();
  if (m.topk > m.experts)
    p.add(r.child("topk"), "model.topk",
          "topk (" + std::to_string(m.topk) + ") exceeds experts (" + std::to_string(m.experts) + ")");
  if (m.tokens() > (int64_t(1) << 24))
    p.add(r.child("seq"), "model.seq",
          "seq x micro_batch (" + std::to_string(m.tokens()) + " tokens per rank) exceeds 16777216");
  if (m.heads % m.kv_heads != 0)
    p.add(r.child("kv_heads"), "model.kv_heads",
          "heads (" + std::to_string(m.heads) + ") is not divisible by kv_heads (" + std::to_string(m.kv_heads) + ")");
}

}  // namespace memfine
