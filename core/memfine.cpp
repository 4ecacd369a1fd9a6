// MemFine's FCDA (fine-grained chunk distribution): the MoE's dispatch -> experts -> combine runs
// chunk by chunk over the sending side's token positions (paper Eq. 6), keeping only the chunk
// inputs; backward recomputes and backpropagates one chunk at a time (Eq. 7). The MoE's peak is
// then the largest chunk's, not the whole layer's. The rest of the layer is recomputed as in
// full_recompute, so memfine never stores more than full_recompute does.
//
// MACT (memory-aware chunk tuning, `chunks: auto`): before each step, for every layer, read the
// rows it will receive (the paper's "notify") and take the smallest bin whose predicted peak fits
// the budget, from the implementation model (default) or the paper's Eq. 8-9 (`model: paper`).
// With `store_when_fits: true` the step stores everything when the model says that fits.
#include <torch/csrc/autograd/custom_function.h>

#include "core/cost_model.h"
#include "core/dist.h"
#include "core/memory_meter.h"
#include "core/memory_model.h"
#include "core/recompute.h"
#include "core/strategy.h"

namespace memfine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ChunkedCall {
  MoeRouting routing;
  const LayerWeights* weights = nullptr;
  int64_t chunks = 1;
  std::pair<int64_t, int64_t> range(int64_t c, int64_t n) const { return {c * n / chunks, (c + 1) * n / chunks}; }
};

TensorList expert_params(const LayerWeights& w) {
  TensorList p = w.w_in;
  p.insert(p.end(), w.w_out.begin(), w.w_out.end());
  return p;
}

struct ChunkedMoe : torch::autograd::Function<ChunkedMoe> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& probs,
                               at::TensorList params, const ChunkedCall* call) {
    const int64_t n = x.size(0);
    at::Tensor peer_loss = at::zeros({}, x.options());
    ctx->save_for_backward({x, probs});
    ctx->saved_data["call"] = keep(*call);
    ctx->saved_data["n_params"] = int64_t(params.size());
    // The enclosing layer is being recomputed for its backward: this output's value is never
    // read, and backward below recomputes every chunk anyway. Skip a third MoE forward.
    if (recomputing_for_backward()) return {at::zeros({1, 1}, x.options()).expand_as(x), peer_loss};
    at::Tensor y = at::empty_like(x);
    {
      at::NoGradGuard no_grad;
      for (int64_t c = 0; c < call->chunks; ++c) {
        auto [a, b] = call->range(c, n);
        if (a == b) continue;
        Combined out = moe_range(x.narrow(0, a, b - a), probs.narrow(0, a, b - a), *call->weights, call->routing, a, b);
        y.narrow(0, a, b - a).copy_(out.y);
        peer_loss += out.peer_loss;
      }
    }
    return {y, peer_loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const ChunkedCall& call = kept<ChunkedCall>(ctx->saved_data["call"]);
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0], probs = saved[1];
    saved.clear();
    const int64_t n = x.size(0);
    // The chunks' input gradients go straight into their rows of the layer's (one chunk: the
    // chunk's are the layer's); weight gradients into the experts' .grad, chunk after chunk.
    at::Tensor gx, gp;
    if (call.chunks > 1) gx = at::zeros_like(x), gp = at::zeros_like(probs);
    // The incoming gradient is the residual branch's too (y is added to it): read it, never own it.
    const at::Tensor g_out = grad[0];
    for (int64_t c = 0; c < call.chunks; ++c) {
      auto [a, b] = call.range(c, n);
      if (a == b) continue;
      RegionInputs in = region_inputs({x.narrow(0, a, b - a), probs.narrow(0, a, b - a)});
      Combined out;
      {
        at::AutoGradMode grad_on(true);
        out = moe_range(in.tensors[0], in.tensors[1], *call.weights, call.routing, a, b);
      }
      in.tensors.clear();
      at::Tensor gy = !g_out.defined() ? at::Tensor() : call.chunks > 1 ? g_out.narrow(0, a, b - a) : g_out;
      backward_into_leaves({std::move(out.y), std::move(out.peer_loss)}, {std::move(gy), grad[1]});
      TensorList& g = *in.grads;
      if (call.chunks == 1) {
        gx = std::move(g[0]), gp = std::move(g[1]);
        break;
      }
      if (g[0].defined()) gx.narrow(0, a, b - a).copy_(g[0]);
      if (g[1].defined()) gp.narrow(0, a, b - a).copy_(g[1]);
    }
    variable_list result = {gx, gp};
    result.resize(2 + size_t(ctx->saved_data["n_params"].toInt()) + 1);  // parameters: in .grad; the call
    return result;
  }
};

class MemFine : public Strategy {
 public:
  explicit MemFine(StrategySpec spec) : Strategy(std::move(spec)) {
    auto it = spec_.params.find("chunks");
    if (it != spec_.params.end() && it->second.IsScalar() && it->second.as<std::string>() == "auto") {
      chunks_ = 0;
    } else {
      chunks_ = spec_.get_int("chunks", 1);
      if (chunks_ < 1) throw std::invalid_argument("chunks must be 1 or more, or 'auto', got " + std::to_string(chunks_));
    }
    bins_ = spec_.get_int_list("bins", {1, 2, 4, 8});
    model_ = spec_.get_string("model", "implementation");
    store_when_fits_ = spec_.get_bool("store_when_fits", false);
    headroom_ = spec_.get_double("headroom", 0.05);
    objective_ = spec_.get_string("objective", "memory");
    if (objective_ != "memory" && objective_ != "time")
      throw std::invalid_argument("objective must be 'memory' (smallest bin that fits) or 'time' (fastest that fits)");
    if (objective_ == "time") cost_ = CostModel::load(spec_.get_string("cost_model", "results/cpu/cost_model.json"));
    if (headroom_ < 0 || headroom_ >= 1) throw std::invalid_argument("headroom must be in [0, 1)");
    if (bins_.empty() || !std::is_sorted(bins_.begin(), bins_.end()) || bins_.front() < 1)
      throw std::invalid_argument("bins must be a non-empty increasing list of chunk counts >= 1");
    if (model_ != "implementation" && model_ != "paper")
      throw std::invalid_argument("model must be 'implementation' or 'paper', got '" + model_ + "'");
    for (const char* k : {"bins", "model", "store_when_fits", "headroom", "objective", "cost_model"})
      if (chunks_ > 0 && spec_.params.count(k)) throw std::invalid_argument(std::string(k) + " applies to chunks: auto");
  }

  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    if (chunks_ == 0 && in.layer == 0) {
      plan(in);
      if (in.dist) {
        // Every rank takes part in every chunk's all-to-all: agree on the largest need.
        at::Tensor agreed = in.dist->allreduce_max(at::tensor(plan_, at::kLong));
        plan_.assign(agreed.data_ptr<int64_t>(), agreed.data_ptr<int64_t>() + agreed.numel());
      }
    }
    const int64_t chunks = chunks_ > 0 ? chunks_ : plan_[size_t(in.layer)];
    stats_.chunks.push_back(chunks);
    stats_.tuned = chunks_ == 0;
    if (chunks == 0) return layer_forward(x, in, *this, moe_stored);
    MoeFn chunked = [chunks](const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& routing,
                             const LayerWeights& w) {
      ChunkedCall call{routing, &w, chunks};
      variable_list out = ChunkedMoe::apply(xn, probs, at::TensorList(expert_params(w)), &call);
      return Combined{out[0], out[1]};
    };
    return layer_recomputed(x, in, *this, chunked);
  }

 private:
  // Chooses this step's chunk count per layer (0 = store without recomputation).
  void plan(const LayerInput& in) {
    const ExperimentConfig& c = *in.config;
    const int64_t L = c.model.layers;
    plan_.assign(size_t(L), bins_.front());
    if (objective_ == "time") return plan_for_time(c, *in.rank, predict_step(c, *in.rank, StrategyShape{}));
    if (c.budget < 0) {  // no budget: everything fits
      if (store_when_fits_) plan_.assign(size_t(L), 0);
      return;
    }
    const Prediction stored = predict_step(c, *in.rank, StrategyShape{});
    const int64_t room = activation_room(c, stored);
    if (store_when_fits_ && stored.activation_bytes <= room) {
      plan_.assign(size_t(L), 0);
      return;
    }
    if (model_ == "paper") {
      PaperModel pm;
      const ModelConfig& m = c.model;
      pm.D_t = double(c10::elementSize(dtype_of(c.dtype)));
      pm.b = double(m.micro_batch), pm.s = double(m.seq), pm.h = double(m.hidden), pm.a = double(m.heads);
      pm.h_d = double(m.head_dim), pm.k_a = double(m.kv_heads), pm.e_n = double(m.experts), pm.g_e = double(m.ffn_hidden);
      pm.static_bytes = double(stored.static_bytes), pm.device_bytes = double(c.budget);
      for (int64_t l = 0; l < L; ++l) {
        const int64_t need = in.rank->layers[size_t(l)].tokens_received;  // notify: rows to receive
        const int64_t b = chunks_for(double(need), pm.s_recv_max(), bins_);
        if (b < 0)
          throw OutOfMemory(int64_t(pm.activation(double(need), double(bins_.back()))), stored.static_bytes, c.budget);
        plan_[size_t(l)] = b;
      }
      return;
    }
    const auto peaks = layer_peaks(c, *in.rank);
    for (int64_t l = 0; l < L; ++l) {
      size_t i = 0;
      while (i < bins_.size() && peaks[i][size_t(l)] > room) ++i;
      if (i == bins_.size()) {
        const int64_t need = peaks.back()[size_t(l)];
        throw std::runtime_error(std::string(kOutOfMemoryMarker) + ": MACT: layer " + std::to_string(l) + " needs " +
                                 std::to_string(need) + " activation bytes even with " + std::to_string(bins_.back()) +
                                 " chunks; the budget leaves " + std::to_string(room) + " (short by " +
                                 std::to_string(need - room) + ")");
      }
      plan_[size_t(l)] = bins_[i];
    }
  }

  // objective: time: per layer, the fastest bin that fits by the cost model; the whole step
  // stored when that fits and is predicted faster.
  void plan_for_time(const ExperimentConfig& c, const EmulatedRank& rank, const Prediction& stored) {
    const int64_t L = c.model.layers, El = c.model.experts / c.ep;
    const int64_t room = c.budget < 0 ? INT64_MAX : activation_room(c, stored);
    const auto peaks = layer_peaks(c, rank);
    double total = 0;
    for (int64_t l = 0; l < L; ++l) {
      const int64_t rows = rank.layers[size_t(l)].tokens_received;
      double best = -1;
      for (size_t i = 0; i < bins_.size(); ++i) {
        if (peaks[i][size_t(l)] > room) continue;
        const double t = cost_.layer_ms(c.model, El, rows, bins_[i]);
        if (best < 0 || t < best) best = t, plan_[size_t(l)] = bins_[i];
      }
      if (best < 0)
        throw std::runtime_error(std::string(kOutOfMemoryMarker) + ": MACT: layer " + std::to_string(l) +
                                 " fits the budget with none of the bins");
      total += best;
    }
    double stored_total = 0;
    for (int64_t l = 0; l < L; ++l) stored_total += cost_.layer_ms(c.model, El, rank.layers[size_t(l)].tokens_received, 0);
    if (stored.activation_bytes <= room && stored_total < total) {
      plan_.assign(size_t(L), 0);
      total = stored_total;
    }
    stats_.predicted_ms = total;
  }

  // The implementation model is within a few percent of the meter, so MACT keeps `headroom` of
  // the activation room free rather than planning to the last byte.
  int64_t activation_room(const ExperimentConfig& c, const Prediction& stored) const {
    return int64_t(double(c.budget - stored.static_bytes) * (1.0 - headroom_));
  }

  // Each layer's predicted peak for every bin, [bin][layer]. A recomputed layer keeps only its
  // output until its backward, so one layer's chunk count does not change another's peak: one
  // prediction per bin covers every layer.
  std::vector<std::vector<int64_t>> layer_peaks(const ExperimentConfig& c, const EmulatedRank& rank) const {
    StrategyShape chunked;
    chunked.recompute_layer = true;
    chunked.moe = MoeMode::Chunked;
    std::vector<std::vector<int64_t>> peaks;
    for (int64_t b : bins_)
      peaks.push_back(predict_step(c, rank, chunked, std::vector<int64_t>(size_t(c.model.layers), b)).layer_peak);
    return peaks;
  }

  int64_t chunks_ = 1;  // 0: auto
  std::string objective_ = "memory";
  CostModel cost_;
  std::vector<int64_t> bins_;
  std::string model_;
  bool store_when_fits_ = false;
  double headroom_ = 0.05;
  std::vector<int64_t> plan_;
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "memfine",
    "MemFine FCDA: MoE dispatch->experts->combine in token chunks, recomputed chunk by chunk; rest of the layer recomputed",
    {{"chunks", "number of token chunks (integer >= 1), or 'auto' (MACT: per layer and step, from the budget)"},
     {"bins", "auto: the chunk counts MACT may choose (default [1, 2, 4, 8])"},
     {"model", "auto: 'implementation' (this code's byte-level model, default) or 'paper' (Eq. 8-9)"},
     {"store_when_fits", "auto: store without recomputation when the model says that fits (default false)"},
     {"headroom", "auto: share of the budget's activation room kept free for the model's error (default 0.05)"},
     {"objective", "auto: 'memory' (smallest bin that fits, the paper's MACT; default) or 'time' (fastest that fits)"},
     {"cost_model", "objective time: the fitted cost model (default results/cpu/cost_model.json)"}},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new MemFine(s)); },
    [](const StrategySpec& s, const ExperimentConfig& c) {
      auto it = s.params.find("chunks");
      if (it != s.params.end() && it->second.IsScalar() && it->second.as<std::string>() == "auto") return;
      if (s.get_int("chunks", 1) > c.model.tokens())
        throw std::invalid_argument("chunks (" + std::to_string(s.get_int("chunks", 1)) + ") exceeds the tokens per rank (" +
                                    std::to_string(c.model.tokens()) + ")");
    }});

}  // namespace
}  // namespace memfine
