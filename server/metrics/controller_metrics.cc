#include "server/metrics/controller_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/base/listen_probe.h"
#include "common/base/text.h"

namespace trainyard {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

ControllerMetrics::ControllerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      submitted_(BuildCounter()
                     .Name("trainyard_jobs_submitted_total")
                     .Help("Jobs accepted by SubmitJob")
                     .Register(*registry_)
                     .Add({})),
      rejected_(BuildCounter()
                    .Name("trainyard_jobs_rejected_total")
                    .Help("Jobs rejected by validation or the compile preflight")
                    .Register(*registry_)
                    .Add({})),
      events_(BuildCounter()
                  .Name("trainyard_events_ingested_total")
                  .Help("Events committed to the store")
                  .Register(*registry_)
                  .Add({})),
      dropped_family_(BuildCounter()
                          .Name("trainyard_events_dropped_total")
                          .Help("Events a worker sent that were not appended, by reason (job_ended: the "
                                "job's stream was closed; invalid: an event no worker may send)")
                          .Register(*registry_)),
      workers_connected_(BuildGauge()
                             .Name("trainyard_workers_connected")
                             .Help("Workers with a live Connect stream")
                             .Register(*registry_)
                             .Add({})),
      slots_total_(
          BuildGauge().Name("trainyard_slots").Help("Rank slots of connected workers").Register(*registry_).Add({})),
      slots_free_(
          BuildGauge().Name("trainyard_slots_free").Help("Rank slots not running a rank").Register(*registry_).Add({})),
      workers_lost_(BuildCounter()
                        .Name("trainyard_workers_lost_total")
                        .Help("Workers declared lost: silent or disconnected past the heartbeat "
                              "timeout (their gangs were torn down)")
                        .Register(*registry_)
                        .Add({})),
      transitions_family_(
          BuildCounter().Name("trainyard_job_transitions_total").Help("Jobs entering each state").Register(*registry_)),
      step_family_(BuildGauge().Name("trainyard_job_step").Help("Last reported optimizer step").Register(*registry_)),
      loss_family_(BuildGauge().Name("trainyard_job_loss").Help("Last reported training loss").Register(*registry_)),
      tokens_family_(BuildGauge()
                         .Name("trainyard_job_tokens_per_second")
                         .Help("Last reported global training throughput")
                         .Register(*registry_)),
      mfu_family_(BuildGauge()
                      .Name("trainyard_job_mfu_ratio")
                      .Help("Last reported model FLOPs utilisation (0..1)")
                      .Register(*registry_)),
      compile_family_(BuildCounter()
                          .Name("trainyard_compile_events_total")
                          .Help("Compile-layer events by kind")
                          .Register(*registry_)),
      step_seconds_family_(BuildGauge()
                               .Name("trainyard_job_step_seconds")
                               .Help("Wall time of the last reported optimizer step")
                               .Register(*registry_)),
      epoch_family_(BuildGauge()
                        .Name("trainyard_job_epoch")
                        .Help("Epoch (1-based) of the last reported step's last sample; 0 for the "
                              "synthetic dataset, which has no epochs")
                        .Register(*registry_)),
      validation_loss_family_(BuildGauge()
                                  .Name("trainyard_job_validation_loss")
                                  .Help("Loss of the last validation run ([validation]), the mean over "
                                        "every DP rank's share of validation.steps batches")
                                  .Register(*registry_)),
      validations_family_(BuildCounter()
                              .Name("trainyard_job_validations_total")
                              .Help("Validation runs reported for a job")
                              .Register(*registry_)),
      checkpoint_bytes_freed_family_(BuildCounter()
                                         .Name("trainyard_job_checkpoint_bytes_freed_total")
                                         .Help("Bytes of checkpoints that retention (checkpoint.keep, "
                                               "keep_best) removed from a job's folder")
                                         .Register(*registry_)),
      checkpoint_bytes_kept_family_(BuildGauge()
                                        .Name("trainyard_job_checkpoint_bytes_kept")
                                        .Help("Bytes of the checkpoints left in a job's folder after its "
                                              "last prune")
                                        .Register(*registry_)),
      checkpoints_kept_family_(BuildGauge()
                                   .Name("trainyard_job_checkpoints_kept")
                                   .Help("Checkpoints left in a job's folder after its last prune")
                                   .Register(*registry_)),
      expert_imbalance_family_(BuildGauge()
                                   .Name("trainyard_job_expert_load_imbalance_ratio")
                                   .Help("Max over mean of the tokens routed to each expert in the "
                                         "last reported step, summed over MoE layers (1 = balanced)")
                                   .Register(*registry_)),
      expert_tokens_family_(BuildGauge()
                                .Name("trainyard_job_expert_tokens")
                                .Help("Tokens routed to each expert in the last reported step, "
                                      "summed over MoE layers (the first 256 experts of a job)")
                                .Register(*registry_)),
      expert_dropped_family_(BuildGauge()
                                 .Name("trainyard_job_expert_dropped_tokens")
                                 .Help("Token-expert assignments the expert capacity (model.capacity_factor) "
                                       "dropped in the last reported step, summed over MoE layers (0 = dropless)")
                                 .Register(*registry_)),
      tokens_total_family_(BuildCounter()
                               .Name("trainyard_job_tokens_total")
                               .Help("Tokens trained (all data-parallel ranks), summed over reported steps")
                               .Register(*registry_)),
      restarts_family_(BuildCounter()
                           .Name("trainyard_job_restarts_total")
                           .Help("Times a job's attempt failed and the job was restarted")
                           .Register(*registry_)),
      stalls_family_(BuildCounter()
                         .Name("trainyard_job_stalls_total")
                         .Help("Stall events reported for a job (a rank waited past its timeout)")
                         .Register(*registry_)),
      recompiles_family_(BuildCounter()
                             .Name("trainyard_job_recompiles_total")
                             .Help("Recompiles of a compiled region, by region")
                             .Register(*registry_)),
      running_family_(BuildGauge()
                          .Name("trainyard_job_running")
                          .Help("1 while the job is RUNNING (all its ranks started), else 0")
                          .Register(*registry_)),
      last_progress_family_(BuildGauge()
                                .Name("trainyard_job_last_progress_timestamp_seconds")
                                .Help("Unix time the controller committed the job's last step "
                                      "report, or the job last entered RUNNING if that is later")
                                .Register(*registry_)),
      jobs_family_(
          BuildGauge().Name("trainyard_jobs").Help("Jobs the controller knows, by state").Register(*registry_)),
      queue_depth_(BuildGauge()
                       .Name("trainyard_queue_depth")
                       .Help("Jobs waiting to be placed (PENDING)")
                       .Register(*registry_)
                       .Add({})),
      scheduling_seconds_(
          BuildHistogram()
              .Name("trainyard_scheduling_latency_seconds")
              .Help("Time from a job entering the queue to its placement")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.1, 0.5, 1, 5, 30, 60, 300, 1800, 3600, 21600})),
      ingest_seconds_(BuildHistogram()
                          .Name("trainyard_event_ingest_batch_seconds")
                          .Help("Wall time of committing one worker event batch to the store")
                          .Register(*registry_)
                          .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                           0.05, 0.1, 0.25, 1})),
      grpc_started_family_(BuildCounter()
                               .Name("trainyard_grpc_server_started_total")
                               .Help("gRPC calls started on the controller")
                               .Register(*registry_)),
      grpc_handled_family_(BuildCounter()
                               .Name("trainyard_grpc_server_handled_total")
                               .Help("gRPC calls finished on the controller, by status code")
                               .Register(*registry_)),
      grpc_seconds_family_(BuildHistogram()
                               .Name("trainyard_grpc_server_handling_seconds")
                               .Help("Wall time of unary gRPC calls on the controller")
                               .Register(*registry_)),
      preflights_family_(BuildCounter()
                             .Name("trainyard_preflights_total")
                             .Help("Compile preflights run before accepting a job, by outcome")
                             .Register(*registry_)),
      preflight_seconds_(
          BuildHistogram()
              .Name("trainyard_preflight_duration_seconds")
              .Help("Wall time of each compile preflight run")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 5, 10, 20, 30, 60, 120, 300, 600})) {
  for (int s = v1::Job::PENDING; s <= v1::Job::RESTARTING; ++s) {
    std::string name = absl::AsciiStrToLower(v1::Job::State_Name(static_cast<v1::Job::State>(s)));
    transitions_[s] = &transitions_family_.Add({{"state", name}});
    jobs_by_state_[s] = &jobs_family_.Add({{"state", name}});
  }
  for (const char* outcome : {"clean", "findings", "bad_config", "failed", "timeout", "cancelled", "refused"}) {
    preflights_[outcome] = &preflights_family_.Add({{"outcome", outcome}});
  }
}

void ControllerMetrics::PreflightFinished(const std::string& outcome, absl::Duration elapsed) {
  auto it = preflights_.find(outcome);
  if (it == preflights_.end()) return;
  it->second->Increment();
  if (outcome != "refused") preflight_seconds_.Observe(absl::ToDoubleSeconds(elapsed));
}

absl::Status ControllerMetrics::Listen(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    // civetweb says only "null context when constructing CivetServer. Possible problem
    // binding to port."; a bind of our own says which problem.
    if (absl::Status why = ProbeListen("--metrics-listen", address); !why.ok()) return why;
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", Quoted(address),
                                               ": the HTTP server could not listen there (HOST must be an IPv4 "
                                               "literal or a bracketed IPv6 literal): ",
                                               e.what()));
  }
  const std::vector<int> ports = exposer_->GetListeningPorts();
  listening_port_ = ports.empty() ? 0 : ports.front();
  exposer_->RegisterCollectable(registry_);
  return absl::OkStatus();
}

void ControllerMetrics::EventsDropped(const std::string& reason, int n) {
  dropped_family_.Add({{"reason", reason}}).Increment(n);
}

void ControllerMetrics::JobEntered(v1::Job::State state) {
  auto it = transitions_.find(state);
  if (it != transitions_.end()) it->second->Increment();
}

void ControllerMetrics::JobMoved(v1::Job::State from, v1::Job::State to) {
  if (from == to) return;
  if (auto it = jobs_by_state_.find(from); it != jobs_by_state_.end()) it->second->Decrement();
  if (auto it = jobs_by_state_.find(to); it != jobs_by_state_.end()) it->second->Increment();
  if (from == v1::Job::PENDING) queue_depth_.Decrement();
  if (to == v1::Job::PENDING) queue_depth_.Increment();
}

void ControllerMetrics::JobPlaced(absl::Duration waited) {
  scheduling_seconds_.Observe(std::max(0.0, absl::ToDoubleSeconds(waited)));
}

void ControllerMetrics::JobRestarted(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  SeriesLocked(job_id).restarts->Increment();
}

void ControllerMetrics::StallReported(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  SeriesLocked(job_id).stalls->Increment();
}

void ControllerMetrics::JobStateChanged(const std::string& job_id, v1::Job::State state, absl::Time now) {
  const bool placed = state == v1::Job::SCHEDULED || state == v1::Job::RUNNING;
  absl::MutexLock lock(&mu_);
  // A queued job that was never placed has no per-job series.
  if (!placed && !jobs_.contains(job_id)) return;
  JobSeries& s = SeriesLocked(job_id);
  s.running->Set(state == v1::Job::RUNNING ? 1 : 0);
  if (state == v1::Job::RUNNING) {
    if (s.last_progress == nullptr) s.last_progress = &last_progress_family_.Add({{"job_id", job_id}});
    s.last_progress->Set(std::max(s.last_progress->Value(), absl::ToDoubleSeconds(now - absl::UnixEpoch())));
  }
}

std::pair<std::string, std::string> ControllerMetrics::GrpcLabels(const std::string& full_method) {
  // "/trainyard.v1.JobService/SubmitJob"; other services (health, reflection) and
  // unregistered names share one label value so a client cannot grow the series.
  static const char* const kServices[] = {"trainyard.v1.JobService", "trainyard.v1.WorkerService",
                                          "grpc.health.v1.Health"};
  const std::size_t slash = full_method.find('/', 1);
  if (full_method.size() > 1 && full_method[0] == '/' && slash != std::string::npos &&
      full_method.size() - slash <= 64) {
    const std::string service = full_method.substr(1, slash - 1);
    for (const char* known : kServices) {
      if (service == known) return {service, full_method.substr(slash + 1)};
    }
  }
  return {"unknown", "unknown"};
}

void ControllerMetrics::GrpcStarted(const std::string& full_method) {
  auto [service, method] = GrpcLabels(full_method);
  grpc_started_family_.Add({{"grpc_service", service}, {"grpc_method", method}}).Increment();
}

void ControllerMetrics::GrpcHandled(const std::string& full_method, int code, bool unary, absl::Duration elapsed) {
  static const char* const kCodes[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  auto [service, method] = GrpcLabels(full_method);
  const std::string code_name = code >= 0 && code <= 16 ? kCodes[code] : "UNKNOWN";
  grpc_handled_family_.Add({{"grpc_service", service}, {"grpc_method", method}, {"grpc_code", code_name}}).Increment();
  if (unary) {
    grpc_seconds_family_
        .Add({{"grpc_service", service}, {"grpc_method", method}},
             prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5,
                                                     30, 120})
        .Observe(absl::ToDoubleSeconds(elapsed));
  }
}

ControllerMetrics::JobSeries& ControllerMetrics::SeriesLocked(const std::string& job_id) {
  auto [it, inserted] = jobs_.try_emplace(job_id);
  if (inserted) {
    JobSeries& s = it->second;
    s.running = &running_family_.Add({{"job_id", job_id}});
    s.tokens = &tokens_total_family_.Add({{"job_id", job_id}});
    s.restarts = &restarts_family_.Add({{"job_id", job_id}});
    s.stalls = &stalls_family_.Add({{"job_id", job_id}});
    s.validations = &validations_family_.Add({{"job_id", job_id}});
    // The recompile-storm alert reads this per-job total (the by-region series appear
    // only at a region's first recompile, which increase() cannot see).
    s.compile[v1::CompileEvent::RECOMPILE] = &compile_family_.Add({{"job_id", job_id}, {"kind", "recompile"}});
  }
  return it->second;
}

void ControllerMetrics::StepReported(const std::string& job_id, const v1::StepMetrics& step, absl::Time now) {
  absl::MutexLock lock(&mu_);
  JobSeries& s = SeriesLocked(job_id);
  if (s.step == nullptr) {
    s.step = &step_family_.Add({{"job_id", job_id}});
    s.loss = &loss_family_.Add({{"job_id", job_id}});
    s.tokens_per_s = &tokens_family_.Add({{"job_id", job_id}});
    s.mfu = &mfu_family_.Add({{"job_id", job_id}});
    s.step_seconds = &step_seconds_family_.Add({{"job_id", job_id}});
    s.epoch = &epoch_family_.Add({{"job_id", job_id}});
  }
  if (s.last_progress == nullptr) s.last_progress = &last_progress_family_.Add({{"job_id", job_id}});
  s.last_progress->Set(std::max(s.last_progress->Value(), absl::ToDoubleSeconds(now - absl::UnixEpoch())));
  s.step->Set(static_cast<double>(step.step()));
  s.loss->Set(step.loss());
  s.tokens_per_s->Set(step.tokens_per_s());
  s.mfu->Set(step.mfu());
  s.step_seconds->Set(step.step_ms() / 1000.0);
  s.epoch->Set(static_cast<double>(step.epoch()));
  // A rank reports the tokens trained since its previous report (a finite count; a
  // negative or NaN one from a broken rank is not added).
  if (step.tokens() > 0) s.tokens->Increment(static_cast<double>(step.tokens()));
  ExpertLoadLocked(job_id, s, step);
}

void ControllerMetrics::ValidationReported(const std::string& job_id, const v1::Validation& validation) {
  absl::MutexLock lock(&mu_);
  JobSeries& s = SeriesLocked(job_id);
  if (s.validation_loss == nullptr) s.validation_loss = &validation_loss_family_.Add({{"job_id", job_id}});
  s.validation_loss->Set(validation.loss());
  s.validations->Increment();
}

void ControllerMetrics::CheckpointsPruned(const std::string& job_id, const v1::CheckpointsPruned& pruned) {
  absl::MutexLock lock(&mu_);
  JobSeries& s = SeriesLocked(job_id);
  if (s.checkpoint_bytes_freed == nullptr) {
    s.checkpoint_bytes_freed = &checkpoint_bytes_freed_family_.Add({{"job_id", job_id}});
    s.checkpoint_bytes_kept = &checkpoint_bytes_kept_family_.Add({{"job_id", job_id}});
    s.checkpoints_kept = &checkpoints_kept_family_.Add({{"job_id", job_id}});
  }
  // request_validation refuses negative figures; a counter never goes down regardless.
  if (pruned.bytes_freed() > 0) s.checkpoint_bytes_freed->Increment(static_cast<double>(pruned.bytes_freed()));
  s.checkpoint_bytes_kept->Set(static_cast<double>(pruned.bytes_kept()));
  s.checkpoints_kept->Set(static_cast<double>(pruned.kept()));
}

void ControllerMetrics::ExpertLoadLocked(const std::string& job_id, JobSeries& s, const v1::StepMetrics& step) {
  const auto& load = step.expert_load();
  // A dense model reports none; a negative count can only come from a broken rank, and
  // then the whole vector is suspect (its max/mean would be meaningless).
  if (load.empty()) return;
  if (std::any_of(load.begin(), load.end(), [](int64_t n) { return n < 0; })) return;
  // One series per expert; a job's expert count is fixed by its model, but a broken or
  // hostile rank could send millions of entries, so only the first kMaxExpertSeries
  // experts get a series (the ratio below still covers all of them).
  constexpr int kMaxExpertSeries = 256;
  const int shown = std::min(load.size(), kMaxExpertSeries);
  while (static_cast<int>(s.expert_tokens.size()) < shown) {
    const int expert = static_cast<int>(s.expert_tokens.size());
    s.expert_tokens.push_back(&expert_tokens_family_.Add({{"job_id", job_id}, {"expert", std::to_string(expert)}}));
  }
  for (int i = 0; i < shown; ++i) s.expert_tokens[i]->Set(static_cast<double>(load[i]));
  if (step.dropped_tokens() >= 0) {
    if (s.expert_dropped == nullptr) s.expert_dropped = &expert_dropped_family_.Add({{"job_id", job_id}});
    s.expert_dropped->Set(static_cast<double>(step.dropped_tokens()));
  }
  // max/mean needs at least two experts to say anything, and a mean above 0.
  if (load.size() < 2) return;
  double sum = 0;
  double max = 0;
  for (int64_t n : load) {
    sum += static_cast<double>(n);
    max = std::max(max, static_cast<double>(n));
  }
  const double mean = sum / load.size();
  if (!(mean > 0) || !std::isfinite(max / mean)) return;
  if (s.expert_imbalance == nullptr) {
    s.expert_imbalance = &expert_imbalance_family_.Add({{"job_id", job_id}});
  }
  s.expert_imbalance->Set(max / mean);
}

void ControllerMetrics::CompileReported(const std::string& job_id, const v1::CompileEvent& compile) {
  absl::MutexLock lock(&mu_);
  JobSeries& s = SeriesLocked(job_id);
  auto& counter = s.compile[compile.kind()];
  if (counter == nullptr) {
    counter = &compile_family_.Add(
        {{"job_id", job_id}, {"kind", absl::AsciiStrToLower(v1::CompileEvent::Kind_Name(compile.kind()))}});
  }
  counter->Increment();
  if (compile.kind() != v1::CompileEvent::RECOMPILE) return;
  // Region names come from the engine ("layer3.attention"); a job has a few dozen. Cap
  // the label's length and the number of series per job so a broken rank cannot grow
  // the registry without bound.
  constexpr std::size_t kMaxRegionLabel = 96;
  constexpr std::size_t kMaxRegionsPerJob = 256;
  std::size_t cut = std::min(compile.region().size(), kMaxRegionLabel);
  while (cut < compile.region().size() && cut > 0 &&
         (static_cast<unsigned char>(compile.region()[cut]) & 0xc0) == 0x80) {
    --cut;  // never split a UTF-8 sequence
  }
  std::string region = compile.region().substr(0, cut);
  if (region.empty()) region = "unnamed";
  auto it = s.recompiles.find(region);
  if (it == s.recompiles.end()) {
    if (s.recompiles.size() >= kMaxRegionsPerJob) region = "other";
    it = s.recompiles.find(region);
    if (it == s.recompiles.end()) {
      it = s.recompiles.emplace(region, &recompiles_family_.Add({{"job_id", job_id}, {"region", region}})).first;
    }
  }
  it->second->Increment();
}

void ControllerMetrics::JobEnded(const std::string& job_id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  it->second.ended = now;
  it->second.running->Set(0);
}

void ControllerMetrics::Sweep(absl::Time now, absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> drop;
  for (auto& [job_id, s] : jobs_) {
    if (now - s.ended < grace) continue;
    if (s.step != nullptr) {
      step_family_.Remove(s.step);
      loss_family_.Remove(s.loss);
      tokens_family_.Remove(s.tokens_per_s);
      mfu_family_.Remove(s.mfu);
      step_seconds_family_.Remove(s.step_seconds);
      epoch_family_.Remove(s.epoch);
    }
    if (s.validation_loss != nullptr) validation_loss_family_.Remove(s.validation_loss);
    if (s.checkpoint_bytes_freed != nullptr) {
      checkpoint_bytes_freed_family_.Remove(s.checkpoint_bytes_freed);
      checkpoint_bytes_kept_family_.Remove(s.checkpoint_bytes_kept);
      checkpoints_kept_family_.Remove(s.checkpoints_kept);
    }
    if (s.expert_imbalance != nullptr) expert_imbalance_family_.Remove(s.expert_imbalance);
    for (prometheus::Gauge* g : s.expert_tokens) expert_tokens_family_.Remove(g);
    if (s.expert_dropped != nullptr) expert_dropped_family_.Remove(s.expert_dropped);
    if (s.last_progress != nullptr) last_progress_family_.Remove(s.last_progress);
    running_family_.Remove(s.running);
    tokens_total_family_.Remove(s.tokens);
    restarts_family_.Remove(s.restarts);
    stalls_family_.Remove(s.stalls);
    validations_family_.Remove(s.validations);
    for (auto& [region, counter] : s.recompiles) recompiles_family_.Remove(counter);
    for (auto& [kind, counter] : s.compile) compile_family_.Remove(counter);
    drop.push_back(job_id);
  }
  for (const auto& id : drop) jobs_.erase(id);
}

}  // namespace trainyard
