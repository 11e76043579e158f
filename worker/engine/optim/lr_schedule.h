// Learning rate for 1-based step s: linear warmup lr·s/warmup for s <= warmup, then
// cosine decay from lr to kMinRatio·lr, reaching the floor exactly at s = steps.
// Pure and thread-safe.
#pragma once

namespace trainyard::engine {

class LrSchedule {
 public:
  static constexpr double kMinRatio = 0.1;

  LrSchedule(double lr, int warmup_steps, int total_steps);
  double At(int step) const;

 private:
  double lr_;
  int warmup_;
  int total_;
};

}  // namespace trainyard::engine
