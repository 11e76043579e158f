// Compile-layer telemetry: one record per compile, recompile, recompile-limit hit,
// graph break, unsafe side effect, eager fallback and end-of-run summary. The records
// mirror trainyard.v1.CompileEvent (proto/trainyard/v1/event.proto); the compile layer
// only hands them to a CompileEventSink, and whoever owns the rank's EventWriter turns
// them into Event lines with CompileEventJson().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainyard::engine::compile {

// Same numbers as trainyard.v1.CompileEvent.Kind.
enum class CompileEventKind : int {
  kCompile = 1,            // first compiled entry for a region key
  kRecompile = 2,          // a further entry; reason = the guard that failed
  kRecompileLimit = 3,     // recompile_limit reached; new guard sets run eager
  kGraphBreak = 4,         // a declared break between regions (reported once)
  kUnsafeSideEffect = 5,   // the region wrote state it did not receive
  kFallback = 6,           // the region key runs eager from now on
  kSummary = 7,            // per-key counters, from CompileContext::Summary()
};

struct CompileEventRecord {
  CompileEventKind kind = CompileEventKind::kCompile;
  std::string region;           // RegionKey string, e.g. "attention{dim=256,...}"
  std::vector<int32_t> layers;  // layer indices involved; empty when not a layer
  std::string reason;           // human-readable, e.g. the failed guard in words
  double compile_ms = 0;
  int32_t cache_entries = 0;    // entries in the key's cache after the event
};

// Receives compile events. Implementations decide where they go (EventWriter, a test
// recorder). Called on the thread that runs the regions; not called concurrently.
class CompileEventSink {
 public:
  virtual ~CompileEventSink() = default;
  virtual void OnCompileEvent(const CompileEventRecord& event) = 0;
};

// The proto enum name: "COMPILE", "RECOMPILE", ..., "SUMMARY".
const char* CompileEventKindName(CompileEventKind kind);

// The Event's `compile` payload in proto3 JSON with proto field names:
// {"kind":"RECOMPILE","region":...,"layers":[...],"reason":...,"compile_ms":...,
//  "cache_entries":...}. Every field is written, defaults included.
nlohmann::json CompileEventJson(const CompileEventRecord& event);

}  // namespace trainyard::engine::compile
