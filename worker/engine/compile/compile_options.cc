#include "worker/engine/compile/compile_options.h"

#include <stdexcept>

namespace trainyard::engine::compile {

CompileBackend ParseCompileBackend(const std::string& name) {
  if (name == "eager") return CompileBackend::kEager;
  if (name == "jit") return CompileBackend::kJit;
  if (name == "cudagraph") return CompileBackend::kCudaGraph;
  throw std::invalid_argument("compile backend \"" + name + "\": expected eager, jit or cudagraph");
}

SideEffectPolicy ParseSideEffectPolicy(const std::string& name) {
  if (name == "error") return SideEffectPolicy::kError;
  if (name == "fallback") return SideEffectPolicy::kFallback;
  throw std::invalid_argument("compile on_side_effect \"" + name + "\": expected error or fallback");
}

const char* CompileBackendName(CompileBackend backend) {
  switch (backend) {
    case CompileBackend::kEager: return "eager";
    case CompileBackend::kJit: return "jit";
    case CompileBackend::kCudaGraph: return "cudagraph";
  }
  return "unknown";
}

const char* SideEffectPolicyName(SideEffectPolicy policy) {
  return policy == SideEffectPolicy::kError ? "error" : "fallback";
}

}  // namespace trainyard::engine::compile
