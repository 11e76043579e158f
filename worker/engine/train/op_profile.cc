#include "worker/engine/train/op_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <ATen/record_function.h>

namespace trainyard::engine {
namespace {

using Clock = std::chrono::steady_clock;

struct Frame {
  Clock::time_point start;
  double child_ms = 0;
};

struct State {
  std::thread::id thread;
  std::vector<Frame> stack;
  std::unordered_map<std::string, OpTime> totals;
  at::CallbackHandle handle = 0;
};

// Set and cleared by the profiling thread; read by every thread that runs a range.
std::atomic<State*> g_state{nullptr};

class Context : public at::ObserverContext {
 public:
  bool tracked = false;
};

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction&) {
  auto ctx = std::make_unique<Context>();
  State* state = g_state.load(std::memory_order_acquire);
  if (state != nullptr && std::this_thread::get_id() == state->thread) {
    ctx->tracked = true;
    state->stack.push_back({Clock::now(), 0});
  }
  return ctx;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext* base) {
  auto* ctx = static_cast<Context*>(base);
  State* state = g_state.load(std::memory_order_acquire);
  // Only the profiling thread tracks ranges, so only it touches the state.
  if (ctx == nullptr || !ctx->tracked || state == nullptr || state->stack.empty()) return;
  const Frame frame = state->stack.back();
  state->stack.pop_back();
  const double total = std::chrono::duration<double, std::milli>(Clock::now() - frame.start).count();
  if (!state->stack.empty()) state->stack.back().child_ms += total;
  const std::string name = fn.name();
  OpTime& t = state->totals[name];
  t.name = name;
  ++t.calls;
  t.self_ms += total - frame.child_ms;
}

}  // namespace

void OpProfile::Start() {
  if (g_state.load() != nullptr) throw std::logic_error("OpProfile::Start: a profile is already running");
  auto* state = new State();
  state->thread = std::this_thread::get_id();
  g_state.store(state, std::memory_order_release);
  state->handle = at::addGlobalCallback(at::RecordFunctionCallback(&OnStart, &OnEnd).needsInputs(false));
}

std::vector<OpTime> OpProfile::Stop() {
  State* raw = g_state.load();
  if (raw == nullptr) return {};
  at::removeCallback(raw->handle);
  g_state.store(nullptr, std::memory_order_release);
  std::unique_ptr<State> state(raw);
  std::vector<OpTime> out;
  out.reserve(state->totals.size());
  for (auto& [name, t] : state->totals) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  return out;
}

}  // namespace trainyard::engine
