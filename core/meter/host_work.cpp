#include "core/meter/host_work.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "core/util/host_sync.h"

namespace memfine {
namespace {

std::atomic<int64_t> g_ops{0}, g_reads{0};
std::atomic<bool> g_active{false};
// Per thread: operators open on it, and whether one of them is a read (so that the read's inner
// `_local_scalar_dense` is not counted again).
thread_local int64_t t_depth = 0;
thread_local int64_t t_read_depth = 0;

// The autograd engine marks each node it evaluates at the operators' scope; the node is not an
// operator, the operators its derivative dispatches are.
bool is_engine(const char* name) { return std::strncmp(name, "autograd::engine::", 18) == 0; }

bool is_read(const char* name) {
  return std::strcmp(name, "aten::item") == 0 || std::strcmp(name, "aten::_local_scalar_dense") == 0;
}

// A context that says the operator was a read, so that its end closes it.
struct ReadContext : at::ObserverContext {};
struct EngineContext : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (is_engine(fn.name())) return std::make_unique<EngineContext>();
  if (t_depth++ == 0) g_ops.fetch_add(1, std::memory_order_relaxed);
  if (!is_read(fn.name())) return nullptr;
  if (t_read_depth++ == 0) g_reads.fetch_add(1, std::memory_order_relaxed);
  return std::make_unique<ReadContext>();
}

void on_end(const at::RecordFunction&, at::ObserverContext* ctx) {
  if (dynamic_cast<EngineContext*>(ctx)) return;
  if (t_depth > 0) --t_depth;
  if (ctx && t_read_depth > 0) --t_read_depth;
}

}  // namespace

HostWorkCounter::HostWorkCounter() {
  if (g_active.exchange(true)) throw std::logic_error("HostWorkCounter: one at a time");
  g_ops = 0, g_reads = 0;
  noted_at_start_ = noted_host_reads().load();
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_start, &on_end).needsInputs(false).scopes({at::RecordScope::FUNCTION}));
}

HostWorkCounter::~HostWorkCounter() {
  at::removeCallback(handle_);
  g_active = false;
}

HostWork HostWorkCounter::counted() const {
  return {g_ops.load(), g_reads.load() + noted_host_reads().load() - noted_at_start_};
}

}  // namespace memfine
