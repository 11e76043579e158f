#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/state/job_state_machine.h"
#include "server/state/queue_gate.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// A sweep's max_concurrent: at most N of its children hold or are about to take slots
// at once (Slurm's --array=...%N). The children that count are those SCHEDULED,
// RUNNING or RESTARTING, those that ended but whose ranks still hold slots, and those
// this pass lets into the queue: a pass may place
// every queued job, so the gate rations the pass itself. At the start of each pass
// (BeginPass) it lets in, per sweep, the PENDING children with the lowest indices up
// to N minus the active ones, and Hold keeps the others out ("sweep sweep-1: 2 of its
// children running or starting (max_concurrent 2)"). A child let in but held by a later
// gate or left unplaced keeps its turn; the sweep then runs below N for that pass,
// never above it.
//
// It owns the table of sweeps (each stored once, with all its children, and never
// changed); what it counts is read from the job table, so a controller restart that
// reloads both loses nothing.
//
// Not thread-safe; used only under JobManager's state mutex.
class SweepGate : public QueueGate {
 public:
  explicit SweepGate(const JobStateMachine* jobs) : jobs_(jobs) {}

  const char* name() const override { return "sweep"; }
  void BeginPass(absl::Time now) override;
  std::optional<std::string> Hold(const TrackedJob& rt, const QueuedJob& queued, absl::Time now) override;

  // A stored sweep (Submit, Recover).
  void Add(v1::Sweep sweep);
  const v1::Sweep* Find(const std::string& id) const;
  const std::map<std::string, v1::Sweep>& sweeps() const { return sweeps_; }

  // Whether a job in `state` counts against its sweep's max_concurrent.
  static bool Active(v1::Job::State state);

 private:
  const JobStateMachine* const jobs_;
  std::map<std::string, v1::Sweep> sweeps_;
  // Per limited sweep, this pass: the children it lets in, and the active ones plus those.
  std::set<std::string> admitted_;
  std::map<std::string, int> active_;
};

}  // namespace trainyard
