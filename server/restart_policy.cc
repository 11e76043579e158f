#include "server/restart_policy.h"

#include "absl/strings/str_cat.h"

namespace trainyard {

RestartDecision RestartPolicy::Decide(const v1::RestartSpec& spec, int restarts_used,
                                      const std::string& cause) {
  const int max_restarts = spec.max_restarts();
  RestartDecision d;
  if (restarts_used < max_restarts) {
    d.restart = true;
    d.reason = absl::StrCat(cause, "; restart ", restarts_used + 1, " of ", max_restarts);
  } else {
    d.reason = cause;
  }
  return d;
}

}  // namespace trainyard
