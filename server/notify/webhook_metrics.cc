#include "server/notify/webhook_metrics.h"

#include <set>

namespace trainyard {

WebhookMetrics::WebhookMetrics(prometheus::Registry& registry)
    : deliveries_(prometheus::BuildCounter()
                      .Name("trainyard_webhook_deliveries_total")
                      .Help("Webhook deliveries by result: delivered (2xx), failed (given up or refused), dropped "
                            "(the endpoint's outbox was full), retried (a failed attempt to be retried)")
                      .Register(registry)),
      pending_(prometheus::BuildGauge()
                   .Name("trainyard_webhook_pending")
                   .Help("Webhook deliveries queued for the endpoint")
                   .Register(registry)),
      last_success_(prometheus::BuildGauge()
                        .Name("trainyard_webhook_last_success_timestamp_seconds")
                        .Help("Unix time of the endpoint's last 2xx answer; 0 when it never answered one")
                        .Register(registry)) {}

void WebhookMetrics::SetEndpoints(const std::vector<std::string>& names) {
  absl::MutexLock lock(&mu_);
  std::set<std::string> keep(names.begin(), names.end());
  for (auto it = series_.begin(); it != series_.end();) {
    if (keep.count(it->first) != 0) {
      ++it;
      continue;
    }
    for (prometheus::Counter* c : it->second.results) deliveries_.Remove(c);
    pending_.Remove(it->second.pending);
    last_success_.Remove(it->second.last_success);
    it = series_.erase(it);
  }
  static constexpr const char* kResults[] = {"delivered", "failed", "dropped", "retried"};
  for (const std::string& name : keep) {
    if (series_.count(name) != 0) continue;
    Series& s = series_[name];
    for (int i = 0; i < 4; ++i) s.results[i] = &deliveries_.Add({{"endpoint", name}, {"result", kResults[i]}});
    s.pending = &pending_.Add({{"endpoint", name}});
    s.last_success = &last_success_.Add({{"endpoint", name}});
  }
}

void WebhookMetrics::Count(const std::string& endpoint, Result result, double n) {
  absl::MutexLock lock(&mu_);
  auto it = series_.find(endpoint);
  if (it != series_.end()) it->second.results[static_cast<int>(result)]->Increment(n);
}

void WebhookMetrics::SetPending(const std::string& endpoint, int64_t n) {
  absl::MutexLock lock(&mu_);
  auto it = series_.find(endpoint);
  if (it != series_.end()) it->second.pending->Set(static_cast<double>(n));
}

void WebhookMetrics::SetLastSuccess(const std::string& endpoint, absl::Time t) {
  absl::MutexLock lock(&mu_);
  auto it = series_.find(endpoint);
  if (it != series_.end()) it->second.last_success->Set(absl::ToDoubleSeconds(t - absl::UnixEpoch()));
}

}  // namespace trainyard
