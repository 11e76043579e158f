// A Clock that moves only when a test calls Advance. Threads blocked in SleepFor or
// AwaitWithDeadline wake when the fake time passes their deadline (or, for Await, when
// the condition holds), so tests drive timeouts and backoff without sleeping.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"

namespace trainyard::testing {

class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}

  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

  void SleepFor(absl::Duration d) override {
    absl::MutexLock lock(&mu_);
    const absl::Time until = now_ + d;
    ++sleepers_;
    auto reached = [this, until]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return now_ >= until; };
    mu_.Await(absl::Condition(&reached));
    --sleepers_;
  }

  // Polls `cond` under `mu` in short real-time slices and returns once it holds or the
  // fake time has reached `deadline` (which only Advance makes happen).
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override {
    {
      absl::MutexLock lock(&mu_);
      ++sleepers_;
    }
    bool held = false;
    while (!(held = mu->AwaitWithTimeout(cond, absl::Milliseconds(1)))) {
      if (Now() >= deadline) break;
    }
    absl::MutexLock lock(&mu_);
    --sleepers_;
    return held;
  }

  // Blocks until at least `n` threads wait in SleepFor or AwaitWithDeadline: a test
  // calls it before Advance so that the wait it means to cut short has begun.
  void WaitForSleepers(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sleepers_ >= n; };
    mu_.Await(absl::Condition(&enough));
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard::testing
