// Compile-layer telemetry: one trainyard.v1.CompileEvent (proto/trainyard/v1/event.proto)
// per compile, recompile, recompile-limit hit, graph break, unsafe side effect, eager
// fallback and end-of-run summary. The compile layer builds the generated message
// itself and hands it to a CompileEventSink; whoever owns the rank's EventWriter sends it
// as it is, so there is no second record type to keep in step with the proto.
#pragma once

#include "trainyard/v1/event.pb.h"

namespace trainyard::engine::compile {

// Receives compile events. Implementations decide where they go (EventWriter, a test
// recorder). Called on the thread that runs the regions; not called concurrently.
class CompileEventSink {
 public:
  virtual ~CompileEventSink() = default;
  virtual void OnCompileEvent(const v1::CompileEvent& event) = 0;
};

}  // namespace trainyard::engine::compile
