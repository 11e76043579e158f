#include "worker/engine/train/op_profile.h"

#include <algorithm>
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

State* g_state = nullptr;  // set and cleared by the profiling thread only

class Context : public at::ObserverContext {
 public:
  bool tracked = false;
};

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction&) {
  auto ctx = std::make_unique<Context>();
  if (g_state != nullptr && std::this_thread::get_id() == g_state->thread) {
    ctx->tracked = true;
    g_state->stack.push_back({Clock::now(), 0});
  }
  return ctx;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext* base) {
  auto* ctx = static_cast<Context*>(base);
  if (ctx == nullptr || !ctx->tracked || g_state == nullptr || g_state->stack.empty()) return;
  const Frame frame = g_state->stack.back();
  g_state->stack.pop_back();
  const double total = std::chrono::duration<double, std::milli>(Clock::now() - frame.start).count();
  if (!g_state->stack.empty()) g_state->stack.back().child_ms += total;
  const std::string name = fn.name();
  OpTime& t = g_state->totals[name];
  t.name = name;
  ++t.calls;
  t.self_ms += total - frame.child_ms;
}

}  // namespace

void OpProfile::Start() {
  if (g_state != nullptr) throw std::logic_error("OpProfile::Start: a profile is already running");
  g_state = new State();
  g_state->thread = std::this_thread::get_id();
  g_state->handle = at::addGlobalCallback(at::RecordFunctionCallback(&OnStart, &OnEnd).needsInputs(false));
}

std::vector<OpTime> OpProfile::Stop() {
  if (g_state == nullptr) return {};
  at::removeCallback(g_state->handle);
  std::unique_ptr<State> state(g_state);
  g_state = nullptr;
  std::vector<OpTime> out;
  out.reserve(state->totals.size());
  for (auto& [name, t] : state->totals) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  return out;
}

}  // namespace trainyard::engine
