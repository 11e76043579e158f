#include "server/state/event_rate_limit.h"

#include <algorithm>
#include <utility>

namespace trainyard {

bool IsRateLimitedKind(const v1::Event& event) {
  return event.has_compile() || event.has_log();
}

EventRateLimiter::EventRateLimiter(double per_second, double burst_seconds)
    : per_second_(per_second), burst_seconds_(burst_seconds) {}

int EventRateLimiter::Admit(const std::string& job_id, int world, absl::Time now,
                            std::vector<v1::Event>* events) {
  if (per_second_ <= 0) return 0;
  const double rate = per_second_ * std::max(1, world);
  const double capacity = std::max(1.0, rate * burst_seconds_);
  auto [it, inserted] = buckets_.try_emplace(job_id);
  Bucket& b = it->second;
  if (inserted) {
    b.tokens = capacity;
    b.refilled = now;
  } else {
    if (now > b.refilled) b.tokens += absl::ToDoubleSeconds(now - b.refilled) * rate;
    b.tokens = std::min(capacity, b.tokens);  // also when a smaller attempt follows a larger one
    b.refilled = std::max(b.refilled, now);
  }
  int dropped = 0;
  std::vector<v1::Event> kept;
  kept.reserve(events->size());
  for (auto& e : *events) {
    if (IsRateLimitedKind(e)) {
      if (b.tokens < 1) {
        ++dropped;
        continue;
      }
      b.tokens -= 1;
    }
    kept.push_back(std::move(e));
  }
  *events = std::move(kept);
  return dropped;
}

}  // namespace trainyard
