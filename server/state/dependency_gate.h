#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "common/spec/dependencies.h"
#include "server/state/effects.h"
#include "server/state/job_state_machine.h"
#include "server/state/queue_gate.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// job.after (common/spec/dependencies.h): a job waits PENDING, out of the queue, until
// each job it names has done what its condition asks ("waiting for job-3 to succeed
// (job-3 is RUNNING)"), and fails at once when a condition can no longer hold: the
// dependency ended otherwise, or is not in the job table. Jobs are never deleted from
// the controller, so the second happens only to a store edited by hand.
//
// At submit (CheckNew) it refuses what could never run: unknown jobs and jobs of
// another owner the caller may not see (one "not found", as every other call words
// it), conditions that can no longer hold, and chains deeper than
// spec::kMaxDependencyDepth. A job names only jobs that exist before it and its spec
// never changes, so the graph cannot hold a cycle; Depth still refuses one it finds
// (a store edited by hand) rather than loop.
//
// Everything it decides is read from the job table (states, start times, specs), so it
// holds no state of its own and a controller restart loses nothing; Recover calls
// FailUnsatisfiable for a crash between a dependency's end and its dependents' failure.
//
// Not thread-safe; used only under JobManager's state mutex.
class DependencyGate : public QueueGate {
 public:
  // Registers its ended-job listener on `jobs`.
  explicit DependencyGate(JobStateMachine* jobs);

  const char* name() const override { return "dependencies"; }
  std::optional<std::string> Hold(const TrackedJob& rt, const QueuedJob& queued, absl::Time now) override;

  // Whether a new job of this spec may be stored. `may_see(owner)`: whether the
  // submitter may name a job of that owner (null: any). NOT_FOUND for a job that does
  // not exist or may not be seen, FAILED_PRECONDITION for a condition that can no
  // longer hold, INVALID_ARGUMENT for a bad list or a chain past the depth limit.
  absl::Status CheckNew(const v1::JobSpec& spec, const std::function<bool(const std::string&)>& may_see) const;

  // Fails every waiting job with a condition that can no longer hold.
  void FailUnsatisfiable(Effects* fx);

  // The jobs of the longest chain that ends at job `id` (1: it waits for nobody);
  // nullopt, with `why` set, for a cycle or a list that does not parse.
  std::optional<int> Depth(const std::string& id, std::string* why) const;

 private:
  enum class Verdict { kHolds, kWaits, kNever };
  static Verdict Judge(const TrackedJob* dep, spec::AfterCondition condition);
  // Why `entry` can never hold (Judge said kNever), for the dependent's failure.
  static std::string NeverReason(const TrackedJob* dep, const spec::AfterEntry& entry);
  // Fails `rt` when it waits and one of its conditions can no longer hold.
  void FailIfUnsatisfiable(TrackedJob& rt, Effects* fx);
  std::optional<int> DepthOf(const std::string& id, std::map<std::string, int>* memo, std::set<std::string>* path,
                             std::string* why) const;

  JobStateMachine* const jobs_;
};

}  // namespace trainyard
