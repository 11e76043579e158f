// Pure decisions of webhook delivery, on plain values: which webhook kinds a stored
// event is, what an HTTP answer (or a transport failure) means for a delivery, how long
// to wait before the next attempt, and when to give up.
//
// Thread-safe (stateless).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/http/http_client.h"
#include "server/notify/webhook_file.h"
#include "trainyard/v1/event.pb.h"

namespace trainyard {

// The webhook kinds of a stored event (docs/webhooks.md, "Event kinds"):
//   state_change  every JobStateChange;
//   preemption    a JobStateChange to RESTARTING whose reason is an eviction
//                 ("preempted by job-..." or "drained from ...");
//   restart       a JobStateChange to RESTARTING that is not an eviction (a failure
//                 under restart.max_restarts, a resize, a refused slot);
//   stall         a Stall (a rank stuck in a collective or without step progress);
//   checkpoint    a CheckpointSaved, which is stored only once the controller accepted it.
// 0 for every other event.
uint32_t WebhookKindsOf(const v1::Event& event);

enum class DeliveryOutcome {
  kDelivered,  // 2xx
  kRetry,      // 5xx, 408, 429, a timeout, a refused or reset connection, TLS, a huge answer
  kGiveUp,     // 3xx (redirects are not followed), any other 4xx, an unusable URL
  kStopped,    // the controller is stopping: not an attempt
};

struct DeliveryVerdict {
  DeliveryOutcome outcome;
  std::string error;  // empty when delivered; else what happened, for status and logs
};

// What one POST's result means.
DeliveryVerdict ClassifyDelivery(const absl::StatusOr<http::Response>& result);

// The wait after `attempts` failed attempts (1, 2, ...): backoff_initial doubled per
// attempt after the first, at most backoff_max.
absl::Duration WebhookBackoff(const WebhookDelivery& delivery, int attempts);

// Why a delivery that failed `attempts` times for an event created at `created` is
// given up at `now`; empty while it may be retried.
std::string WebhookGiveUpReason(const WebhookDelivery& delivery, int attempts, absl::Time created, absl::Time now);

}  // namespace trainyard
