#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace trainyard::mlflow {

// The MLflow exporter's series: trainyard_mlflow_outbox_events (committed events of
// tracked jobs MLflow has not acknowledged yet: the outbox's depth),
// trainyard_mlflow_outbox_jobs (jobs with something left to send),
// trainyard_mlflow_requests_total{outcome="ok"|"failed"} and
// trainyard_mlflow_events_sent_total. Thread-safe (prometheus-cpp).
class MlflowMetrics {
 public:
  explicit MlflowMetrics(prometheus::Registry& registry);

  void SetOutbox(double events, double jobs) {
    outbox_events_.Set(events);
    outbox_jobs_.Set(jobs);
  }
  void RequestDone(bool ok) { (ok ? requests_ok_ : requests_failed_).Increment(); }
  void EventsSent(double n) { events_sent_.Increment(n); }

 private:
  prometheus::Gauge& outbox_events_;
  prometheus::Gauge& outbox_jobs_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& requests_ok_;
  prometheus::Counter& requests_failed_;
  prometheus::Counter& events_sent_;
};

}  // namespace trainyard::mlflow
