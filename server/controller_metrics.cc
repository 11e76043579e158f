#include "server/controller_metrics.h"

#include <exception>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

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
      slots_total_(BuildGauge()
                       .Name("trainyard_slots")
                       .Help("Rank slots of connected workers")
                       .Register(*registry_)
                       .Add({})),
      slots_free_(BuildGauge()
                      .Name("trainyard_slots_free")
                      .Help("Rank slots not running a rank")
                      .Register(*registry_)
                      .Add({})),
      transitions_family_(BuildCounter()
                              .Name("trainyard_job_transitions_total")
                              .Help("Jobs entering each state")
                              .Register(*registry_)),
      step_family_(BuildGauge()
                       .Name("trainyard_job_step")
                       .Help("Last reported optimizer step")
                       .Register(*registry_)),
      loss_family_(BuildGauge()
                       .Name("trainyard_job_loss")
                       .Help("Last reported training loss")
                       .Register(*registry_)),
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
      preflights_family_(BuildCounter()
                             .Name("trainyard_preflights_total")
                             .Help("Compile preflights run before accepting a job, by outcome")
                             .Register(*registry_)),
      preflight_seconds_(BuildHistogram()
                             .Name("trainyard_preflight_duration_seconds")
                             .Help("Wall time of each compile preflight run")
                             .Register(*registry_)
                             .Add({}, prometheus::Histogram::BucketBoundaries{
                                          1, 2, 5, 10, 20, 30, 60, 120, 300, 600})) {
  for (int s = v1::Job::PENDING; s <= v1::Job::RESTARTING; ++s) {
    std::string name = absl::AsciiStrToLower(v1::Job::State_Name(static_cast<v1::Job::State>(s)));
    transitions_[s] = &transitions_family_.Add({{"state", name}});
  }
  for (const char* outcome :
       {"clean", "findings", "bad_config", "failed", "timeout", "cancelled", "refused"}) {
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
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", address, ": ", e.what()));
  }
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

ControllerMetrics::JobSeries& ControllerMetrics::SeriesLocked(const std::string& job_id) {
  auto [it, inserted] = jobs_.try_emplace(job_id);
  if (inserted) {
    it->second.step = &step_family_.Add({{"job_id", job_id}});
    it->second.loss = &loss_family_.Add({{"job_id", job_id}});
    it->second.tokens_per_s = &tokens_family_.Add({{"job_id", job_id}});
    it->second.mfu = &mfu_family_.Add({{"job_id", job_id}});
  }
  return it->second;
}

void ControllerMetrics::StepReported(const std::string& job_id, const v1::StepMetrics& step) {
  absl::MutexLock lock(&mu_);
  JobSeries& s = SeriesLocked(job_id);
  s.step->Set(static_cast<double>(step.step()));
  s.loss->Set(step.loss());
  s.tokens_per_s->Set(step.tokens_per_s());
  s.mfu->Set(step.mfu());
}

void ControllerMetrics::CompileReported(const std::string& job_id,
                                        const v1::CompileEvent& compile) {
  absl::MutexLock lock(&mu_);
  JobSeries& s = SeriesLocked(job_id);
  auto& counter = s.compile[compile.kind()];
  if (counter == nullptr) {
    counter = &compile_family_.Add(
        {{"job_id", job_id},
         {"kind", absl::AsciiStrToLower(v1::CompileEvent::Kind_Name(compile.kind()))}});
  }
  counter->Increment();
}

void ControllerMetrics::JobEnded(const std::string& job_id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second.ended = now;
}

void ControllerMetrics::Sweep(absl::Time now, absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> drop;
  for (auto& [job_id, s] : jobs_) {
    if (now - s.ended < grace) continue;
    step_family_.Remove(s.step);
    loss_family_.Remove(s.loss);
    tokens_family_.Remove(s.tokens_per_s);
    mfu_family_.Remove(s.mfu);
    for (auto& [kind, counter] : s.compile) compile_family_.Remove(counter);
    drop.push_back(job_id);
  }
  for (const auto& id : drop) jobs_.erase(id);
}

}  // namespace trainyard
