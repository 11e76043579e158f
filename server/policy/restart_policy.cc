#include "server/policy/restart_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

std::string RestartPolicy::TrimCause(std::string_view cause) {
  if (cause.size() <= kMaxCauseBytes) return std::string(cause);
  std::size_t cut = kMaxCauseBytes - 3;
  // Back up to a lead byte so a multi-byte character is never split.
  while (cut > 0 && (static_cast<unsigned char>(cause[cut]) & 0xC0) == 0x80) --cut;
  return std::string(cause.substr(0, cut)) + "...";
}

void RestartPolicy::AppendCause(std::string_view cause, std::vector<std::string>* causes) {
  causes->push_back(TrimCause(cause));
  if (causes->size() > static_cast<std::size_t>(kMaxStoredCauses)) {
    causes->erase(causes->begin(), causes->end() - kMaxStoredCauses);
  }
}

absl::Duration RestartPolicy::Backoff(const v1::RestartSpec& spec, int k) {
  const double base = spec.backoff_s();
  if (!(base > 0) || k < 1) return absl::ZeroDuration();  // also NaN: refused by admission
  absl::Duration wait = absl::Seconds(base);
  for (int i = 1; i < k && wait < kMaxBackoff; ++i) wait *= 2;
  return std::min(wait, kMaxBackoff);
}

RestartDecision RestartPolicy::Decide(const v1::RestartSpec& spec, int restarts_used,
                                      const std::vector<std::string>& causes, bool permanent) {
  const int max_restarts = spec.max_restarts();
  const std::string cause = causes.empty() ? std::string("unknown cause") : causes.back();
  RestartDecision d;
  if (permanent) {
    d.reason = absl::StrCat(cause, " (permanent: the job's inputs are wrong, a restart cannot succeed",
                            restarts_used < max_restarts ? "; restarts left unused)" : ")");
    return d;
  }
  if (restarts_used < max_restarts) {
    d.restart = true;
    d.reason = absl::StrCat(cause, "; restart ", restarts_used + 1, " of ", max_restarts);
    d.backoff = Backoff(spec, restarts_used + 1);
    return d;
  }
  if (causes.size() <= 1) {
    d.reason = cause;
    return d;
  }
  // causes.back() is attempt restarts_used + 1; the ones before it, the attempts before.
  const int attempts = restarts_used + 1;
  const int n = static_cast<int>(causes.size());
  const int listed = std::min(n, kCausesInReason);
  std::vector<std::string> parts;
  for (int i = n - listed; i < n; ++i) {
    parts.push_back(absl::StrCat("attempt ", attempts - (n - 1 - i), ": ", causes[i]));
  }
  d.reason = absl::StrCat("failed ", attempts, " attempts (restart.max_restarts=", max_restarts, "): ");
  if (attempts > listed) absl::StrAppend(&d.reason, "(", attempts - listed, " earlier not listed) ");
  absl::StrAppend(&d.reason, absl::StrJoin(parts, " | "));
  return d;
}

std::string RestartPolicy::BackoffReason(absl::Time until, int k, int max_restarts) {
  return absl::StrCat("restarting: backing off until ",
                      absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", until, absl::UTCTimeZone()), " (restart ", k,
                      " of ", max_restarts, ")");
}

}  // namespace trainyard
