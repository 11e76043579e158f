// Sends job events to the --webhooks endpoints: at least once, signed, from a durable
// outbox (WebhookStore), without ever holding up the controller.
//
//   commit ──OnCommitted(job)──▶ scan thread ──WebhookStore::Enqueue──▶ outbox
//                                                                        │
//                                one sender thread per endpoint ◀────────┘ ──POST──▶
//
// OnCommitted is the one hook on the event path: called after a commit, it only queues
// the job id (a job queued twice before its turn is queued once) and returns. The scan
// thread reads the job's events after its scanned seq from the event store, turns those
// of a subscribed kind (webhook_policy.h) and owner into deliveries, and queues them and
// the new scanned seq in one transaction. Each endpoint's sender takes its oldest queued
// delivery, POSTs it, and removes it on 2xx; a retryable failure waits (doubling
// backoff, capped) and blocks only that endpoint's queue; a delivery is given up after
// max_attempts or max_age. A slow or failing endpoint therefore delays neither the
// others nor ingestion. At start the scan thread rescans every job whose events passed
// its scanned seq while no controller ran (a kill -9 between commit and queueing).
//
// Thread-safe. Stop() (or the destructor) ends the threads, cancelling POSTs in flight.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "server/notify/webhook_file.h"
#include "server/notify/webhook_metrics.h"
#include "server/notify/webhook_store.h"
#include "server/store/job_store.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard {

struct WebhookManagerDeps {
  JobStore* events = nullptr;  // read only: ReadEvents, LastSeq, LoadJobs
  // The owner of a job (empty when unknown), for owner filters and the payload.
  std::function<std::string(const std::string& job_id)> owner_of;
  Clock* clock = nullptr;
  WebhookMetrics* metrics = nullptr;  // may be null
};

class WebhookManager {
 public:
  // Opens `db_path` (WebhookStore), forgets endpoints no longer in `config`, and starts
  // the scan and sender threads. `file` names the configuration in status.
  static absl::StatusOr<std::unique_ptr<WebhookManager>> Start(WebhookConfig config, std::string file,
                                                               const std::string& db_path, WebhookManagerDeps deps);
  ~WebhookManager();
  WebhookManager(const WebhookManager&) = delete;
  WebhookManager& operator=(const WebhookManager&) = delete;

  // Starts the catch-up scan: call once OnCommitted is hooked to the commits, so that no
  // commit falls between the catch-up's reads and the hook.
  void Begin() ABSL_LOCKS_EXCLUDED(mu_);
  // After events of `job_id` were committed. Never blocks on I/O.
  void OnCommitted(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces the endpoints (SIGHUP): senders restart, a removed endpoint's queue goes.
  absl::Status Reload(WebhookConfig config) ABSL_LOCKS_EXCLUDED(mu_, scan_mu_);
  absl::StatusOr<v1::GetWebhookStatusResponse> Status() ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_, scan_mu_);
  // Blocks until the catch-up ran and every job queued before the call has been
  // scanned (tests).
  void AwaitScanned() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Sender {
    WebhookEndpoint endpoint;
    std::atomic<bool> stop{false};  // also the POST's cancel flag
    uint64_t wakes = 0;             // guarded by the manager's mu_
    std::thread thread;
  };

  WebhookManager(std::shared_ptr<const WebhookConfig> config, std::string file, std::unique_ptr<WebhookStore> store,
                 WebhookManagerDeps deps);
  void StartSendersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_);
  void StopSendersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_);
  void ScanLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Queues every job whose events passed its scanned seq (or, on the first start, marks
  // history scanned).
  absl::Status CatchUp();
  absl::Status ScanJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_);
  void SendLoop(Sender* sender) ABSL_LOCKS_EXCLUDED(mu_);
  // One delivery attempt (or give-up) of `p`; false when stopping.
  bool Attempt(Sender* sender, const WebhookStore::Pending& p);
  void WakeLocked(const std::string& endpoint) ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits on mu_ until `sender` stops, `deadline` passes, or (with `wake_ends`) it is
  // woken after `seen`.
  void WaitFor(Sender* sender, uint64_t seen, absl::Time deadline, bool wake_ends = true) ABSL_LOCKS_EXCLUDED(mu_);
  void RefreshPending(const std::string& endpoint);

  const std::string file_;
  const std::unique_ptr<WebhookStore> store_;
  const WebhookManagerDeps deps_;

  // Held by the scan thread for a whole job and by Reload, so no delivery is queued for
  // an endpoint a reload is removing. Taken before mu_.
  absl::Mutex scan_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<std::string, std::unique_ptr<Sender>> senders_ ABSL_GUARDED_BY(scan_mu_);

  absl::Mutex mu_;
  std::shared_ptr<const WebhookConfig> config_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;  // jobs queued for a scan, ever
  uint64_t scanned_ ABSL_GUARDED_BY(mu_) = 0;   // ... and scanned
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool begun_ ABSL_GUARDED_BY(mu_) = false;
  bool caught_up_ ABSL_GUARDED_BY(mu_) = false;
  std::thread scan_thread_;
};

}  // namespace trainyard
