#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

// Collects events into EventBatches and keeps every sealed batch until the
// controller acknowledges it, so they can be resent in order after a reconnect.
// It does no I/O and keeps no time of its own: callers pass `now`. Thread-safe.
class EventOutbox {
 public:
  struct Options {
    int max_batch_events = 64;
    absl::Duration flush_interval = absl::Milliseconds(100);
    // Bound on events held while the controller is unreachable; past it the
    // oldest unacked batches are dropped (and counted) rather than growing
    // without limit.
    int64_t max_held_events = 200000;
  };

  explicit EventOutbox(Options options);

  void Add(trainyard::v1::Event event, absl::Time now);

  // Seals the pending events into a new batch when there are max_batch_events
  // of them, the oldest has waited flush_interval, or `force` is set (and any
  // are pending). The batch stays held until Ack.
  std::optional<trainyard::v1::EventBatch> SealReady(absl::Time now, bool force = false);

  // When the next batch becomes due, or InfiniteFuture when nothing is pending.
  absl::Time NextDeadline() const;

  // Forgets the batch with this id; unknown ids (already acked, dropped) are
  // ignored.
  void Ack(int64_t batch_id);

  // Sealed, unacknowledged batches, oldest first.
  std::vector<trainyard::v1::EventBatch> Unacked() const;

  // Attempts with a final rank state (EXITED, FAILED, KILLED) among the held events,
  // pending or unacknowledged, with those ranks, as RunningAttempt with ended = true:
  // what a re-registering worker reports for attempts that ended while the controller
  // was away.
  std::vector<trainyard::v1::RunningAttempt> EndedAttempts() const;

  // True when nothing is pending or awaiting an ack.
  bool Empty() const;
  int64_t dropped_events() const;

 private:
  const Options options_;
  mutable absl::Mutex mu_;
  std::vector<trainyard::v1::Event> pending_ ABSL_GUARDED_BY(mu_);
  absl::Time oldest_pending_ ABSL_GUARDED_BY(mu_);
  std::deque<trainyard::v1::EventBatch> unacked_ ABSL_GUARDED_BY(mu_);
  int64_t held_events_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_batch_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t dropped_events_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard
