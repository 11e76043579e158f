#include "worker/engine/train/trace_profiler.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

namespace trainyard::engine {
namespace {

using Clock = std::chrono::steady_clock;

struct TraceEvent {
  std::string name;
  int64_t ts_ns;
  int64_t dur_ns;
  int tid;
  bool user;
};

struct State {
  std::vector<TraceEvent> events;  // guarded by g_mu
  int64_t dropped = 0;             // guarded by g_mu
  Clock::time_point origin = Clock::now();
  at::CallbackHandle handle = 0;
};

// g_state is set and cleared under g_mu; a range ending on any thread appends under it,
// so Stop never frees a state another thread is writing.
std::mutex g_mu;
std::atomic<State*> g_state{nullptr};
std::atomic<int> g_next_tid{0};

int ThreadIndex() {
  thread_local const int tid = g_next_tid.fetch_add(1);
  return tid;
}

class Context : public at::ObserverContext {
 public:
  Clock::time_point start;
};

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction&) {
  auto ctx = std::make_unique<Context>();
  ctx->start = Clock::now();
  return ctx;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext* base) {
  auto* ctx = static_cast<Context*>(base);
  if (ctx == nullptr || g_state.load(std::memory_order_acquire) == nullptr) return;
  const auto end = Clock::now();
  std::lock_guard<std::mutex> lock(g_mu);
  State* state = g_state.load(std::memory_order_acquire);
  if (state == nullptr) return;
  TraceEvent e{std::string(fn.name()),
               std::chrono::duration_cast<std::chrono::nanoseconds>(ctx->start - state->origin).count(),
               std::chrono::duration_cast<std::chrono::nanoseconds>(end - ctx->start).count(), ThreadIndex(),
               fn.scope() == at::RecordScope::USER_SCOPE};
  if (state->events.size() >= TraceProfiler::kMaxEvents) {
    ++state->dropped;
    return;
  }
  state->events.push_back(std::move(e));
}

}  // namespace

void TraceProfiler::Start() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state.load() != nullptr) throw std::logic_error("TraceProfiler::Start: a profile is already running");
  auto* state = new State();
  g_state.store(state, std::memory_order_release);
  state->handle = at::addGlobalCallback(at::RecordFunctionCallback(&OnStart, &OnEnd).needsInputs(false));
}

bool TraceProfiler::Running() { return g_state.load() != nullptr; }

std::string TraceProfiler::Stop(int rank) {
  std::unique_ptr<State> state;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    State* raw = g_state.load();
    if (raw == nullptr) return R"({"traceEvents":[]})";
    at::removeCallback(raw->handle);
    g_state.store(nullptr, std::memory_order_release);
    state.reset(raw);
  }
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : state->events) {
    events.push_back({{"name", e.name},
                      {"cat", e.user ? "user_annotation" : "cpu_op"},
                      {"ph", "X"},
                      {"ts", static_cast<double>(e.ts_ns) / 1000.0},
                      {"dur", static_cast<double>(e.dur_ns) / 1000.0},
                      {"pid", rank},
                      {"tid", e.tid}});
  }
  nlohmann::json trace = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"},
                          {"otherData", {{"rank", rank}, {"dropped_events", state->dropped}}}};
  return trace.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string TraceProfiler::TraceName(int attempt, int rank, long long first_step) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "trace-a%d-r%d-s%08lld.json", attempt, rank, first_step);
  return buf;
}

}  // namespace trainyard::engine
