#include "core/project/profile.h"

#include <stdexcept>

#include "core/project/profile_parts.h"

namespace memfine {

LayerWidths layer_widths(Profile p, const ModelConfig& m, const StrategyShape& s, double element_bytes,
                         const ProfileOptions& o) {
  switch (p) {
    case Profile::MegatronTe:
      return megatron_widths(m, s, element_bytes, o.again, o.fp8);
    case Profile::FsdpTe:
      return fsdp_widths(m, s, element_bytes);
    case Profile::Torchtitan:
      return torchtitan_widths(m, s, element_bytes, o);
    default:
      return memfine_widths(m, s, element_bytes);
  }
}

LayerWidths memfine_widths(const ModelConfig& m, const StrategyShape& s, double kB) {
  const double h = double(m.hidden), g = double(m.ffn_hidden);
  const double q = double(m.heads * m.head_dim), kv = double(m.kv_heads * m.head_dim);
  // Outside the experts: Eq. 2's s term (its router term apart), the router's probabilities, the
  // shared experts' SwiGLU (input rows aside); this layer recomputes its MoE block without them.
  ProfileParts p;
  p.outside = kB * (5 * h + q + 2 * kv + double(m.experts) + 4 * g * double(m.shared_experts));
  p.layer_input = kB * h;
  p.arrived = kB * h;
  p.dense = kB * (5 * h + q + 2 * kv + 4 * double(m.dense_ffn_hidden));
  // Per received row: the input, output and weighted rows (3 h) and the expert's g widths: z,
  // SiLU(a) and their product (4); moe_act recomputes the last two (z alone); buffer-free experts
  // keep z (and the product with keep_act) and the arrived row once.
  std::string row;
  switch (s.experts) {
    case ExpertStorage::Stored:
      p.row = kB * (3 * h + 4 * g), row = "3h + 4g";
      break;
    case ExpertStorage::ActRecomputed:
      p.row = kB * (3 * h + 2 * g), row = "3h + 2g";
      break;
    case ExpertStorage::BufferFree:
      p.row = kB * (h + (s.keep_act ? 3 : 2) * g), row = s.keep_act ? "h + 3g" : "h + 2g";
      break;
  }
  LayerWidths w = assemble(p, s);
  w.row_text = row;
  // Offloading: attention's core keeps q, k and v (a fused kernel's, no scores); the experts'
  // activation keeps z and SiLU(a) (3g), or z alone where moe_act recomputes the rest.
  add_offload(m, s, kB, s.experts == ExpertStorage::ActRecomputed ? 2 * g : 3 * g, w);
  return w;
}

double loss_bytes_per_token(const ModelConfig& m, Loss loss, double kB) {
  const double V = double(m.vocab), h = double(m.hidden);
  switch (loss) {
    case Loss::VocabBf16:
      return 2 * kB * V;
    case Loss::Chunked:
      // The hidden state's fp32 gradient, accumulated over the chunks, and one chunk's logits at a time.
      return 4 * h + (kB + 4) * V / 8;
    case Loss::VocabFp32Upcast:
      // Cross-entropy on an fp32 copy of the logits: log_softmax's fp32 output, kept, and in backward
      // the gradients of the loss and of log_softmax beside it (torchtitan components/loss.py).
      return 3 * kFp32 * V;
    case Loss::Auto:
    case Loss::VocabFp32:
      break;
  }
  return (kB + 4) * V;
}

}  // namespace memfine
