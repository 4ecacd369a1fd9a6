#include "core/model/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <torch/version.h>

#include <cmath>
#include <stdexcept>

#include "core/util/hash.h"
#include "core/util/host_sync.h"
#include "core/util/modules.h"
#include "core/util/tensors.h"

namespace memfine {

namespace {
// A layer's weights outside the routed experts (undefined ones included), const or mutable.
template <class W, class F>
void each_replicated(W& w, F f) {
  for (auto* t : {&w.norm1, &w.wq, &w.wk, &w.wv, &w.wo, &w.norm2, &w.router, &w.shared_in, &w.shared_out}) f(*t);
}
}  // namespace

std::vector<at::Tensor> LayerWeights::replicated() const {
  std::vector<at::Tensor> out;
  each_replicated(*this, [&](const at::Tensor& t) {
    if (t.defined()) out.push_back(t);
  });
  return out;
}

std::vector<at::Tensor> LayerWeights::parameters() const {
  std::vector<at::Tensor> out = replicated();
  out.insert(out.end(), w_in.begin(), w_in.end());
  out.insert(out.end(), w_out.begin(), w_out.end());
  return out;
}

Model Model::clone() const {
  Model m = *this;
  auto own = [](at::Tensor& t) {
    if (t.defined()) t = t.detach().clone().requires_grad_(t.requires_grad());
  };
  for (LayerWeights& l : m.layers) {
    each_replicated(l, own);
    for (auto& t : l.w_in) own(t);
    for (auto& t : l.w_out) own(t);
    pack_experts(l.w_in), pack_experts(l.w_out);
    own(l.expert_bias);
  }
  own(m.final_norm);
  own(m.embed);
  return m;
}

std::vector<at::Tensor> Model::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& l : layers)
    for (auto& p : l.parameters()) out.push_back(p);
  out.push_back(final_norm);
  if (embed.defined()) out.push_back(embed);
  return out;
}

at::TensorOptions options_of(const ExperimentConfig& c) { return tensor_options(c.device, c.dtype); }

namespace {
// Weights are drawn in float64 on the CPU from their own seed, then cast: identical across ranks,
// devices and dtypes up to rounding.
at::Tensor draw(uint64_t seed, at::IntArrayRef shape, double std, const at::TensorOptions& opt) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor t = at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * std;
  return t.to(opt).requires_grad_(true);
}
at::Tensor ones(int64_t n, const at::TensorOptions& opt) { return at::ones({n}, opt).requires_grad_(true); }
}  // namespace

Model make_model(const ExperimentConfig& c, int64_t rank) {
  Model model;
  model.cfg = c.model;
  model.ep = c.ep;
  model.rank = rank;
  const ModelConfig& m = c.model;
  const auto opt = options_of(c);
  const int64_t h = m.hidden, g = m.ffn_hidden, El = m.experts / c.ep;
  const double sh = 1.0 / std::sqrt(double(h));
  for (int64_t l = 0; l < m.layers; ++l) {
    LayerWeights w;
    auto s = [&](uint64_t what) { return mix_seed(mix_seed(c.seed, uint64_t(l) + 1), what); };
    if (m.attention == "gqa") {
      w.norm1 = ones(h, opt);
      w.wq = draw(s(1), {h, m.heads * m.head_dim}, sh, opt);
      w.wk = draw(s(2), {h, m.kv_heads * m.head_dim}, sh, opt);
      w.wv = draw(s(3), {h, m.kv_heads * m.head_dim}, sh, opt);
      w.wo = draw(s(4), {m.heads * m.head_dim, h}, 1.0 / std::sqrt(double(m.heads * m.head_dim)), opt);
    }
    w.norm2 = ones(h, opt);
    w.router = draw(s(5), {h, m.experts}, sh, opt);
    for (int64_t e = 0; e < El; ++e) {
      const uint64_t ge = uint64_t(rank * El + e);
      w.w_in.push_back(draw(s(100 + 2 * ge), {h, 2 * g}, sh, opt));
      w.w_out.push_back(draw(s(101 + 2 * ge), {g, h}, 1.0 / std::sqrt(double(g)), opt));
    }
    pack_experts(w.w_in), pack_experts(w.w_out);
    if (m.shared_experts > 0) {
      const int64_t gs = g * m.shared_experts;
      w.shared_in = draw(s(6), {h, 2 * gs}, sh, opt);
      w.shared_out = draw(s(7), {gs, h}, 1.0 / std::sqrt(double(gs)), opt);
    }
    if (c.train.enabled && c.train.bias_update > 0) w.expert_bias = at::zeros({m.experts}, opt);
    model.layers.push_back(std::move(w));
  }
  model.final_norm = ones(h, opt);
  if (m.vocab > 0) model.embed = draw(mix_seed(c.seed, 9000), {m.vocab, h}, sh, opt);
  return model;
}

int64_t parameter_count(const ModelConfig& m, int64_t ep) {
  const int64_t h = m.hidden, g = m.ffn_hidden;
  int64_t per_layer = h + h * m.experts + (m.experts / ep) * 3 * h * g;
  if (m.attention == "gqa") per_layer += h + 2 * h * m.heads * m.head_dim + 2 * h * m.kv_heads * m.head_dim;
  if (m.shared_experts > 0) per_layer += 3 * h * g * m.shared_experts;
  return per_layer * m.layers + h + m.vocab * h;
}

int64_t static_bytes_lower_bound(const ExperimentConfig& c) {
  const int64_t elem = int64_t(c10::elementSize(dtype_of(c.dtype)));
  return elem * (4 * parameter_count(c.model, c.ep) + 2 * c.model.tokens() * c.model.hidden);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + 1e-6) * weight;
}

bool fused_attention_available() { return TORCH_VERSION_MAJOR >= 2; }

at::Tensor attention(const at::Tensor& x, const LayerWeights& w, const ModelConfig& m, bool sdpa) {
  const int64_t b = m.micro_batch, s = m.seq, H = m.heads, KV = m.kv_heads, d = m.head_dim;
  at::Tensor q, k, v, ctx;
  {
    ModuleScope qkv(Module::QkvLinear);
    q = at::matmul(x, w.wq).view({b, s, H, d}).transpose(1, 2);
    auto kv = [&](const at::Tensor& wt) {
      // Grouped-query: each kv head serves H / KV query heads.
      return at::matmul(x, wt)
          .view({b, s, KV, 1, d})
          .expand({b, s, KV, H / KV, d})
          .reshape({b, s, H, d})
          .transpose(1, 2);
    };
    k = kv(w.wk), v = kv(w.wv);
  }
  if (sdpa) {
    ModuleScope core(Module::CoreAttn);
#if TORCH_VERSION_MAJOR >= 2
    // Causal, scaled by 1/sqrt(d) as below; its output is [b, s, H, d] in memory, so the projection
    // reads it without a copy.
    ctx = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
    throw std::runtime_error("attention_kernel: sdpa needs LibTorch 2.x (this build's is 1.x)");
#endif
  } else {
    ModuleScope core(Module::CoreAttn);
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(d));
    at::Tensor causal = at::ones({s, s}, x.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(causal, -std::numeric_limits<double>::infinity());
    ctx = at::matmul(at::softmax(scores, -1), v);
  }
  ModuleScope proj(Module::AttnProj);
  return at::matmul(ctx.transpose(1, 2).reshape({b * s, H * d}), w.wo);
}

void pack_experts(const std::vector<at::Tensor>& w) {
  if (w.size() < 2 || back_to_back(w)) return;
  at::NoGradGuard no_grad;
  std::vector<int64_t> sizes = {int64_t(w.size())};
  sizes.insert(sizes.end(), w[0].sizes().begin(), w[0].sizes().end());
  at::Tensor all = at::empty(sizes, w[0].options().requires_grad(false));
  for (size_t e = 0; e < w.size(); ++e) all[int64_t(e)].copy_(w[e]);  // copy_ checks the shapes
  for (size_t e = 0; e < w.size(); ++e) w[e].set_data(all[int64_t(e)]);
}

at::Tensor swiglu_with(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& w_out, Product product) {
  // Inside a routed expert its parts are marked (offloading picks them by name); the shared expert
  // runs the same code and stays the shared expert.
  at::Tensor gate_up, act;
  {
    ModuleScope fc1(Module::ExpertFc1);
    gate_up = product(x, w_in);
  }
  {
    ModuleScope moe_act(Module::MoeAct);
    auto halves = gate_up.chunk(2, -1);
    act = at::silu(halves[0]) * halves[1];
  }
  ModuleScope fc2(Module::ExpertFc2);
  return product(act, w_out);
}

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& w_out) {
  return swiglu_with(x, w_in, w_out, [](const at::Tensor& a, const at::Tensor& b) { return at::matmul(a, b); });
}

Routed route(const at::Tensor& x_norm, const LayerWeights& w, const at::Tensor& expert_ids, int64_t topk,
             double aux_coef) {
  at::Tensor probs = at::softmax(at::matmul(x_norm, w.router), -1);
  Routed r;
  if (expert_ids.defined()) {
    r = {probs.gather(1, to_device(expert_ids, probs.device())), expert_ids};
  } else {
    if (w.expert_bias.defined()) {  // the bias chooses, the probability still weighs
      at::Tensor ids = std::get<1>((probs.detach() + w.expert_bias).topk(topk, -1));
      r = {probs.gather(1, ids), to_host(ids)};
    } else {
      auto top = probs.topk(topk, -1);
      r = {std::get<0>(top), to_host(std::get<1>(top))};
    }
  }
  if (aux_coef > 0) {
    const int64_t E = probs.size(1);
    at::Tensor share = at::bincount(r.expert_ids.reshape(-1), {}, E).to(probs.options()) / double(r.expert_ids.numel());
    r.aux_loss = (share * probs.mean(0)).sum() * (aux_coef * double(E));
  } else {
    r.aux_loss = at::zeros({}, probs.options());
  }
  return r;
}

at::Tensor embed_tokens(const Model& m, const at::Tensor& tokens) {
  return m.embed.index_select(0, tokens.reshape(-1));
}

at::Tensor next_token_loss(const Model& m, const at::Tensor& h, const at::Tensor& next_tokens) {
  at::Tensor logits = at::matmul(rms_norm(h, m.final_norm), m.embed.t());
  return at::cross_entropy_loss(logits, next_tokens.reshape(-1));
}

void update_expert_bias(Model& model, const std::vector<at::Tensor>& counts, double rate) {
  at::NoGradGuard no_grad;
  for (size_t l = 0; l < counts.size(); ++l) {
    at::Tensor& b = model.layers[l].expert_bias;
    if (!b.defined() || !counts[l].defined()) continue;
    const at::Tensor n = counts[l].to(b.options());
    b.add_(at::sign(n.mean() - n) * rate);
  }
}

}  // namespace memfine
