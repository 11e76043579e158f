// A per-job cap on the chatty events a job's workers may store: log lines and compile
// events. Each job has a token bucket of `per_second` × its world size tokens a second
// (a budget per rank, so a 1,024-rank job is not starved by a cap sized for a debug
// job) holding at most `burst_seconds` worth (enough for a worker's replay after a
// controller outage); each such event takes one token and the excess is dropped
// (counted by the caller as trainyard_events_dropped_total{reason="rate_limited"}),
// while the worker's stream stays open and its batch is acknowledged.
// Never limited: events that carry state (rank states, checkpoints, stalls; artifact
// refs are refused anyway), where a drop would lose a transition, and step metrics
// and validations, the job's record (every step once; one validation per
// validation.freq steps), which are bounded by its steps.
//
// Why per job: one runaway job (a rank printing in a loop, a forged flood) must not
// fill the store or starve the ingest of every other job.
//
// Not thread-safe; owned by JobStateMachine, used under JobManager's state lock.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "trainyard/v1/event.pb.h"

namespace trainyard {

inline constexpr char kDropRateLimited[] = "rate_limited";

// Log lines and compile events.
bool IsRateLimitedKind(const v1::Event& event);

class EventRateLimiter {
 public:
  // per_second: per rank; <= 0: no limit.
  EventRateLimiter(double per_second, double burst_seconds);

  // Removes from `events` (one job's of `world` ranks, in order) the limited kinds past
  // the job's budget at `now`, keeping the order of the rest; returns how many were
  // removed.
  int Admit(const std::string& job_id, int world, absl::Time now, std::vector<v1::Event>* events);
  double per_second() const { return per_second_; }

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time refilled;
  };
  const double per_second_;
  const double burst_seconds_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace trainyard
