#include "server/notify/webhook_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/http/http_client.h"
#include "common/proto_time.h"
#include "server/notify/webhook_payload.h"
#include "server/notify/webhook_policy.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

constexpr int kScanBatch = 256;
// A store error on a sender or the scan thread is retried after this long.
constexpr absl::Duration kStoreRetry = absl::Seconds(1);
// A receiver's answer is read only to classify and report it.
constexpr std::size_t kMaxAnswerBytes = 64 << 10;

bool Wants(const WebhookEndpoint& e, const std::string& owner) {
  return e.owners.empty() || std::find(e.owners.begin(), e.owners.end(), owner) != e.owners.end();
}

std::vector<std::string> Names(const WebhookConfig& config) {
  std::vector<std::string> names;
  for (const auto& e : config.endpoints) names.push_back(e.name);
  return names;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WebhookManager>> WebhookManager::Start(WebhookConfig config, std::string file,
                                                                      const std::string& db_path,
                                                                      WebhookManagerDeps deps) {
  TY_ASSIGN_OR_RETURN(std::unique_ptr<WebhookStore> store, WebhookStore::Open(db_path));
  TY_ASSIGN_OR_RETURN(auto removed, store->KeepEndpoints(Names(config)));
  for (const auto& [name, n] : removed) {
    spdlog::warn("webhooks: endpoint {} is no longer in {}: its {} queued deliveries were removed", name, file, n);
  }
  if (deps.metrics != nullptr) deps.metrics->SetEndpoints(Names(config));
  std::unique_ptr<WebhookManager> m(new WebhookManager(std::make_shared<const WebhookConfig>(std::move(config)),
                                                       std::move(file), std::move(store), std::move(deps)));
  {
    absl::MutexLock lock(&m->scan_mu_);
    m->StartSendersLocked();
  }
  m->scan_thread_ = std::thread([raw = m.get()] { raw->ScanLoop(); });
  return m;
}

WebhookManager::WebhookManager(std::shared_ptr<const WebhookConfig> config, std::string file,
                               std::unique_ptr<WebhookStore> store, WebhookManagerDeps deps)
    : file_(std::move(file)), store_(std::move(store)), deps_(std::move(deps)), config_(std::move(config)) {}

WebhookManager::~WebhookManager() { Stop(); }

void WebhookManager::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (scan_thread_.joinable()) scan_thread_.join();
  absl::MutexLock lock(&scan_mu_);
  StopSendersLocked();
}

void WebhookManager::StartSendersLocked() {
  std::shared_ptr<const WebhookConfig> config;
  {
    absl::MutexLock lock(&mu_);
    config = config_;
  }
  for (const WebhookEndpoint& e : config->endpoints) {
    auto sender = std::make_unique<Sender>();
    sender->endpoint = e;
    Sender* raw = sender.get();
    sender->thread = std::thread([this, raw] { SendLoop(raw); });
    senders_[e.name] = std::move(sender);
    RefreshPending(e.name);
  }
}

void WebhookManager::StopSendersLocked() {
  {
    absl::MutexLock lock(&mu_);  // a waiting sender re-checks its condition on release
    for (auto& [name, s] : senders_) s->stop.store(true);
  }
  for (auto& [name, s] : senders_) {
    if (s->thread.joinable()) s->thread.join();
  }
  senders_.clear();
}

void WebhookManager::OnCommitted(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || !queued_.insert(job_id).second) return;
  queue_.push_back(job_id);
  ++enqueued_;
}

void WebhookManager::AwaitScanned() {
  absl::MutexLock lock(&mu_);
  auto caught_up = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return caught_up_ || stopping_; };
  mu_.Await(absl::Condition(&caught_up));
  const uint64_t target = enqueued_;
  auto done = [this, target]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return scanned_ >= target || stopping_; };
  mu_.Await(absl::Condition(&done));
}

absl::Status WebhookManager::Reload(WebhookConfig config) {
  absl::MutexLock scan(&scan_mu_);
  StopSendersLocked();
  auto removed = store_->KeepEndpoints(Names(config));
  if (removed.ok()) {
    for (const auto& [name, n] : *removed) {
      spdlog::warn("webhooks: endpoint {} was removed by the reload: its {} queued deliveries went", name, n);
    }
  }
  if (deps_.metrics != nullptr) deps_.metrics->SetEndpoints(Names(config));
  {
    absl::MutexLock lock(&mu_);
    config_ = std::make_shared<const WebhookConfig>(std::move(config));
  }
  StartSendersLocked();
  return removed.status();
}

absl::StatusOr<v1::GetWebhookStatusResponse> WebhookManager::Status() {
  std::shared_ptr<const WebhookConfig> config;
  {
    absl::MutexLock lock(&mu_);
    config = config_;
  }
  TY_ASSIGN_OR_RETURN(auto stats, store_->Stats());
  v1::GetWebhookStatusResponse response;
  response.set_configured(true);
  response.set_file(file_);
  for (const WebhookEndpoint& e : config->endpoints) {
    v1::WebhookEndpointStatus* out = response.add_endpoints();
    out->set_name(e.name);
    out->set_url(http::RedactUrl(e.url));
    for (const std::string& kind : WebhookKindNames(e.kinds)) out->add_events(kind);
    for (const std::string& owner : e.owners) out->add_owners(owner);
    const WebhookStore::EndpointStats& s = stats[e.name];
    out->set_pending(s.pending);
    out->set_delivered(s.delivered);
    out->set_failed(s.failed);
    out->set_dropped(s.dropped);
    out->set_last_error(s.last_error);
    if (s.last_error_time) *out->mutable_last_error_time() = ToProtoTime(*s.last_error_time);
    if (s.last_success_time) *out->mutable_last_success_time() = ToProtoTime(*s.last_success_time);
  }
  return response;
}

void WebhookManager::Begin() {
  absl::MutexLock lock(&mu_);
  begun_ = true;
}

void WebhookManager::ScanLoop() {
  {
    absl::MutexLock lock(&mu_);
    auto go = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return begun_ || stopping_; };
    mu_.Await(absl::Condition(&go));
    if (stopping_) return;
  }
  while (true) {
    absl::Status caught = CatchUp();
    if (caught.ok()) {
      absl::MutexLock lock(&mu_);
      caught_up_ = true;
      break;
    }
    spdlog::error("webhooks: reading the jobs to catch up on: {}", std::string(caught.message()));
    absl::MutexLock lock(&mu_);
    if (deps_.clock->AwaitWithDeadline(&mu_, absl::Condition(&stopping_), deps_.clock->Now() + kStoreRetry)) return;
  }
  while (true) {
    std::string job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_.erase(job);
    }
    absl::Status s;
    {
      absl::MutexLock scan(&scan_mu_);
      s = ScanJob(job);
    }
    absl::MutexLock lock(&mu_);
    if (!s.ok()) {
      // Left at its scanned seq: queued again, it is rescanned from there.
      spdlog::error("webhooks: job={} queueing deliveries: {}", job, std::string(s.message()));
      if (deps_.clock->AwaitWithDeadline(&mu_, absl::Condition(&stopping_), deps_.clock->Now() + kStoreRetry)) return;
      if (queued_.insert(job).second) queue_.push_back(job);
      continue;
    }
    ++scanned_;
  }
}

absl::Status WebhookManager::CatchUp() {
  TY_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, deps_.events->LoadJobs());
  TY_ASSIGN_OR_RETURN(bool initialized, store_->Initialized());
  if (!initialized) {
    std::map<std::string, int64_t> last;
    for (const v1::Job& job : jobs) last[job.id()] = deps_.events->LastSeq(job.id());
    spdlog::info("webhooks: first start on this data dir: the events of {} existing jobs are not sent", jobs.size());
    return store_->MarkInitialized(last);
  }
  int behind = 0;
  for (const v1::Job& job : jobs) {
    TY_ASSIGN_OR_RETURN(int64_t scanned, store_->ScannedSeq(job.id()));
    if (deps_.events->LastSeq(job.id()) <= scanned) continue;
    ++behind;
    OnCommitted(job.id());
  }
  if (behind > 0) spdlog::info("webhooks: {} jobs have events committed but not yet queued; queueing them", behind);
  return absl::OkStatus();
}

absl::Status WebhookManager::ScanJob(const std::string& job_id) {
  std::shared_ptr<const WebhookConfig> config;
  {
    absl::MutexLock lock(&mu_);
    config = config_;
  }
  TY_ASSIGN_OR_RETURN(int64_t scanned, store_->ScannedSeq(job_id));
  const std::string owner = deps_.owner_of ? deps_.owner_of(job_id) : "";
  while (true) {
    absl::StatusOr<std::vector<v1::Event>> events = deps_.events->ReadEvents(job_id, scanned + 1, kScanBatch);
    if (absl::IsFailedPrecondition(events.status())) {
      // Compacted by retention before it was scanned: nothing is left to send.
      const int64_t last = deps_.events->LastSeq(job_id);
      if (last > scanned) TY_RETURN_IF_ERROR(store_->Enqueue(job_id, last, {}, 0).status());
      return absl::OkStatus();
    }
    if (!events.ok()) return events.status();
    if (events->empty()) return absl::OkStatus();
    std::vector<WebhookStore::Queued> queued;
    for (const v1::Event& event : *events) {
      const uint32_t kinds = WebhookKindsOf(event);
      if (kinds == 0) continue;
      for (const WebhookEndpoint& e : config->endpoints) {
        const uint32_t wanted = kinds & e.kinds;
        if (wanted == 0 || !Wants(e, owner)) continue;
        queued.push_back({e.name, event.seq(), WebhookBody(event, owner, e.name, wanted), FromProtoTime(event.time())});
      }
    }
    scanned = events->back().seq();
    TY_ASSIGN_OR_RETURN(WebhookStore::Enqueued result,
                        store_->Enqueue(job_id, scanned, queued, config->delivery.max_pending));
    for (const auto& [endpoint, n] : result.dropped) {
      spdlog::warn("webhooks: endpoint {}: {} deliveries of job {} dropped: its outbox holds max_pending ({})",
                   endpoint, n, job_id, config->delivery.max_pending);
      if (deps_.metrics != nullptr) deps_.metrics->Count(endpoint, WebhookMetrics::Result::kDropped, n);
    }
    for (const std::string& endpoint : result.queued) {
      WakeLocked(endpoint);
      RefreshPending(endpoint);
    }
    if (static_cast<int>(events->size()) < kScanBatch) return absl::OkStatus();
  }
}

void WebhookManager::WakeLocked(const std::string& endpoint) {
  auto it = senders_.find(endpoint);
  if (it == senders_.end()) return;
  absl::MutexLock lock(&mu_);
  ++it->second->wakes;
}

void WebhookManager::WaitFor(Sender* sender, uint64_t seen, absl::Time deadline, bool wake_ends) {
  absl::MutexLock lock(&mu_);
  auto woken = [sender, seen, wake_ends]() { return sender->stop.load() || (wake_ends && sender->wakes != seen); };
  deps_.clock->AwaitWithDeadline(&mu_, absl::Condition(&woken), deadline);
}

void WebhookManager::RefreshPending(const std::string& endpoint) {
  if (deps_.metrics == nullptr) return;
  auto stats = store_->Stats();
  if (!stats.ok()) return;
  deps_.metrics->SetPending(endpoint, (*stats)[endpoint].pending);
}

void WebhookManager::SendLoop(Sender* sender) {
  const std::string& name = sender->endpoint.name;
  while (!sender->stop.load()) {
    uint64_t seen;
    {
      absl::MutexLock lock(&mu_);
      seen = sender->wakes;
    }
    absl::StatusOr<std::optional<WebhookStore::Pending>> next = store_->Next(name);
    if (!next.ok()) {
      spdlog::error("webhooks: endpoint {}: reading its queue: {}", name, std::string(next.status().message()));
      WaitFor(sender, seen, deps_.clock->Now() + kStoreRetry);
      continue;
    }
    if (!next->has_value()) {
      // Woken by the scan thread when it queues one; the deadline only bounds a miss.
      WaitFor(sender, seen, deps_.clock->Now() + absl::Minutes(1));
      continue;
    }
    const WebhookStore::Pending& p = **next;
    if (p.next > deps_.clock->Now()) {
      WaitFor(sender, seen, p.next, /*wake_ends=*/false);  // a new delivery queues behind this one
      continue;
    }
    if (!Attempt(sender, p)) return;
    RefreshPending(name);
  }
}

bool WebhookManager::Attempt(Sender* sender, const WebhookStore::Pending& p) {
  const WebhookEndpoint& e = sender->endpoint;
  std::shared_ptr<const WebhookConfig> config;
  {
    absl::MutexLock lock(&mu_);
    config = config_;
  }
  const WebhookDelivery& d = config->delivery;
  const std::string id = WebhookDeliveryId(p.job_id, p.seq, e.name);
  absl::Time now = deps_.clock->Now();
  if (std::string why = WebhookGiveUpReason(d, p.attempts, p.created, now); !why.empty()) {
    spdlog::warn("webhooks: endpoint {}: delivery {} {}", e.name, id, why);
    absl::Status s = store_->GiveUp(e.name, p.id, why, now);
    if (s.ok() && deps_.metrics != nullptr) deps_.metrics->Count(e.name, WebhookMetrics::Result::kFailed);
    return true;
  }
  http::Request request;
  request.url = e.url;
  request.body = p.body;
  const int64_t t = absl::ToUnixSeconds(now);
  request.headers = {{"Content-Type", "application/json"},
                     {"User-Agent", "trainyard-webhooks/1"},
                     {kWebhookIdHeader, id},
                     {kWebhookSignatureHeader, WebhookSignature(e.secret, t, p.body)}};
  request.connect_timeout = std::min(d.timeout, absl::Seconds(5));
  request.total_timeout = d.timeout;
  request.max_response_bytes = kMaxAnswerBytes;
  request.max_redirects = 0;
  request.cancel = &sender->stop;
  const DeliveryVerdict verdict = ClassifyDelivery(http::Send(request));
  now = deps_.clock->Now();
  absl::Status stored;
  switch (verdict.outcome) {
    case DeliveryOutcome::kStopped:
      return false;
    case DeliveryOutcome::kDelivered:
      stored = store_->Delivered(e.name, p.id, now);
      if (stored.ok() && deps_.metrics != nullptr) {
        deps_.metrics->SetLastSuccess(e.name, now);
        deps_.metrics->Count(e.name, WebhookMetrics::Result::kDelivered);
      }
      break;
    case DeliveryOutcome::kGiveUp:
      spdlog::warn("webhooks: endpoint {}: delivery {} refused: {}", e.name, id, verdict.error);
      stored = store_->GiveUp(e.name, p.id, verdict.error, now);
      if (stored.ok() && deps_.metrics != nullptr) deps_.metrics->Count(e.name, WebhookMetrics::Result::kFailed);
      break;
    case DeliveryOutcome::kRetry: {
      const int attempts = p.attempts + 1;
      if (std::string why = WebhookGiveUpReason(d, attempts, p.created, now); !why.empty()) {
        spdlog::warn("webhooks: endpoint {}: delivery {} {}; the last: {}", e.name, id, why, verdict.error);
        stored = store_->GiveUp(e.name, p.id, absl::StrCat(verdict.error, " (", why, ")"), now);
        if (stored.ok() && deps_.metrics != nullptr) deps_.metrics->Count(e.name, WebhookMetrics::Result::kFailed);
        break;
      }
      stored = store_->Retry(e.name, p.id, attempts, now + WebhookBackoff(d, attempts), verdict.error, now);
      if (stored.ok() && deps_.metrics != nullptr) deps_.metrics->Count(e.name, WebhookMetrics::Result::kRetried);
      break;
    }
  }
  if (!stored.ok()) {
    spdlog::error("webhooks: endpoint {}: recording delivery {}: {}", e.name, id, std::string(stored.message()));
    absl::MutexLock lock(&mu_);
    auto stop = [sender]() { return sender->stop.load(); };
    deps_.clock->AwaitWithDeadline(&mu_, absl::Condition(&stop), now + kStoreRetry);
  }
  return true;
}

}  // namespace trainyard
