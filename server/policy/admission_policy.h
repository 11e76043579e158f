#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "server/policy/gang_scheduler.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// What admission may know about the fleet: plain values, taken by the caller.
struct FleetView {
  int connected_slots = 0;  // slots of every connected worker, free or not
  // Every connected worker with all of its slots (free or not): a job that could not
  // be placed even on this idle fleet would wait forever and, the queue being strict,
  // hold back every job behind it. Empty: only the slot total is checked.
  std::vector<WorkerSnapshot> idle_workers;
  // The connected worker with the most memory (Register.memory_bytes); 0: none reported.
  std::string largest_memory_worker;
  int64_t largest_memory_bytes = 0;
};

// Admission of a submitted job, in two layers:
//   1. the spec core (common/spec/): preset and defaults, then every rule a rank also
//      applies when it loads the job (spec_agreement_test checks the two agree on
//      10,000 random specs), so no job is admitted that every rank would refuse;
//   2. the fleet: the world size dp·tp must fit in the connected slots, and the gang
//      must be placeable on the idle fleet (a TP group inside one worker), one rank's
//      estimated memory (spec::EstimateRankMemory) must fit the largest worker; the workers of
//      this controller are CPU-only, so resources.device=cuda is refused; they share no
//      files with the controller, so datasets other than synthetic are refused.
// Pure: no I/O, no locks, no clock; the only place in server/ that applies spec
// defaults and validation.
class AdmissionPolicy {
 public:
  // The normalised spec, or the first error: INVALID_ARGUMENT naming the field and the
  // rule (including a world size larger than fleet.connected_slots), UNIMPLEMENTED for
  // legal settings this release or this fleet cannot run, naming the field.
  static absl::StatusOr<v1::JobSpec> Admit(const v1::JobSpec& submitted, const FleetView& fleet);
};

}  // namespace trainyard
