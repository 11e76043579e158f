#include "server/state/restart_backoff_gate.h"

namespace trainyard {

std::optional<std::string> RestartBackoffGate::Hold(const TrackedJob& rt, const QueuedJob& queued, absl::Time now) {
  if (now >= rt.not_before) return std::nullopt;
  return RestartPendingReason(rt, now);
}

}  // namespace trainyard
