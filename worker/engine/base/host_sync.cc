#include "worker/engine/base/host_sync.h"

#include <ATen/record_function.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>

namespace trainyard::engine {
namespace {

thread_local int t_inside = 0;

std::mutex& SitesMutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}

std::map<std::string, int64_t>& Sites() {
  static auto* sites = new std::map<std::string, int64_t>();
  return *sites;
}

// Operators that block the host until a device's values are there, whatever the device.
const std::set<std::string>& ReadingOps() {
  // Composites that call one of these (item, allclose, is_nonzero: _local_scalar_dense)
  // are left out so that one read counts once.
  static const auto* ops = new std::set<std::string>{"aten::_local_scalar_dense",
                                                     "aten::nonzero",
                                                     "aten::masked_select",
                                                     "aten::_unique",
                                                     "aten::_unique2",
                                                     "aten::unique_dim",
                                                     "aten::unique_consecutive",
                                                     "aten::equal",
                                                     "aten::bincount"};
  return *ops;
}

bool IsCpuTensor(const c10::IValue& v) { return v.isTensor() && v.toTensor().defined() && v.toTensor().is_cpu(); }
bool IsDeviceTensor(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && !v.toTensor().is_cpu() && !v.toTensor().is_meta();
}

}  // namespace

HostRead::HostRead(const char* site) {
  ++t_inside;
  std::lock_guard<std::mutex> lock(SitesMutex());
  ++Sites()[site];
}

HostRead::~HostRead() { --t_inside; }

bool HostRead::Inside() { return t_inside > 0; }

std::map<std::string, int64_t> HostReadsBySite() {
  std::lock_guard<std::mutex> lock(SitesMutex());
  return Sites();
}

namespace {

// The watcher's counts. They outlive every watcher: LibTorch's removeCallback does not
// wait for callbacks already running on other threads, so a callback may still count
// after its watcher is gone (into counts nobody reads any more).
struct WatchState {
  std::mutex mu;
  std::map<std::string, int64_t> counts;
};

WatchState& Watch() {
  static auto* state = new WatchState();
  return *state;
}

std::atomic<bool> g_watching{false};

std::unique_ptr<at::ObserverContext> OnOperator(const at::RecordFunction& fn) {
  if (!g_watching.load(std::memory_order_acquire) || HostRead::Inside()) return nullptr;
  const std::string name = fn.name();
  bool reads = ReadingOps().count(name) > 0;
  if (!reads && name == "aten::copy_") {
    // copy_(self = destination, src): a device tensor landing on the host. (`.to(kCPU)`
    // is _to_copy around this copy_; the copy alone is counted.)
    const auto in = fn.inputs();
    reads = in.size() >= 2 && IsCpuTensor(in[0]) && IsDeviceTensor(in[1]);
  }
  if (reads) {
    WatchState& w = Watch();
    std::lock_guard<std::mutex> lock(w.mu);
    ++w.counts[name];
  }
  return nullptr;
}

}  // namespace

UndeclaredHostReads::UndeclaredHostReads() {
  bool expected = false;
  if (!g_watching.compare_exchange_strong(expected, true)) {
    throw std::logic_error("UndeclaredHostReads: another watcher is already installed");
  }
  {
    std::lock_guard<std::mutex> lock(Watch().mu);
    Watch().counts.clear();
  }
  try {
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&OnOperator)
                                        .needsInputs(true)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  } catch (...) {
    g_watching.store(false, std::memory_order_release);
    throw;
  }
}

UndeclaredHostReads::~UndeclaredHostReads() {
  g_watching.store(false, std::memory_order_release);
  at::removeCallback(handle_);
}

std::map<std::string, int64_t> UndeclaredHostReads::Counts() const {
  std::lock_guard<std::mutex> lock(Watch().mu);
  return Watch().counts;
}

}  // namespace trainyard::engine
