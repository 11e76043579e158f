#include "server/notify/webhook_policy.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/text.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

uint32_t WebhookKindsOf(const v1::Event& event) {
  switch (event.payload_case()) {
    case v1::Event::kStall:
      return kWebhookStall;
    case v1::Event::kCheckpoint:
      return kWebhookCheckpoint;
    case v1::Event::kJobState: {
      uint32_t kinds = kWebhookStateChange;
      if (event.job_state().state() == v1::Job::RESTARTING) {
        // The reasons EvictionManager writes for an eviction (EvictionOf in
        // server/state/tracked_job.cc reads them back the same way at recovery).
        const std::string& reason = event.job_state().reason();
        const bool eviction =
            absl::StartsWith(reason, "preempted by job-") || absl::StartsWith(reason, "drained from ");
        kinds |= eviction ? kWebhookPreemption : kWebhookRestart;
      }
      return kinds;
    }
    default:
      return 0;
  }
}

DeliveryVerdict ClassifyDelivery(const absl::StatusOr<http::Response>& result) {
  if (!result.ok()) {
    const std::string why(result.status().message());
    switch (result.status().code()) {
      case absl::StatusCode::kCancelled:
        return {DeliveryOutcome::kStopped, why};
      case absl::StatusCode::kInvalidArgument:
        return {DeliveryOutcome::kGiveUp, why};
      default:  // refused, reset, DNS, TLS, timeout, an answer past the cap
        return {DeliveryOutcome::kRetry, why};
    }
  }
  const long code = result->status;
  if (code >= 200 && code < 300) return {DeliveryOutcome::kDelivered, ""};
  const std::string what =
      absl::StrCat("HTTP ", code, result->body.empty() ? "" : absl::StrCat(": ", Quoted(result->body)));
  if (code >= 300 && code < 400) {
    return {DeliveryOutcome::kGiveUp, absl::StrCat(what, " (a redirect is not followed: fix the endpoint's url)")};
  }
  if (code == 408 || code == 429) return {DeliveryOutcome::kRetry, what};
  if (code >= 400 && code < 500) return {DeliveryOutcome::kGiveUp, absl::StrCat(what, " (refused; not retried)")};
  return {DeliveryOutcome::kRetry, what};
}

absl::Duration WebhookBackoff(const WebhookDelivery& delivery, int attempts) {
  absl::Duration wait = delivery.backoff_initial;
  for (int i = 1; i < attempts && wait < delivery.backoff_max; ++i) wait *= 2;
  return std::min(wait, delivery.backoff_max);
}

std::string WebhookGiveUpReason(const WebhookDelivery& delivery, int attempts, absl::Time created, absl::Time now) {
  if (attempts >= delivery.max_attempts) return absl::StrCat("gave up after ", attempts, " attempts");
  if (now - created > delivery.max_age) {
    return absl::StrCat("gave up after ", attempts, " attempts: the event is older than max_age_hours (",
                        absl::ToDoubleHours(delivery.max_age), ")");
  }
  return "";
}

}  // namespace trainyard
