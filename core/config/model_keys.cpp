#include "core/config/sections.h"

namespace memfine {

const Section<ModelConfig>& model_keys() {
  using namespace fields;
  using M = ModelConfig;
  const std::string whole = "a whole model (projections: `memfine project`, `paper:`): ";
  static const Section<M> s{
      "model",
      {integer<M>("layers", &M::layers, 1, 4096, "decoder layers"),
       integer<M>("hidden", &M::hidden, 1, 65536, "hidden size `h`"),
       integer<M>("heads", &M::heads, 1, 1024, "attention heads; divisible by `kv_heads` (grouped-query attention)"),
       integer<M>("kv_heads", &M::kv_heads, 1, 1024, "key and value heads"),
       integer<M>("head_dim", &M::head_dim, 1, 4096, "width of a head (MLA: query-key width, rotary part included)"),
       integer<M>("ffn_hidden", &M::ffn_hidden, 1, 262144, "routed expert's SwiGLU width `g_e`"),
       integer<M>("experts", &M::experts, 1, 65536, "routed experts over all expert-parallel ranks"),
       integer<M>("topk", &M::topk, 1, 65536, "experts per token; at most `experts`"),
       integer<M>("seq", &M::seq, 1, 1 << 20,
                  "tokens per sequence (the paper's `s`); `seq * micro_batch` tokens per rank, at most 16,777,216"),
       integer<M>("micro_batch", &M::micro_batch, 1, 65536, "sequences per rank (the paper's `b`)"),
       integer<M>("shared_experts", &M::shared_experts, 0, 64,
                  "a shared expert of width `shared_experts * ffn_hidden`; 0 = none"),
       choice<M>("attention", &M::attention, {"gqa", "mla", "none"},
                 "causal grouped-query attention, DeepSeek's multi-head latent attention (projections only), or "
                 "MoE-only layers"),
       integer<M>(
           "vocab", &M::vocab, 0, 1 << 20,
           "a language model over this many token ids (at least 256: the byte tokenizer): embedding, output head "
           "tied to it, next-token cross-entropy; needs `train:`. 0: the benchmark's stand-in (random hidden states "
           "in, a regression target out). A projection counts its embedding and head"),
       when_set(integer<M>("dense_layers", &M::dense_layers, 0, 4096,
                           whole + "leading layers with a dense SwiGLU of `dense_ffn_hidden` instead of experts"),
                &M::dense_layers),
       when_set(integer<M>("dense_ffn_hidden", &M::dense_ffn_hidden, 0, 1 << 20, whole + "their SwiGLU width"),
                &M::dense_ffn_hidden),
       when_set(integer<M>("mtp_layers", &M::mtp_layers, 0, 1024,
                           whole + "DeepSeek's multi-token prediction modules (a MoE layer, a projection, the head)"),
                &M::mtp_layers),
       when_set(integer<M>("v_head_dim", &M::v_head_dim, 0, 4096, whole + "a value head's width; 0: `head_dim`"),
                &M::v_head_dim),
       when_set(integer<M>("q_lora_rank", &M::q_lora_rank, 0, 1 << 20, whole + "MLA's low-rank query width (0: none)"),
                &M::q_lora_rank),
       when_set(integer<M>("kv_lora_rank", &M::kv_lora_rank, 0, 1 << 20, whole + "MLA's low-rank key-value width"),
                &M::kv_lora_rank),
       when_set(integer<M>("rope_head_dim", &M::rope_head_dim, 0, 4096, whole + "MLA's shared rotary key width"),
                &M::rope_head_dim),
       when_set(boolean<M>("qk_norm", &M::qk_norm,
                           whole + "a per-head RMSNorm of queries and keys (Qwen3): its inputs are kept for backward"),
                &M::qk_norm),
       when_set(integer<M>("sliding_window", &M::sliding_window, 0, 1 << 24,
                           whole + "tokens a windowed layer's queries attend to (gpt-oss: 128); 0: none"),
                &M::sliding_window),
       when_set(number<M>("sliding_share", &M::sliding_share, 0, 1,
                          whole + "the share of layers with the window (gpt-oss alternates: 0.5)"),
                &M::sliding_share),
       when_set(boolean<M>("attention_sinks", &M::attention_sinks,
                           whole + "learnable per-head softmax sinks (gpt-oss): attention at the hardware's sink "
                                   "curve where the framework runs Transformer Engine's kernel for them"),
                &M::attention_sinks),
       when_set(boolean<M>("expert_bias", &M::expert_bias,
                           whole + "biases in the experts' FC1 and FC2 (gpt-oss): the passes the framework's "
                                   "code makes to apply them outside the GEMMs"),
                &M::expert_bias),
       when_set(number<M>("glu_limit", &M::glu_limit, 0, 1e6,
                          whole + "the experts' GLU inputs clamped at this value (gpt-oss's swiglu_limit: 7); 0: "
                                  "none. The passes the framework's code makes to clamp them outside the fused "
                                  "activation"),
                &M::glu_limit),
       when_set(number<M>("rope_mscale", &M::rope_mscale, 0.01, 100,
                          whole + "YaRN's scale of the rotary cos and sin (gpt-oss: 0.1 ln 32 + 1 = 1.3466; "
                                  "DeepSeek-V3's cancels to 1); 1: none. Megatron-Core runs RoPE unfused where it "
                                  "is not 1"),
                &M::rope_mscale)}};
  return s;
}

void check_model(const ModelConfig& m, MapReader& r) {
  Problems& p = r.problems();
  if (m.topk > m.experts)
    p.add(r.child("topk"), r.key("topk"),
          "topk (" + std::to_string(m.topk) + ") exceeds experts (" + std::to_string(m.experts) + ")");
  if (m.tokens() > (int64_t(1) << 24))
    p.add(r.child("seq"), r.key("seq"),
          "seq x micro_batch (" + std::to_string(m.tokens()) + " tokens per rank) exceeds 16777216");
  if (m.heads % m.kv_heads != 0)
    p.add(r.child("kv_heads"), r.key("kv_heads"),
          "heads (" + std::to_string(m.heads) + ") is not divisible by kv_heads (" + std::to_string(m.kv_heads) + ")");
  if (m.dense_layers >= m.layers)
    p.add(r.child("dense_layers"), r.key("dense_layers"),
          "must be below layers (" + std::to_string(m.layers) + "): a MoE model has MoE layers");
  if ((m.sliding_window > 0) != (m.sliding_share > 0))
    p.add(r.child(m.sliding_window > 0 ? "sliding_window" : "sliding_share"), r.key("sliding_share"),
          "sliding_window and sliding_share go together: the window's width and the share of layers that have it");
  if (m.dense_layers > 0 && m.dense_ffn_hidden == 0)
    p.add(r.child("dense_layers"), r.key("dense_ffn_hidden"), "missing: dense_layers > 0 needs their width");
}

void parse_model(const YAML::Node& node, ModelConfig& m, Problems& p) {
  MapReader r(node, "model", p);
  read_section(model_keys(), r, m);
  r.check_unknown();
  check_model(m, r);
}

std::vector<std::string> whole_model_keys(const ModelConfig& m) {
  std::vector<std::string> out;
  if (m.attention == "mla") out.push_back("attention");
  for (const auto& f : model_keys().fields)
    if (f.at_default && !f.at_default(m)) out.push_back(f.key);
  return out;
}

}  // namespace memfine
