#include "core/project/layout.h"

#include <sstream>

#include "core/project/pipeline.h"

namespace memfine {

std::string Layout::text() const {
  std::ostringstream o;
  o << "TP" << tp << " PP" << pp;
  if (vpp > 1) o << "x" << vpp;
  o << " EP" << ep;
  if (etp > 1) o << " ETP" << etp;
  o << " DP" << dp << " CP" << cp << " mb" << micro_batch;
  if (grad_accumulation > 1) o << " GA" << grad_accumulation;
  return o.str();
}

std::string layout_problem(const ModelConfig& m, const Hardware& hw, const Layout& l,
                           const std::string& pipeline_layout, bool tp_beyond_kv_heads) {
  if (l.tp > hw.gpus_per_node) return "TP spans nodes";
  if (m.heads % l.tp) return "TP does not divide the heads";
  if (m.kv_heads % l.tp && !(tp_beyond_kv_heads && kv_heads_gathered(m, l) && l.tp % m.kv_heads == 0))
    return tp_beyond_kv_heads ? "TP neither divides the kv heads nor is their multiple"
                              : "TP does not divide the heads";
  if (m.experts % l.ep) return "EP does not divide the experts";
  if (l.etp > hw.gpus_per_node) return "ETP spans nodes";
  if (m.ffn_hidden % l.etp) return "ETP does not divide the experts' FFN";
  if ((l.dp * l.cp * l.tp) % (l.ep * l.etp))
    return l.etp > 1 ? "EP x ETP does not divide DP x CP x TP" : "EP does not divide DP x CP x TP";
  // Megatron may count the embedding and the loss as a layer each when it splits the pipeline
  // (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split).
  if (l.pp * l.vpp > m.layers + 2) return "PP x VPP exceeds the layers (and the embedding and loss)";
  // In 128 bits: each factor is within its key's range, their product need not be within 64.
  const __int128 per_step = __int128(l.dp) * l.micro_batch * l.grad_accumulation;
  if (per_step > l.global_batch || l.global_batch % int64_t(per_step))
    return "DP x micro-batch x gradient accumulation does not divide the global batch";
  if (m.seq % (l.cp * l.tp)) return "CP x TP does not divide the sequence";
  if (l.vpp > 1 && l.pp == 1) return "VPP needs PP";
  if (const std::string why = pipeline_layout_problem(m, l, pipeline_layout); !why.empty())
    return "the pipeline layout " + why;
  return "";
}

ModelConfig expert_share(const ModelConfig& m, const Layout& l) {
  ModelConfig e = m;
  e.ffn_hidden = m.ffn_hidden / l.etp;
  return e;
}

ModelConfig kv_share(const ModelConfig& m, const Layout& l) {
  ModelConfig k = m;
  if (kv_heads_gathered(m, l)) k.kv_heads = l.tp;
  return k;
}

int64_t micro_batches(const Layout& l) { return l.global_batch / (l.dp * l.micro_batch); }

std::vector<Layout> layouts(const SearchSpace& s, int64_t gpus, int64_t global_batch) {
  std::vector<Layout> out;
  for (int64_t tp : s.tp)
    for (int64_t pp : s.pp)
      for (int64_t cp : s.cp) {
        if (gpus % (tp * pp * cp)) continue;
        for (int64_t ep : s.ep)
          for (int64_t etp : s.etp)
            for (int64_t mb : s.micro_batch)
              for (int64_t vpp : s.vpp)
                for (int64_t ga : s.grad_accumulation) {
                  Layout l;
                  l.tp = tp, l.pp = pp, l.cp = cp, l.dp = gpus / (tp * pp * cp), l.ep = ep, l.etp = etp;
                  l.micro_batch = mb, l.vpp = vpp, l.grad_accumulation = ga, l.global_batch = global_batch;
                  out.push_back(l);
                }
      }
  return out;
}

}  // namespace memfine
