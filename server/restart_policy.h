#pragma once

#include <string>

#include "trainyard/v1/spec.pb.h"

namespace trainyard {

struct RestartDecision {
  bool restart = false;
  // The reason recorded with the new state: RESTARTING's ("<cause>; restart 1 of 2")
  // or FAILED's (the cause itself, which becomes the job's failure_reason).
  std::string reason;
};

// Whether a failed attempt is retried. Pure: no I/O, no locks, no clock.
class RestartPolicy {
 public:
  // `restarts_used`: attempts already restarted (attempt number - 1). Restarts while
  // restarts_used < spec.max_restarts (unset counts as 0), else fails with `cause`.
  static RestartDecision Decide(const v1::RestartSpec& spec, int restarts_used,
                                const std::string& cause);
};

}  // namespace trainyard
