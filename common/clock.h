#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace trainyard {

// Time source, injected so tests can move time without sleeping.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

}  // namespace trainyard
