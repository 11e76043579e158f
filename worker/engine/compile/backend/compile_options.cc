#include "worker/engine/compile/backend/compile_options.h"

#include <stdexcept>

#include "common/base/text.h"
#include "common/spec/rules.h"

namespace trainyard::engine::compile {

namespace {

// The names are the spec core's (spec::Backends(), spec::SideEffectPolicies()), which
// validated them before the engine started; a name reaching here unmapped is a spec
// value this layer was not taught (compiled_region_test maps every one).
[[noreturn]] void Unmapped(const char* what, const std::string& name, const std::vector<std::string>& known) {
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  throw std::invalid_argument(std::string("compile ") + what + " \"" + Quote(name) + "\": expected one of " + list);
}

}  // namespace

CompileBackend ParseCompileBackend(const std::string& name) {
  if (name == "eager") return CompileBackend::kEager;
  if (name == "jit") return CompileBackend::kJit;
  if (name == "cudagraph") return CompileBackend::kCudaGraph;
  Unmapped("backend", name, spec::Backends());
}

SideEffectPolicy ParseSideEffectPolicy(const std::string& name) {
  if (name == "error") return SideEffectPolicy::kError;
  if (name == "fallback") return SideEffectPolicy::kFallback;
  Unmapped("on_side_effect", name, spec::SideEffectPolicies());
}

const char* CompileBackendName(CompileBackend backend) {
  switch (backend) {
    case CompileBackend::kEager:
      return "eager";
    case CompileBackend::kJit:
      return "jit";
    case CompileBackend::kCudaGraph:
      return "cudagraph";
  }
  return "unknown";
}

const char* SideEffectPolicyName(SideEffectPolicy policy) {
  return policy == SideEffectPolicy::kError ? "error" : "fallback";
}

}  // namespace trainyard::engine::compile
