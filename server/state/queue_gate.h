#pragma once

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "server/policy/gang_scheduler.h"
#include "server/state/tracked_job.h"

namespace trainyard {

// A check that keeps a PENDING job out of a scheduling pass's queue, as the Kubernetes
// scheduler's PreEnqueue plugins do: a held job is not placed, gets no reservation and
// holds no job behind it back. Each gate words its own pending reason. A new rule
// ("wait for job X", "at most N of this sweep") is one gate, registered with
// SchedulingCycle::AddGate (JobManager's constructor); the cycle asks the gates in
// registration order and the first that holds a job gives its reason.
//
// A gate reads the state it needs through what its constructor was given; it records
// no Effects and changes no job. Not thread-safe; called only by SchedulingCycle, under
// JobManager's state mutex.
class QueueGate {
 public:
  virtual ~QueueGate() = default;
  // A short name for logs ("restart-backoff", "quota").
  virtual const char* name() const = 0;
  // Called once at the start of each pass, before its first Hold: a gate that rations
  // the pass as a whole (at most N children of a sweep) counts here.
  virtual void BeginPass(absl::Time now) {}
  // The job's pending reason while it must stay out of the queue; nullopt to let it in.
  // `queued` is the job as the pass would queue it: its spec is the one the next
  // attempt runs (a resize's or an elastic shrink's, else the job's own).
  virtual std::optional<std::string> Hold(const TrackedJob& rt, const QueuedJob& queued, absl::Time now) = 0;
};

}  // namespace trainyard
