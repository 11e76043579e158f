#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tests/support/temp_dir.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard::testing {

// Thread-safe event sink for tests; Wait* only bound how long a failing test
// hangs.
class EventCollector {
 public:
  void Add(trainyard::v1::Event e) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(e));
  }
  std::vector<trainyard::v1::Event> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  // Waits until `pred(events)` holds; false after a generous cutoff.
  bool WaitFor(const std::function<bool(const std::vector<trainyard::v1::Event> &)> &pred,
               absl::Duration cutoff = absl::Seconds(30)) {
    absl::MutexLock lock(&mu_);
    struct Arg {
      const EventCollector *self;
      const std::function<bool(const std::vector<trainyard::v1::Event> &)> *pred;
    } arg{this, &pred};
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](Arg *a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return (*a->pred)(a->self->events_); },
            &arg),
        cutoff);
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<trainyard::v1::Event> events_ ABSL_GUARDED_BY(mu_);
};

inline bool HasState(const std::vector<trainyard::v1::Event> &events, int rank,
                     trainyard::v1::RankState::State state) {
  for (const auto &e : events) {
    if (e.rank() == rank && e.has_rank_state() && e.rank_state().state() == state) return true;
  }
  return false;
}

// The header of a trace artifact `name` of job1's rank `rank`, attempt `attempt`, from w1.
inline trainyard::v1::ArtifactHeader TraceHeader(const std::string &name, int attempt, int rank) {
  trainyard::v1::ArtifactHeader h;
  h.set_job_id("job1");
  h.set_attempt(attempt);
  h.set_rank(rank);
  h.set_name(name);
  h.set_kind("trace");
  h.set_worker("w1");
  return h;
}

}  // namespace trainyard::testing
