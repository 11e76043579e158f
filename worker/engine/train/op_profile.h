// Where a step's time goes, by operator: a RecordFunction observer that sums, per
// name, the calls and the *self* time (time inside the range minus the time of ranges
// nested in it) of every ATen operator, autograd backward node and engine range
// (RECORD_FUNCTION in the fused kernels) that runs on the thread that started it.
// Work that OpenMP threads do inside a parallel region is inside the caller's range,
// so the self times on that one thread add up to its wall time. Time outside any range
// (Python-free glue, host loops) is the wall time minus their sum.
//
// One profile at a time per process; Start and Stop from the same thread. Costs one
// clock read and a map lookup per range while it runs (nothing when stopped).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainyard::engine {

struct OpTime {
  std::string name;
  int64_t calls = 0;
  double self_ms = 0;
};

class OpProfile {
 public:
  // Installs the observer for the calling thread. Throws std::logic_error if a profile
  // is already running.
  static void Start();
  // Removes it and returns the sums, largest self time first.
  static std::vector<OpTime> Stop();
};

}  // namespace trainyard::engine
