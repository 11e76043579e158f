#include "worker/engine/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace trainyard::engine {

LrSchedule::LrSchedule(double lr, int warmup_steps, int total_steps)
    : lr_(lr), warmup_(warmup_steps), total_(total_steps) {}

double LrSchedule::At(int step) const {
  if (warmup_ > 0 && step <= warmup_) return lr_ * step / warmup_;
  const int decay_steps = total_ - warmup_;
  if (decay_steps <= 0) return lr_ * kMinRatio;
  const double progress = std::clamp(static_cast<double>(step - warmup_) / decay_steps, 0.0, 1.0);
  const double min_lr = lr_ * kMinRatio;
  return min_lr + (lr_ - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace trainyard::engine
