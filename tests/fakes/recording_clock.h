// A FakeClock that also records the deadline of every wait begun on it, so a test can
// wait until the code under test is waiting for exactly the time it computed (a
// backoff, a kill grace, a heartbeat) and then Advance to it, instead of sleeping.
#pragma once

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tests/fakes/fake_clock.h"

namespace trainyard::testing {

class RecordingClock : public FakeClock {
 public:
  using FakeClock::FakeClock;

  void SleepFor(absl::Duration d) override {
    Record(Now() + d);
    FakeClock::SleepFor(d);
  }

  bool AwaitWithDeadline(absl::Mutex *mu, const absl::Condition &cond,
                         absl::Time deadline) override {
    Record(deadline);
    return FakeClock::AwaitWithDeadline(mu, cond, deadline);
  }

  // Blocks until a wait with exactly this deadline has begun (or begins); false after
  // `cutoff` of real time, which only bounds how long a failing test hangs.
  bool WaitForDeadline(absl::Time deadline, absl::Duration cutoff = absl::Seconds(30)) {
    absl::MutexLock lock(&record_mu_);
    auto seen = [this, deadline]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(record_mu_) {
      for (absl::Time d : deadlines_) {
        if (d == deadline) return true;
      }
      return false;
    };
    return record_mu_.AwaitWithTimeout(absl::Condition(&seen), cutoff);
  }

  // Every deadline waited for so far, in the order the waits began.
  std::vector<absl::Time> deadlines() const {
    absl::MutexLock lock(&record_mu_);
    return deadlines_;
  }

 private:
  void Record(absl::Time deadline) {
    absl::MutexLock lock(&record_mu_);
    deadlines_.push_back(deadline);
  }

  mutable absl::Mutex record_mu_;
  std::vector<absl::Time> deadlines_ ABSL_GUARDED_BY(record_mu_);
};

}  // namespace trainyard::testing
