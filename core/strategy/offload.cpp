#include "core/strategy/offload.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "core/strategy/codec.h"
#include "core/strategy/copy_streams.h"
#include "core/strategy/recompute.h"

namespace memfine {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// One saved storage's host copy, or its encoded copy (shared by every view of it saved), then its
// device copy.
struct Entry {
  std::weak_ptr<Offloader::Impl> owner;
  int64_t bytes = 0;       // the storage's
  int64_t host_bytes = 0;  // what the host holds of it: the storage, or its codes
  bool codes_on_host = false;  // compress what is offloaded: `host` holds the codes
  at::ScalarType codes_dtype = at::kByte;
  int64_t codes_numel = 0;
  at::Device device_type = at::kCPU;  // where it came from
  at::Tensor host, device;
  Encoded encoded;                          // encoding: the codes, on the device
  at::ScalarType dtype = at::kFloat;        // encoding: the storage's element type
  // A device's copies, on the offloader's streams: done when these are (null: done, or on a CPU).
  CopyStreams::Done out_done, back_done;
  // Keeps the key's address (the storage's) from being reused while the entry lives.
  c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
  ~Entry();
};

// A layer's offloaded storages.
struct OffloadGroup {
  std::map<const void*, std::weak_ptr<Entry>> entries;
  std::vector<std::shared_ptr<Entry>> fetch_list;  // weak in effect: cleared on fetch
  int64_t bytes = 0;
  std::vector<std::pair<double, int64_t>> packs;  // (ms since the step began, bytes): the D2H copies
  double fetched_ms = -1, first_unpack_ms = -1;
  bool fetched = false;
};

struct Offloader::Impl {
  explicit Impl(const OffloadSpec& s) : spec(s) {}
  OffloadSpec spec;
  std::vector<OffloadGroup> groups;
  std::vector<double> backward_ms;  // when each layer's backward began
  Clock::time_point start;
  double hook_ms = 0;  // the emulation's own copying, taken out of every event's time
  int64_t host_current = 0, host_peak = 0, to_host = 0, to_device = 0, tensors = 0;
  int64_t encoded_in = 0, encoded_kept = 0, decoded = 0;  // encoding: bytes in, codes and scales, decoded
  std::map<Module, int64_t> by_module;

  // Layer l's group and backward mark, grown to the layers a step reaches.
  OffloadGroup& group(int64_t l) {
    if (size_t(l) >= groups.size()) groups.resize(size_t(l) + 1), backward_ms.resize(size_t(l) + 1, -1);
    return groups[size_t(l)];
  }
  double now_ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - start).count() - hook_ms; }
  void host_add(int64_t b) {
    host_current += b;
    host_peak = std::max(host_peak, host_current);
  }
  CopyStreams streams;  // a device's copies (copy_streams.h)

  // Brings an entry's copy back to the device (the metered allocator) and frees the host one.
  // Encoded: the codes come back (from the host, if there) and are decoded.
  void fetch(Entry& e) {
    if (!e.device.defined() && e.host.defined()) {
      at::Tensor back;
      if (e.device_type.is_cpu()) {
        back = e.host.clone();
      } else {
        // Its copy out is done first (the copy back's stream waits for it), then it comes back
        // on its own stream; the host buffer is held until then by the pinned allocator.
        back = at::empty(e.host.sizes(), e.host.options().device(e.device_type).pinned_memory(false));
        e.back_done = streams.copy(back, e.host, e.device_type, false, back.storage().data_ptr(), e.out_done);
      }
      e.host = at::Tensor();
      to_device += e.host_bytes;
      if (e.codes_on_host)
        e.encoded.codes = at::empty({0}, back.options().dtype(e.codes_dtype)).set_(back.storage(), 0, {e.codes_numel}, {1});
      else
        e.device = back;
    }
    if (e.encoded.codes.defined()) {
      CopyStreams::wait_for(e.back_done, e.device_type);
      e.device = decode(e.encoded, spec.stored_as, e.dtype);
      e.encoded = Encoded{};
      decoded += e.bytes;
    }
  }
  void fetch_group(int64_t g, double at_ms) {
    if (g < 0 || g >= int64_t(groups.size())) return;  // nothing offloaded there
    OffloadGroup& grp = groups[size_t(g)];
    if (grp.fetched) return;
    grp.fetched = true, grp.fetched_ms = at_ms;
    for (auto& e : grp.fetch_list) fetch(*e);
    grp.fetch_list.clear();
  }
};

Entry::~Entry() {
  if (auto o = owner.lock(); o && host.defined()) o->host_current -= host_bytes;
}

namespace {

// Host buffers by size, reused from step to step (as a pinned pool would be on a device): the
// emulation's own cost is then a copy, not a page fault per byte.
class HostBuffers {
 public:
  static HostBuffers& get() {
    static HostBuffers* b = new HostBuffers();  // never destroyed: deleters may run at exit
    return *b;
  }
  at::Tensor take(int64_t bytes) {
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& list = free_[bytes];
      if (!list.empty()) p = list.back(), list.pop_back();
    }
    if (!p) p = std::malloc(size_t(bytes));
    if (!p) throw std::bad_alloc();
    return at::from_blob(
        p, {bytes}, [this, bytes](void* q) { give(q, bytes); }, at::TensorOptions().dtype(at::kByte));
  }

 private:
  void give(void* p, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[bytes].push_back(p);
  }
  std::mutex mu_;
  std::map<int64_t, std::vector<void*>> free_;
};

thread_local std::shared_ptr<Offloader::Impl> active;
thread_local int64_t active_group = -1;

class Timed {
 public:
  explicit Timed(Offloader::Impl* o) : o_(o), t0_(Clock::now()) {}
  ~Timed() { o_->hook_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0_).count(); }

 private:
  Offloader::Impl* o_;
  Clock::time_point t0_;
};

// The hooks of one saved tensor.
class Offloaded : public torch::autograd::SavedVariableHooks {
 public:
  Offloaded(std::shared_ptr<Offloader::Impl> o, int64_t group) : o_(std::move(o)), group_(group) {}
  void call_pack_hook(const at::Tensor& t) override {
    // Not the parameters (leaves that need a gradient), nor small tensors.
    // Encoding keeps integer and boolean tensors (indices, masks) as they are.
    if (!t.defined() || (t.is_leaf() && t.requires_grad()) || !t.has_storage() ||
        int64_t(t.storage().nbytes()) < o_->spec.min_bytes || t.storage().nbytes() == 0 ||
        (o_->spec.encodes() && !t.is_floating_point())) {
      kept_ = t.detach();  // as the tensor is: holding it with its graph would keep its node alive
      return;
    }
    const double ms = o_->now_ms();
    Timed timed(o_.get());
    sizes_ = t.sizes().vec(), strides_ = t.strides().vec(), offset_ = t.storage_offset(), options_ = t.options();
    // A storage is copied once, whatever views of it are saved (z's halves, q, k and v's input):
    // the device lets it go once every one of them is offloaded.
    OffloadGroup& g = o_->group(group_);
    const void* key = t.storage().unsafeGetStorageImpl();
    if (auto it = g.entries.find(key); it != g.entries.end()) entry_ = it->second.lock();
    if (entry_) return;
    const int64_t bytes = int64_t(t.storage().nbytes());
    entry_ = std::make_shared<Entry>();
    entry_->owner = o_, entry_->bytes = bytes, entry_->device_type = t.device();
    entry_->storage = c10::weak_intrusive_ptr<c10::StorageImpl>(t.storage().getWeakStorageImpl());
    g.entries[key] = entry_;
    g.fetch_list.push_back(entry_);
    ++o_->tensors, o_->by_module[current_module()] += bytes;
    c10::Storage moved = t.storage();  // what goes to the host: the storage, or its codes
    if (o_->spec.encodes()) {
      encode_storage(t, bytes);
      if (!o_->spec.to_host) return;
      const at::Tensor& codes = entry_->encoded.codes;
      moved = codes.storage();
      entry_->codes_on_host = true, entry_->codes_dtype = codes.scalar_type(), entry_->codes_numel = codes.numel();
    }
    const int64_t host_bytes = int64_t(moved.nbytes());
    entry_->host_bytes = host_bytes;
    if (t.is_cpu()) {
      // The host copy is allocated outside ATen's allocator (the meter counts the device's).
      entry_->host = HostBuffers::get().take(host_bytes);
      std::memcpy(entry_->host.data_ptr(), moved.data(), size_t(host_bytes));
    } else {
      // A device: pinned host memory (the caching host allocator reuses it from step to step),
      // copied on the offloader's stream out; the device memory goes back to the allocator when
      // autograd lets it go, reused only once the copy has read it.
      const at::Tensor whole =
          at::empty({0}, at::TensorOptions().dtype(at::kByte).device(t.device())).set_(moved, 0, {host_bytes}, {1});
      entry_->host = at::empty({host_bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      entry_->out_done = o_->streams.copy(entry_->host, whole, t.device(), true, moved.data_ptr());
    }
    entry_->encoded.codes = at::Tensor();  // its device copy goes
    g.bytes += host_bytes, g.packs.emplace_back(ms, host_bytes);
    o_->host_add(host_bytes), o_->to_host += host_bytes;
  }
  // The whole storage as its elements, encoded on the device; its rows are the saved tensor's last
  // dimension (the scale's blocks).
  void encode_storage(const at::Tensor& t, int64_t bytes) {
    at::NoGradGuard no_grad;
    const int64_t n = bytes / int64_t(t.element_size());
    const at::Tensor whole = at::empty({0}, t.options().requires_grad(false)).set_(t.storage(), 0, {n}, {1});
    const int64_t row = t.dim() > 0 ? std::max<int64_t>(1, t.size(-1)) : 1;
    entry_->dtype = t.scalar_type();
    entry_->encoded = encode(whole, o_->spec.stored_as, o_->spec.scale_rows() * row);
    o_->encoded_in += bytes;
    o_->encoded_kept += int64_t(entry_->encoded.codes.nbytes()) +
                        (entry_->encoded.scales.defined() ? int64_t(entry_->encoded.scales.nbytes()) : 0);
  }

  at::Tensor call_unpack_hook() override {
    if (!entry_) return kept_;
    OffloadGroup& g = o_->groups[size_t(group_)];
    if (g.first_unpack_ms < 0) g.first_unpack_ms = o_->now_ms();
    if (!entry_->device.defined()) {  // not prefetched: brought back now
      Timed timed(o_.get());
      o_->fetch(*entry_);
    }
    CopyStreams::wait_for(entry_->back_done, entry_->device_type);  // a device's copy back
    return at::empty({0}, options_).set_(entry_->device.storage(), offset_, sizes_, strides_);
  }

 private:
  std::shared_ptr<Offloader::Impl> o_;
  int64_t group_;
  std::shared_ptr<Entry> entry_;
  std::vector<int64_t> sizes_, strides_;
  int64_t offset_ = 0;
  at::TensorOptions options_;
  at::Tensor kept_;
};

// The default engine, handing out Offloaded hooks inside a layer's chosen modules (never while a
// region is recomputed for backward: what it saves is used at once).
struct OffloadingEngine : torch::autograd::Engine {
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (!active || !active->spec.has(current_module()) || recomputing_for_backward()) return nullptr;
    return std::make_unique<Offloaded>(active, active_group);
  }
  static torch::autograd::Engine& get() {
    // Never destroyed: it is the process's engine, and a step thread abandoned after an error may
    // still be inside it when the program's statics go at exit.
    static OffloadingEngine* engine = new OffloadingEngine();
    return *engine;
  }
};

void install_engine() {
  static std::once_flag once;
  std::call_once(once, [] { torch::autograd::set_default_engine_stub(&OffloadingEngine::get); });
}

// Installed when the program starts, before any backward pass, for the whole process: LibTorch 2.x
// starts the autograd engine's device threads once per process (a function-local static in
// Engine::initialize_device_threads_pool), for whichever engine runs a backward pass first, so an
// engine installed after a backward pass on a GPU has no device queues and its first CUDA backward
// fails an internal assert (the H100's gpu_offload run). Outside an offloading step it hands out no
// hooks: every other strategy's backward is the default engine's.
const bool engine_installed = (install_engine(), true);

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity; its backward marks where a layer's backward begins and brings groups back.
struct BackwardMark : torch::autograd::Function<BackwardMark> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::shared_ptr<Offloader::Impl> o,
                            int64_t layer) {
    ctx->saved_data["o"] = keep(std::move(o));
    ctx->saved_data["layer"] = layer;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    Offloader::Impl* o = kept<std::shared_ptr<Offloader::Impl>>(ctx->saved_data["o"]).get();
    const int64_t l = ctx->saved_data["layer"].toInt();
    const double ms = o->now_ms();
    o->group(l);
    o->backward_ms[size_t(l)] = ms;
    {
      Timed timed(o);
      for (int64_t g = l; g >= l - o->spec.prefetch; --g) o->fetch_group(g, ms);
    }
    return {grad[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool offloading_engine_is_default() {
  return &torch::autograd::Engine::get_default_engine() == &OffloadingEngine::get();
}

void Offloader::begin_step() {
  install_engine();
  impl_ = std::make_shared<Impl>(spec_);
  impl_->start = Clock::now();
}

Offloader::LayerScope::LayerScope(Offloader& o, int64_t layer) : previous_(active), previous_group_(active_group) {
  if (!o.impl_) o.begin_step();
  o.impl_->group(layer);
  active = o.impl_, active_group = layer;
}

Offloader::LayerScope::~LayerScope() { active = previous_, active_group = previous_group_; }

at::Tensor Offloader::mark_backward(const at::Tensor& hidden, int64_t layer) {
  if (!impl_ || !hidden.requires_grad()) return hidden;
  return BackwardMark::apply(hidden, impl_, layer);
}

std::vector<FieldSpec> Offloader::counter_fields() {
  return {
      {"offload_to_host_bytes", "integer", "bytes", "moved to the host this step", "measured train"},
      {"offload_to_device_bytes", "integer", "bytes", "and back", "measured train"},
      {"offload_host_peak_bytes", "integer", "bytes", "held on the host at once (the host meter)", "measured train"},
      {"offload_tensors", "integer", "", "saved tensors offloaded (a storage once)", "measured train"},
      {"offload_bytes_by_module", "object", "bytes", "moved, by module", "measured train"},
      {"offload_emulation_ms", "number", "ms", "measured: the CPU emulation's own copying, inside step_ms",
       "measured train"},
      {"offload_d2h_ms_modelled", "number", "ms", "modelled from d2h_gbps: the copies out", "measured train"},
      {"offload_h2d_ms_modelled", "number", "ms", "modelled from h2d_gbps: the copies back", "measured train"},
      {"copy_ms_modelled", "number", "ms", "modelled: what compute waits for the copies", "measured train"},
      {"copy_d2h_exposed_ms_modelled", "number", "ms", "modelled: of that, the copies out's", "measured train"},
      {"offload_d2h_ms", "number", "ms", "measured on a GPU: the copies out, on their own stream (events)",
       "measured train"},
      {"offload_h2d_ms", "number", "ms", "measured on a GPU: the copies back, on their own stream (events)",
       "measured train"}};
}

std::vector<FieldSpec> Offloader::encoding_counter_fields() {
  return {{"encoded_bytes", "integer", "bytes", "saved activations encoded this step (their storages once)",
           "measured train"},
          {"encoded_kept_bytes", "integer", "bytes",
           "what the encoding keeps of them: codes and scales (offloaded: the codes on the host)", "measured train"},
          {"encoded_tensors", "integer", "", "saved storages encoded", "measured train"},
          {"encoded_bytes_by_module", "object", "bytes", "encoded, by module", "measured train"}};
}

json Offloader::counters() const {
  json j = json::object();
  if (!impl_) return j;
  const Impl& o = *impl_;
  if (spec_.encodes()) {
    j["encoded_bytes"] = o.encoded_in, j["encoded_kept_bytes"] = o.encoded_kept, j["encoded_tensors"] = o.tensors;
    json mods = json::object();
    for (const auto& [m, b] : o.by_module) mods[module_name(m)] = b;
    j["encoded_bytes_by_module"] = mods;
    if (!spec_.to_host) return j;
  }
  j["offload_to_host_bytes"] = o.to_host, j["offload_to_device_bytes"] = o.to_device;
  j["offload_host_peak_bytes"] = o.host_peak, j["offload_tensors"] = o.tensors;
  json mods = json::object();
  for (const auto& [m, b] : o.by_module) mods[module_name(m)] = b;
  j["offload_bytes_by_module"] = mods;
  j["offload_emulation_ms"] = o.hook_ms;  // measured: inside step_ms, absent on a device
  if (const auto ms = o.streams.milliseconds())  // a device's copies (the step's timer waited for them)
    j["offload_d2h_ms"] = ms->first, j["offload_h2d_ms"] = ms->second;
  // The copies on their own streams: D2H of each saved tensor from when it is saved, one at a
  // time; the forward's end (the last layer's backward mark) waits for the last. In backward,
  // a group's H2D starts when the layer `prefetch` above it begins its backward (or when it is
  // first needed, if sooner), and the first use waits for it; every wait delays what follows.
  const double d2h = o.spec.d2h_gbps * 1e6, h2d = o.spec.h2d_gbps * 1e6;  // bytes per ms
  double free_at = 0, d2h_ms = 0, h2d_ms = 0;
  for (const auto& g : o.groups)
    for (const auto& [t, b] : g.packs) free_at = std::max(free_at, t) + double(b) / d2h, d2h_ms += double(b) / d2h;
  double fwd_end = -1;
  for (double b : o.backward_ms) fwd_end = std::max(fwd_end, b);
  if (fwd_end < 0) fwd_end = free_at;
  double shift = std::max(0.0, free_at - fwd_end);
  const double exposed_d2h = shift;
  double stream = 0;
  const int64_t L = int64_t(o.groups.size());
  for (int64_t g = L - 1; g >= 0; --g) {
    const OffloadGroup& grp = o.groups[size_t(g)];
    if (grp.bytes == 0 || grp.first_unpack_ms < 0) continue;
    const double issue = grp.fetched_ms >= 0 ? grp.fetched_ms : grp.first_unpack_ms;
    const double copy = double(grp.bytes) / h2d;
    const double done = std::max(issue + shift, stream) + copy;
    h2d_ms += copy, stream = done;
    shift += std::max(0.0, done - (grp.first_unpack_ms + shift));
  }
  j["offload_d2h_ms_modelled"] = d2h_ms, j["offload_h2d_ms_modelled"] = h2d_ms;
  j["copy_ms_modelled"] = shift;  // exposed: compute waited this long
  j["copy_d2h_exposed_ms_modelled"] = exposed_d2h;
  return j;
}

}  // namespace memfine
