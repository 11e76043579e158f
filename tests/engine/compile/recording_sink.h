// Test fake: keeps every compile event in order.
#pragma once

#include <vector>

#include "worker/engine/compile/events/compile_event.h"

namespace trainyard::engine::compile {

class RecordingSink : public CompileEventSink {
 public:
  void OnCompileEvent(const CompileEventRecord& event) override { events.push_back(event); }

  std::vector<CompileEventRecord> OfKind(CompileEventKind kind) const {
    std::vector<CompileEventRecord> out;
    for (const auto& e : events) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
  size_t Count(CompileEventKind kind) const { return OfKind(kind).size(); }

  std::vector<CompileEventRecord> events;
};

}  // namespace trainyard::engine::compile
