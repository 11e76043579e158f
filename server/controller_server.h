#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/dir_lock.h"
#include "common/base/process_launcher.h"
#include "common/tls_files.h"
#include "server/metrics/controller_metrics.h"
#include "server/mlflow/mlflow_exporter.h"
#include "server/notify/webhook_manager.h"
#include "server/notify/webhook_metrics.h"
#include "server/service/job_service.h"
#include "server/service/worker_service.h"
#include "server/state/artifact_store.h"
#include "server/state/event_compaction.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/state/preflight_gate.h"
#include "server/store/sqlite_job_store.h"
#include "server/tensorboard/tensorboard_exporter.h"
#include "server/web/web_api.h"
#include "server/web/web_server.h"

namespace trainyard {

struct ControllerOptions {
  std::string listen = "127.0.0.1:7070";
  std::string metrics_listen;  // empty: no /metrics endpoint
  // --web-listen: the read-only web UI (server/web/), plain HTTP; empty: off.
  std::string web_listen;
  std::string data_dir;
  // --tls-cert/--tls-key/--tls-ca, all or none: the one gRPC port serves TLS, workers
  // present a certificate of the CA (their name comes from it), clients may present none.
  TlsFilePaths tls;
  // --token-file: the bearer tokens and roles of JobService clients (server/auth/);
  // empty: authorization off, every caller an admin named "local" (loopback only).
  std::string token_file;
  // --max-watchers-per-owner: concurrent watch streams (WatchJob, WatchJobBatched) one identity may hold.
  int max_watchers_per_owner = WatcherCap::kDefaultPerOwner;
  // Allow listeners beyond loopback without TLS and a token file (and /metrics at all);
  // every start with it logs a warning.
  bool insecure = false;
  JobManagerOptions manager;
  // The runner of compile.preflight=true jobs (trainyard-train); checked when such a
  // job is submitted, not at start-up.
  std::string preflight_binary;
  absl::Duration preflight_timeout = absl::Seconds(300);
  ArtifactStoreOptions artifacts;  // --artifact-bytes-per-job
  // --policy-file: quotas, groups and fair-share weights (server/policy/policy_file.h);
  // empty: no quotas, every owner weight 1. Re-read on SIGHUP.
  std::string policy_file;
  // --retain-finished and the compactor's pace (server/state/event_compaction.h).
  RetentionOptions retention;
  // --webhooks: endpoints that get job events (server/notify/webhook_file.h); empty:
  // none. Re-read on SIGHUP.
  std::string webhooks_file;
  // --tensorboard-dir: every job's TensorBoard event files, kept current from the events
  // stored (server/tensorboard/); empty: off. `dir` is checked before anything is served.
  TensorBoardExporterOptions tensorboard;
  // --mlflow-uri (empty: off) and --mlflow-experiment: every job's run, params and
  // metrics in MLflow (server/mlflow/mlflow_exporter.h).
  mlflow::MlflowExporterOptions mlflow;
};

// The whole controller wired together: store, manager, gRPC services (with health
// checking and reflection), /metrics and the tick thread. Owned by main() or a test.
// The process launcher (preflight runners) and the clock (the manager's time, the
// preflight timeouts, the tick period) come from the creator and must outlive it.
//
// One controller per port and per data dir. Start reads its files (TLS, --token-file,
// --policy-file), probes every listener (--listen, --metrics-listen, --web-listen;
// listen_probe.h) and then takes the data dir's lock
// (DirLock: DATA_DIR/trainyard-controller.lock, held for the server's life) before it
// opens the store, so a port in use or a data dir another controller holds fails the
// start with nothing served and nothing stored touched; its servers never share a
// port (gRPC's SO_REUSEPORT is off), so a port taken after the probe fails it too.
class ControllerServer {
 public:
  static absl::StatusOr<std::unique_ptr<ControllerServer>> Start(const ControllerOptions& options,
                                                                 ProcessLauncher* launcher, Clock* clock);
  ~ControllerServer();

  int port() const { return port_; }
  // The /metrics port (the chosen one for --metrics-listen HOST:0); 0 when it is off.
  int metrics_port() const { return metrics_ ? metrics_->listening_port() : 0; }
  // The web UI's bound port; 0 when --web-listen is off.
  int web_port() const { return web_server_ ? web_server_->port() : 0; }
  void Wait() { server_->Wait(); }
  void Shutdown();
  // Re-reads --token-file (SIGHUP); a bad file keeps the tokens in force and is the
  // error. OK without a change when authorization is off.
  absl::Status ReloadTokens();
  // Re-reads --policy-file (SIGHUP); a bad file keeps the policy in force, logs why and
  // is the error. OK without a change when there is no policy file.
  absl::Status ReloadPolicy();
  // Re-reads --webhooks (SIGHUP); a bad file keeps the endpoints in force, logs why and
  // is the error. OK without a change when there is no webhooks file.
  absl::Status ReloadWebhooks();

 private:
  ControllerServer() = default;

  // First, so that it is released last, after everything that writes the data dir.
  std::unique_ptr<DirLock> data_lock_;
  Clock* clock_ = nullptr;
  ProcessLauncher* launcher_ = nullptr;  // outlives the gate's runners
  std::unique_ptr<SqliteJobStore> store_;
  EventHub hub_;
  // hub_ calls it on every commit: declared right after it, so it goes only after
  // everything that commits. Stopped in Shutdown (then OnCommitted does nothing).
  std::unique_ptr<WebhookMetrics> webhook_metrics_;
  std::unique_ptr<WebhookManager> webhooks_;
  std::string webhooks_file_;
  std::unique_ptr<ControllerMetrics> metrics_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<RetentionCompactor> retention_;  // stopped in Shutdown, before manager_ goes
  // Fed by hub_'s commit observer; stopped in Shutdown (its last round writes what is
  // queued), before the store goes.
  std::unique_ptr<TensorBoardExporter> tensorboard_;
  std::unique_ptr<mlflow::MlflowExporter> mlflow_;  // a commit observer of hub_; stopped in Shutdown
  std::unique_ptr<ArtifactStore> artifacts_;
  std::unique_ptr<PreflightGate> preflight_;
  std::unique_ptr<Authorizer> authorizer_;  // outlives job_service_, which points at it
  // The mutating calls' rules and the audit log, for job_service_ and web_api_.
  std::unique_ptr<JobActions> actions_;
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  // Declared after everything they read, so they are destroyed first.
  std::unique_ptr<web::WebApi> web_api_;
  std::unique_ptr<web::WebServer> web_server_;  // stopped before web_api_ goes
  int port_ = 0;
  std::string policy_file_;
  absl::Mutex stop_mu_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread ticker_;
};

// Secure by default: a --listen beyond loopback needs TLS and --token-file, and a
// --metrics-listen beyond loopback (plain HTTP, no authentication) and a --web-listen
// beyond loopback (plain HTTP: bearer tokens in clear) are refused, unless --insecure;
// FAILED_PRECONDITION naming the flag and what is missing. With --insecure, `warnings`
// gets one line per exposure it allows (or says it allows none).
absl::Status CheckListenerSecurity(const ControllerOptions& options, std::vector<std::string>* warnings);

}  // namespace trainyard
