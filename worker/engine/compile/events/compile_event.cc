#include "worker/engine/compile/events/compile_event.h"

#include <cmath>

namespace trainyard::engine::compile {

const char* CompileEventKindName(CompileEventKind kind) {
  switch (kind) {
    case CompileEventKind::kCompile: return "COMPILE";
    case CompileEventKind::kRecompile: return "RECOMPILE";
    case CompileEventKind::kRecompileLimit: return "RECOMPILE_LIMIT";
    case CompileEventKind::kGraphBreak: return "GRAPH_BREAK";
    case CompileEventKind::kUnsafeSideEffect: return "UNSAFE_SIDE_EFFECT";
    case CompileEventKind::kFallback: return "FALLBACK";
    case CompileEventKind::kSummary: return "SUMMARY";
  }
  return "KIND_UNSPECIFIED";
}

nlohmann::json CompileEventJson(const CompileEventRecord& event) {
  // compile_ms is a measured duration, so it is always finite; guard anyway because
  // proto3 JSON has no literal for NaN/Infinity and nlohmann would write null.
  nlohmann::json compile_ms = event.compile_ms;
  if (std::isnan(event.compile_ms)) {
    compile_ms = "NaN";
  } else if (std::isinf(event.compile_ms)) {
    compile_ms = event.compile_ms > 0 ? "Infinity" : "-Infinity";
  }
  return {{"kind", CompileEventKindName(event.kind)},
          {"region", event.region},
          {"layers", event.layers},
          {"reason", event.reason},
          {"compile_ms", compile_ms},
          {"cache_entries", event.cache_entries}};
}

}  // namespace trainyard::engine::compile
