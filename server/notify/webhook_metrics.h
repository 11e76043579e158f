// The webhook series on the controller's /metrics, one label set per configured
// endpoint (at most kMaxWebhookEndpoints, so the cardinality is bounded by the file):
//   trainyard_webhook_deliveries_total{endpoint,result}  delivered | failed (given up)
//       | dropped (outbox full) | retried (a failed attempt that will be retried)
//   trainyard_webhook_pending{endpoint}                  deliveries queued now
//   trainyard_webhook_last_success_timestamp_seconds{endpoint}  unix time; 0: never
// Families are built once; an endpoint's series go when a reload removes it.
//
// Thread-safe.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard {

class WebhookMetrics {
 public:
  enum class Result { kDelivered, kFailed, kDropped, kRetried };

  explicit WebhookMetrics(prometheus::Registry& registry);

  // The endpoints whose series exist from now on; others are removed.
  void SetEndpoints(const std::vector<std::string>& names) ABSL_LOCKS_EXCLUDED(mu_);
  void Count(const std::string& endpoint, Result result, double n = 1) ABSL_LOCKS_EXCLUDED(mu_);
  void SetPending(const std::string& endpoint, int64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void SetLastSuccess(const std::string& endpoint, absl::Time t) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Series {
    prometheus::Counter* results[4] = {};
    prometheus::Gauge* pending = nullptr;
    prometheus::Gauge* last_success = nullptr;
  };
  prometheus::Family<prometheus::Counter>& deliveries_;
  prometheus::Family<prometheus::Gauge>& pending_;
  prometheus::Family<prometheus::Gauge>& last_success_;
  absl::Mutex mu_;
  std::map<std::string, Series> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard
