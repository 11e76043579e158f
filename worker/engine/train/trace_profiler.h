// A Chrome-trace profiler over LibTorch's RecordFunction observers: while it runs,
// every range (ATen operators, autograd nodes, the engine's own ranges: "region:KIND#L",
// "compile", "collective:GROUP:OP#SEQ", "trainyard::data", "trainyard::optimizer", ...)
// becomes one complete event {"ph":"X", name, ts, dur (µs), pid = rank, tid}. Stop
// returns the trace as a JSON object {"traceEvents":[...]} that chrome://tracing and
// Perfetto open.
//
// Why not the LibTorch profiler itself: the legacy autograd profiler (1.13) and the
// kineto one (2.x) have different APIs and output shapes, and a CPU-only 1.13 build
// cannot compile the 2.x path; at::addGlobalCallback and RecordFunctionCallback are the
// same in both, so this file needs no version switch (it records host ranges only, no
// CUDA kernel timeline).
//
// Thread contract: one profile at a time per process; Start and Stop from the same
// thread. Ranges on any thread are recorded (a mutex per finished range while it
// runs; nothing when stopped). At most kMaxEvents events are kept per window.
#pragma once

#include <cstddef>
#include <string>

namespace trainyard::engine {

class TraceProfiler {
 public:
  static constexpr std::size_t kMaxEvents = 1000000;

  // Throws std::logic_error when a profile is already running.
  static void Start();
  static bool Running();
  // Removes the observer and returns {"traceEvents":[...], "displayTimeUnit":"ms",
  // "otherData":{"rank":..., "dropped_events":N}} as text.
  static std::string Stop(int rank);

  // "trace-a1-r0-s00000012.json": attempt, rank and the window's first step.
  static std::string TraceName(int attempt, int rank, long long first_step);
};

}  // namespace trainyard::engine
