#include "server/controller_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/listen_probe.h"
#include "common/base/posix_process_launcher.h"  // ExecutableSibling
#include "common/base/status_macros.h"
#include "common/http/http_client.h"
#include "common/spec/spec_error.h"
#include "server/metrics/grpc_metrics.h"
#include "server/notify/webhook_file.h"
#include "server/policy/policy_file.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::Status CheckListenerSecurity(const ControllerOptions& options, std::vector<std::string>* warnings) {
  const bool tls = !options.tls.cert.empty() && !options.tls.key.empty() && !options.tls.ca.empty();
  const bool tokens = !options.token_file.empty();
  std::vector<std::string> exposed;
  if (!IsLoopbackAddress(options.listen) && !(tls && tokens)) {
    const std::string missing = !tls && !tokens ? "TLS and --token-file" : !tls ? "TLS" : "--token-file";
    if (!options.insecure) {
      return absl::FailedPreconditionError(
          absl::StrCat("--listen '", Quote(options.listen),
                       "' is not a loopback address: serving beyond this machine needs TLS (--tls-cert, "
                       "--tls-key, --tls-ca) and --token-file, and ",
                       missing, !tls && !tokens ? " are" : " is", " missing; --insecure allows it anyway"));
    }
    exposed.push_back(absl::StrCat("--listen ", Quote(options.listen), " is reachable beyond this machine without ",
                                   missing, ": ", tls ? "" : "any process can register as a worker and read job specs",
                                   tls || tokens ? "" : ", and ",
                                   tokens ? "" : "any client can submit, cancel and read every job"));
  }
  if (!options.metrics_listen.empty() && !IsLoopbackAddress(options.metrics_listen)) {
    if (!options.insecure) {
      return absl::FailedPreconditionError(
          absl::StrCat("--metrics-listen '", Quote(options.metrics_listen),
                       "' is not a loopback address: /metrics is plain HTTP without authentication (job ids, "
                       "worker names), so serving it beyond this machine needs --insecure"));
    }
    exposed.push_back(absl::StrCat("--metrics-listen ", Quote(options.metrics_listen),
                                   " serves /metrics beyond this machine over plain HTTP without authentication"));
  }
  if (!options.web_listen.empty() && !IsLoopbackAddress(options.web_listen)) {
    // The web UI serves plain HTTP only (terminate TLS in a reverse proxy in front of a
    // loopback --web-listen): beyond this machine the page's bearer token and the job
    // data it reads travel in clear.
    if (!options.insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--web-listen '", Quote(options.web_listen),
          "' is not a loopback address: the web UI is plain HTTP, so bearer tokens and job data would "
          "cross the network in clear; serve it on loopback behind a TLS reverse proxy, or pass --insecure"));
    }
    exposed.push_back(absl::StrCat("--web-listen ", Quote(options.web_listen),
                                   " serves the web UI beyond this machine over plain HTTP",
                                   tokens ? " (bearer tokens in clear)" : " without authentication"));
  }
  if (options.insecure && warnings != nullptr) {
    if (exposed.empty()) exposed.push_back("no listener needs it (all loopback or TLS with tokens)");
    for (const std::string& e : exposed) warnings->push_back(absl::StrCat("--insecure: ", e));
  }
  return absl::OkStatus();
}

namespace {

// Each listener on its own port, and every one free now (ProbeListen).
absl::Status CheckListeners(const ControllerOptions& options) {
  std::vector<std::pair<const char*, const std::string*>> listeners = {{"--listen", &options.listen}};
  if (!options.metrics_listen.empty()) listeners.push_back({"--metrics-listen", &options.metrics_listen});
  if (!options.web_listen.empty()) listeners.push_back({"--web-listen", &options.web_listen});
  for (std::size_t i = 0; i < listeners.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      const int port = ListenPort(*listeners[i].second);
      if (port > 0 && port == ListenPort(*listeners[j].second)) {
        return absl::InvalidArgumentError(absl::StrCat(listeners[i].first, " ", Quoted(*listeners[i].second), " and ",
                                                       listeners[j].first, " ", Quoted(*listeners[j].second),
                                                       " name the same port ", port, "; each listener needs its own"));
      }
    }
  }
  for (const auto& [flag, address] : listeners) TY_RETURN_IF_ERROR(ProbeListen(flag, *address));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::Start(const ControllerOptions& options,
                                                                          ProcessLauncher* launcher, Clock* clock) {
  TY_RETURN_IF_ERROR(CheckTlsFlags(options.tls));
  std::vector<std::string> warnings;
  TY_RETURN_IF_ERROR(CheckListenerSecurity(options, &warnings));
  for (const std::string& w : warnings) spdlog::warn("{}", w);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (options.tls.any()) {
    TY_ASSIGN_OR_RETURN(TlsMaterial material, LoadTlsMaterial(options.tls));
    credentials = MakeServerCredentials(material);
  }
  if (options.data_dir.empty()) return absl::InvalidArgumentError("--data-dir is required");
  // Every file it reads, then the ports, then the data dir, and only then the store: a
  // controller that could not serve (a bad --token-file or --policy-file, a port in
  // use) or does not own the directory stops before it opens, recovers into or migrates
  // the store.
  std::optional<SharingPolicy> policy;
  if (!options.policy_file.empty()) {
    TY_ASSIGN_OR_RETURN(policy, LoadPolicyFile(options.policy_file));
  }
  std::optional<WebhookConfig> webhooks;
  if (!options.webhooks_file.empty()) {
    TY_ASSIGN_OR_RETURN(webhooks, LoadWebhookFile(options.webhooks_file));
  }
  TY_ASSIGN_OR_RETURN(std::unique_ptr<Authorizer> authorizer, Authorizer::FromFile(options.token_file));
  if (!options.mlflow.uri.empty()) TY_RETURN_IF_ERROR(mlflow::ValidateMlflowOptions(options.mlflow));
  TY_RETURN_IF_ERROR(CheckListeners(options));
  // Like the files above: a --tensorboard-dir that cannot be written stops the start
  // before the data dir is locked or the store opened.
  if (!options.tensorboard.dir.empty()) {
    TY_RETURN_IF_ERROR(tensorboard::PrepareOutputDir(options.tensorboard.dir, "--tensorboard-dir"));
  }
  std::unique_ptr<ControllerServer> s(new ControllerServer());
  s->clock_ = clock;
  s->launcher_ = launcher;
  s->authorizer_ = std::move(authorizer);
  TY_ASSIGN_OR_RETURN(s->data_lock_,
                      DirLock::Acquire(options.data_dir, "--data-dir", "trainyard-controller", clock->Now()));
  if (const std::optional<DirLock::Holder>& before = s->data_lock_->previous()) {
    spdlog::warn(
        "--data-dir {}: the previous trainyard-controller (pid {} on host {}, started {}) ended without "
        "releasing it (killed or crashed); taking over",
        options.data_dir, before->pid, Quote(before->host), Quote(before->started));
  }
  TY_ASSIGN_OR_RETURN(s->store_, SqliteJobStore::Open(options.data_dir));
  s->metrics_ = std::make_unique<ControllerMetrics>();
  if (!options.metrics_listen.empty()) {
    TY_RETURN_IF_ERROR(s->metrics_->Listen(options.metrics_listen));
    spdlog::info("metrics on http://{}:{}/metrics", options.metrics_listen.substr(0, options.metrics_listen.rfind(':')),
                 s->metrics_->listening_port());
  }
  s->manager_ = std::make_unique<JobManager>(s->store_.get(), &s->hub_, s->metrics_.get(), s->clock_, options.manager);
  if (!options.tensorboard.dir.empty()) {
    JobManager* manager = s->manager_.get();
    TY_ASSIGN_OR_RETURN(s->tensorboard_, TensorBoardExporter::Create(
                                             options.tensorboard, s->store_.get(),
                                             [manager](const std::string& id) -> absl::StatusOr<v1::JobSpec> {
                                               TY_ASSIGN_OR_RETURN(v1::Job job, manager->Get(id));
                                               return job.spec();
                                             },
                                             *s->metrics_->registry(), s->clock_));
    TensorBoardExporter* exporter = s->tensorboard_.get();
    s->hub_.AddCommitObserver([exporter](const std::string& id) { exporter->OnCommitted(id); });
  }
  if (!options.mlflow.uri.empty()) {
    TY_ASSIGN_OR_RETURN(auto cursors,
                        mlflow::MlflowCursorStore::Open(
                            options.data_dir, absl::StrCat(options.mlflow.uri, " ", options.mlflow.experiment)));
    JobManager* manager = s->manager_.get();
    TY_ASSIGN_OR_RETURN(
        s->mlflow_, mlflow::MlflowExporter::Create(
                        options.mlflow, s->store_.get(), [manager](const std::string& id) { return manager->Get(id); },
                        std::move(cursors), *s->metrics_->registry(), s->clock_));
    // Before Recover, so its commits are heard too; sending starts after it (Start).
    mlflow::MlflowExporter* mlflow = s->mlflow_.get();
    s->hub_.AddCommitObserver([mlflow](const std::string& id) { mlflow->OnCommitted(id); });
  }
  // The policy is in force before the first scheduling pass (Recover's).
  s->policy_file_ = options.policy_file;
  if (policy) s->manager_->SetPolicy(*std::move(policy));
  TY_RETURN_IF_ERROR(s->manager_->Recover());
  if (s->tensorboard_) {
    std::vector<std::string> unfinished;
    for (const v1::Job& job :
         s->manager_->List({v1::Job::PENDING, v1::Job::SCHEDULED, v1::Job::RUNNING, v1::Job::RESTARTING},
                           std::numeric_limits<int>::max())) {
      unfinished.push_back(job.id());
    }
    s->tensorboard_->Start(unfinished);
    spdlog::info("TensorBoard event files under {}", options.tensorboard.dir);
  }
  if (webhooks) {
    // After Recover: a job's owner (owner filters, the payload) comes from the manager.
    s->webhooks_file_ = options.webhooks_file;
    s->webhook_metrics_ = std::make_unique<WebhookMetrics>(*s->metrics_->registry());
    WebhookManagerDeps deps;
    deps.events = s->store_.get();
    JobManager* manager = s->manager_.get();
    deps.owner_of = [manager](const std::string& id) {
      absl::StatusOr<v1::Job> job = manager->Get(id);
      return job.ok() ? job->owner() : std::string();
    };
    deps.clock = s->clock_;
    deps.metrics = s->webhook_metrics_.get();
    TY_ASSIGN_OR_RETURN(
        s->webhooks_,
        WebhookManager::Start(*std::move(webhooks), options.webhooks_file,
                              (std::filesystem::path(options.data_dir) / "webhooks.db").string(), std::move(deps)));
    WebhookManager* hooks = s->webhooks_.get();
    s->hub_.AddCommitObserver([hooks](const std::string& job_id) { hooks->OnCommitted(job_id); });
    hooks->Begin();
    spdlog::info("webhooks: delivering to the endpoints of {} (queue in {}/webhooks.db)", options.webhooks_file,
                 options.data_dir);
  }
  if (s->mlflow_) {
    TY_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, s->store_->LoadJobs());
    s->mlflow_->Start(jobs);
    spdlog::info("MLflow tracking to {} (experiment {})", http::RedactUrl(options.mlflow.uri),
                 Quoted(options.mlflow.experiment));
  }
  TY_ASSIGN_OR_RETURN(s->artifacts_,
                      ArtifactStore::Open(options.data_dir, s->manager_.get(), s->clock_, options.artifacts));
  PreflightGateOptions preflight;
  preflight.binary = options.preflight_binary.empty() ? ExecutableSibling("trainyard-train") : options.preflight_binary;
  preflight.timeout = options.preflight_timeout;
  preflight.spec_dir = (std::filesystem::path(options.data_dir) / "preflight").string();
  std::error_code ec;
  std::filesystem::create_directories(preflight.spec_dir, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot create ", preflight.spec_dir, ": ", ec.message()));
  }
  if (access(preflight.binary.c_str(), X_OK) != 0) {
    spdlog::warn(
        "preflight runner {} is missing: jobs with compile.preflight=true will be "
        "refused (set --preflight-binary)",
        preflight.binary);
  }
  s->preflight_ = std::make_unique<PreflightGate>(s->launcher_, s->metrics_.get(), preflight, s->clock_);
  s->actions_ = std::make_unique<JobActions>(s->manager_.get(), s->preflight_.get(), s->store_.get(), s->clock_);
  JobServiceOptions job_options;
  job_options.authorizer = s->authorizer_.get();
  job_options.actions = s->actions_.get();
  job_options.max_watchers_per_owner = options.max_watchers_per_owner;
  if (s->webhooks_) {
    WebhookManager* hooks = s->webhooks_.get();
    job_options.webhook_status = [hooks] { return hooks->Status(); };
  }
  s->job_service_ = std::make_unique<JobServiceImpl>(s->manager_.get(), s->store_.get(), &s->hub_, s->preflight_.get(),
                                                     s->artifacts_.get(), job_options);
  s->worker_service_ = std::make_unique<WorkerServiceImpl>(s->manager_.get(), s->artifacts_.get(),
                                                           /*require_worker_certificate=*/options.tls.any());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second controller on this port would then
  // start and share it, each client and worker landing on either (a split brain).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, credentials, &s->port_);
  builder.RegisterService(s->job_service_.get());
  builder.RegisterService(s->worker_service_.get());
  builder.SetMaxReceiveMessageSize(8 << 20);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<GrpcMetricsInterceptorFactory>(s->metrics_.get()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    // gRPC logs its reason to stderr only; a bind of our own names it (a port taken
    // since the probe, most likely).
    if (absl::Status why = ProbeListen("--listen", options.listen); !why.ok()) return why;
    return absl::UnavailableError(absl::StrCat("--listen ", Quoted(options.listen), ": gRPC could not listen there"));
  }
  // Per-service health, for probes that ask about one service (Kubernetes, grpc_health_probe
  // -service=...): the default service only answers for "" otherwise (NOT_FOUND).
  for (const char* service : {v1::JobService::service_full_name(), v1::WorkerService::service_full_name()}) {
    s->server_->GetHealthCheckService()->SetServingStatus(service, true);
  }
  if (!options.web_listen.empty()) {
    s->web_api_ = std::make_unique<web::WebApi>(s->manager_.get(), s->store_.get(), s->artifacts_.get(),
                                                s->authorizer_.get(), s->actions_.get(), &s->hub_);
    TY_ASSIGN_OR_RETURN(s->web_server_, web::WebServer::Start(options.web_listen, s->web_api_.get()));
    spdlog::info("web UI on http://{}:{}/ ({})", options.web_listen.substr(0, options.web_listen.rfind(':')),
                 s->web_server_->port(), s->authorizer_->enabled() ? "bearer tokens required" : "no authorization");
  }
  // Retention runs on its own thread, never under the state lock (event_compaction.h).
  s->retention_ = std::make_unique<RetentionCompactor>(s->manager_.get(), s->store_.get(), s->metrics_.get(), s->clock_,
                                                       options.retention);
  s->retention_->Start();
  ControllerServer* raw = s.get();
  s->ticker_ = std::thread([raw] {
    while (true) {
      {
        absl::MutexLock lock(&raw->stop_mu_);
        if (raw->clock_->AwaitWithDeadline(&raw->stop_mu_, absl::Condition(&raw->stopping_),
                                           raw->clock_->Now() + absl::Seconds(1))) {
          return;
        }
      }
      raw->manager_->Tick();
    }
  });
  return s;
}

absl::Status ControllerServer::ReloadTokens() { return authorizer_->Reload(); }

absl::Status ControllerServer::ReloadPolicy() {
  if (policy_file_.empty()) return absl::OkStatus();
  absl::StatusOr<SharingPolicy> policy = LoadPolicyFile(policy_file_);
  if (!policy.ok()) {
    spdlog::error("--policy-file not reloaded, the policy in force stays: {}", std::string(policy.status().message()));
    actions_->RecordFileReload("policy_reload", policy_file_, policy.status());
    return policy.status();
  }
  spdlog::info("--policy-file {} reloaded: {} group(s), {} owner(s), half-life {} h", policy_file_,
               policy->groups.size(), policy->owners.size(), policy->half_life_hours);
  manager_->SetPolicy(*std::move(policy));
  actions_->RecordFileReload("policy_reload", policy_file_, absl::OkStatus());
  return absl::OkStatus();
}

absl::Status ControllerServer::ReloadWebhooks() {
  if (webhooks_file_.empty() || webhooks_ == nullptr) return absl::OkStatus();
  absl::StatusOr<WebhookConfig> config = LoadWebhookFile(webhooks_file_);
  if (!config.ok()) {
    spdlog::error("--webhooks not reloaded, the endpoints in force stay: {}", std::string(config.status().message()));
    actions_->RecordFileReload("webhooks_reload", webhooks_file_, config.status());
    return config.status();
  }
  const size_t n = config->endpoints.size();
  const absl::Status reloaded = webhooks_->Reload(*std::move(config));
  actions_->RecordFileReload("webhooks_reload", webhooks_file_, reloaded);
  TY_RETURN_IF_ERROR(reloaded);
  spdlog::info("--webhooks {} reloaded: {} endpoint(s)", webhooks_file_, n);
  return absl::OkStatus();
}

void ControllerServer::Shutdown() {
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  // Event streams end, so the web server's stop below need not wait for them.
  if (web_api_) web_api_->Stop();
  // Finishes every SubmitJob waiting for a preflight and every CheckpointJob waiting for
  // its checkpoint (gRPC and web), which the servers' shutdowns would otherwise wait for.
  if (preflight_) preflight_->Stop();
  if (manager_) manager_->AbortCheckpointWaiters();
  // No new web requests; those in flight finish.
  if (web_server_) web_server_->Stop();
  // Probes see NOT_SERVING for every service from here on.
  if (server_ && server_->GetHealthCheckService() != nullptr) server_->GetHealthCheckService()->Shutdown();
  // In-flight calls get 2 s (of the injected clock) to finish.
  if (server_) server_->Shutdown(absl::ToChronoTime(clock_->Now() + absl::Seconds(2)));
  if (retention_) retention_->Stop();      // a pass stops between jobs
  if (tensorboard_) tensorboard_->Stop();  // after the last commit: its final round writes it
  // Deliveries still queued stay in webhooks.db for the next start; OnCommitted is a
  // no-op from here on.
  if (webhooks_) webhooks_->Stop();
  if (mlflow_) mlflow_->Stop();  // what it has not sent stays in the store, for the next start
}

ControllerServer::~ControllerServer() {
  Shutdown();
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace trainyard
