#include "worker/engine/base/host_sync.h"

#include <ATen/record_function.h>

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

struct UndeclaredHostReads::State {
  mutable std::mutex mu;
  std::map<std::string, int64_t> counts;
};

namespace {

// The watcher's state for the callback (LibTorch takes a plain function pointer).
std::atomic<UndeclaredHostReads::State*> g_watching{nullptr};

std::unique_ptr<at::ObserverContext> OnOperator(const at::RecordFunction& fn) {
  UndeclaredHostReads::State* state = g_watching.load(std::memory_order_acquire);
  if (state == nullptr || HostRead::Inside()) return nullptr;
  const std::string name = fn.name();
  bool reads = ReadingOps().count(name) > 0;
  if (!reads && (name == "aten::copy_" || name == "aten::_to_copy")) {
    const auto in = fn.inputs();
    if (name == "aten::copy_") {
      // copy_(self = destination, src): a device tensor landing on the host.
      reads = in.size() >= 2 && IsCpuTensor(in[0]) && IsDeviceTensor(in[1]);
    } else {
      // _to_copy(self, dtype, layout, device, ...): a device tensor sent to the CPU.
      for (size_t i = 1; i < in.size() && !reads; ++i) {
        reads = IsDeviceTensor(in[0]) && in[i].isDevice() && in[i].toDevice().is_cpu();
      }
    }
  }
  if (reads) {
    std::lock_guard<std::mutex> lock(state->mu);
    ++state->counts[name];
  }
  return nullptr;
}

}  // namespace

UndeclaredHostReads::UndeclaredHostReads() : state_(std::make_shared<State>()) {
  State* expected = nullptr;
  if (!g_watching.compare_exchange_strong(expected, state_.get())) {
    throw std::logic_error("UndeclaredHostReads: another watcher is already installed");
  }
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&OnOperator)
                                      .needsInputs(true)
                                      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

UndeclaredHostReads::~UndeclaredHostReads() {
  at::removeCallback(handle_);
  g_watching.store(nullptr, std::memory_order_release);
}

std::map<std::string, int64_t> UndeclaredHostReads::Counts() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->counts;
}

}  // namespace trainyard::engine
