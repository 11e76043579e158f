// Test fake: keeps every compile event in order.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/engine/compile/events/compile_event.h"

namespace trainyard::engine::compile {

class RecordingSink : public CompileEventSink {
 public:
  void OnCompileEvent(const v1::CompileEvent& event) override { events.push_back(event); }

  std::vector<v1::CompileEvent> OfKind(v1::CompileEvent::Kind kind) const {
    std::vector<v1::CompileEvent> out;
    for (const auto& e : events) {
      if (e.kind() == kind) out.push_back(e);
    }
    return out;
  }
  size_t Count(v1::CompileEvent::Kind kind) const { return OfKind(kind).size(); }

  std::vector<v1::CompileEvent> events;
};

// An event's layers as a vector, for comparisons.
inline std::vector<int32_t> Layers(const v1::CompileEvent& event) {
  return std::vector<int32_t>(event.layers().begin(), event.layers().end());
}

}  // namespace trainyard::engine::compile
