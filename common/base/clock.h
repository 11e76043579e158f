#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace trainyard {

// Time source and the waits that depend on it, injected through constructors so tests
// move time explicitly (tests/fakes/fake_clock.h) instead of sleeping for it to pass.
// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  // Blocks the calling thread until this clock has moved `d` past the call.
  virtual void SleepFor(absl::Duration d) = 0;
  // With `mu` held: waits until `cond` holds or this clock reaches `deadline`, and
  // returns cond's value. `mu` is released while waiting, as absl::Mutex::Await does.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline) = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override {
    return mu->AwaitWithDeadline(cond, deadline);
  }
};

// The process-wide real clock, for wiring in main() and as a default argument.
inline Clock* SystemClock() {
  static RealClock* clock = new RealClock();
  return clock;
}

}  // namespace trainyard
