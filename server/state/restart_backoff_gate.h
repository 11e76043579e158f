#pragma once

#include <optional>
#include <string>

#include "server/state/queue_gate.h"

namespace trainyard {

// Holds a job restarting after a failure until its backoff ends (TrackedJob::not_before,
// restart.backoff_s·2^(k-1) from the failure): "backing off until 12:00:05Z after ...".
// A resize, an eviction or a refused Assign restarts without backoff.
class RestartBackoffGate : public QueueGate {
 public:
  const char* name() const override { return "restart-backoff"; }
  std::optional<std::string> Hold(const TrackedJob& rt, const QueuedJob& queued, absl::Time now) override;
};

}  // namespace trainyard
