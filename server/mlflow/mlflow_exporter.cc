#include "server/mlflow/mlflow_exporter.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"
#include "common/http/http_client.h"
#include "spdlog/spdlog.h"

namespace trainyard::mlflow {
namespace {

constexpr char kJobIdTag[] = "trainyard.job_id";

bool Ended(v1::Job::State s) { return s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED; }

}  // namespace

absl::Status ValidateMlflowOptions(const MlflowExporterOptions& options) {
  TY_RETURN_IF_ERROR(http::ValidateEndpointUrl(options.uri, "--mlflow-uri"));
  const std::string& name = options.experiment;
  if (name.empty() || name.size() > 500) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mlflow-experiment must be 1 to 500 bytes, not ", name.size()));
  }
  if (!IsUtf8(name)) return absl::InvalidArgumentError("--mlflow-experiment is not valid UTF-8");
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mlflow-experiment ", Quoted(name), " holds a control character"));
    }
  }
  return absl::OkStatus();
}

MlflowExporter::MlflowExporter(const MlflowExporterOptions& options, JobStore* store, JobLookup lookup,
                               std::unique_ptr<MlflowCursorStore> cursors, prometheus::Registry& registry,
                               Clock* clock)
    : options_(options),
      store_(store),
      lookup_(std::move(lookup)),
      cursors_store_(std::move(cursors)),
      metrics_(registry),
      clock_(clock),
      client_(MlflowClientOptions{options.uri, options.connect_timeout, options.request_timeout, 4 << 20, &cancel_}) {}

absl::StatusOr<std::unique_ptr<MlflowExporter>> MlflowExporter::Create(
    const MlflowExporterOptions& options, JobStore* store, JobLookup lookup, std::unique_ptr<MlflowCursorStore> cursors,
    prometheus::Registry& registry, Clock* clock) {
  TY_RETURN_IF_ERROR(ValidateMlflowOptions(options));
  std::unique_ptr<MlflowExporter> e(
      new MlflowExporter(options, store, std::move(lookup), std::move(cursors), registry, clock));
  TY_ASSIGN_OR_RETURN(std::vector<MlflowCursor> loaded, e->cursors_store_->LoadAll());
  for (MlflowCursor& c : loaded) e->cursors_.emplace(c.job_id, std::move(c));
  return e;
}

void MlflowExporter::Start(const std::vector<v1::Job>& jobs) {
  {
    absl::MutexLock lock(&mu_);
    for (const v1::Job& job : jobs) {
      auto it = cursors_.find(job.id());
      const bool behind = it != cursors_.end() &&
                          (!it->second.finished || store_->LastSeq(job.id()) > it->second.sent_seq);
      if (!Ended(job.state()) || behind) pending_[job.id()].dirty = true;
    }
  }
  UpdateOutbox();
  thread_ = std::thread([this] { Run(); });
}

MlflowExporter::~MlflowExporter() { Stop(); }

void MlflowExporter::OnCommitted(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  pending_[job_id].dirty = true;
  wake_ = true;
}

void MlflowExporter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cancel_.store(true);
  if (thread_.joinable()) thread_.join();
}

bool MlflowExporter::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = clock_->Now() + timeout;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const bool dirty = std::any_of(pending_.begin(), pending_.end(), [](const auto& p) { return p.second.dirty; });
      if (!busy_ && !dirty) return true;
    }
    if (clock_->Now() >= deadline) return false;
    clock_->SleepFor(absl::Milliseconds(20));
  }
}

std::string MlflowExporter::NextJob() {
  absl::MutexLock lock(&mu_);
  busy_ = false;
  while (!stopping_) {
    const absl::Time now = clock_->Now();
    absl::Time earliest = absl::InfiniteFuture();
    std::string pick;
    // Round robin: the first due job after the one picked last, wrapping around.
    auto consider = [&](auto begin, auto end) {
      for (auto it = begin; it != end && pick.empty(); ++it) {
        if (!it->second.dirty) continue;
        if (it->second.next_try <= now) {
          pick = it->first;
        } else {
          earliest = std::min(earliest, it->second.next_try);
        }
      }
    };
    consider(pending_.upper_bound(last_picked_), pending_.end());
    consider(pending_.begin(), pending_.upper_bound(last_picked_));
    if (!pick.empty()) {
      pending_[pick].dirty = false;
      last_picked_ = pick;
      busy_ = true;
      return pick;
    }
    wake_ = false;
    auto woken = [](MlflowExporter* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) { return e->wake_ || e->stopping_; };
    clock_->AwaitWithDeadline(&mu_, absl::Condition(+woken, this), earliest);
  }
  return "";
}

void MlflowExporter::Run() {
  while (true) {
    const std::string job_id = NextJob();
    if (job_id.empty()) return;
    bool more = false;
    const absl::Status status = Advance(job_id, &more);
    if (!status.ok()) Complain(job_id, status);
    if (status.ok() && failing_) {
      spdlog::info("MLflow export: {} answers again{}", http::RedactUrl(options_.uri),
                   suppressed_ > 0 ? absl::StrCat(" (", suppressed_, " more failures were not logged)") : "");
      failing_ = false;
      suppressed_ = 0;
      last_complaint_kind_.clear();
    }
    {
      absl::MutexLock lock(&mu_);
      Pending& p = pending_[job_id];
      if (!status.ok()) {
        ++p.failures;
        const int doublings = std::min(p.failures - 1, 30);
        p.next_try = clock_->Now() + std::min(options_.backoff_initial * (int64_t{1} << doublings), options_.backoff_max);
        p.dirty = true;
      } else {
        p.failures = 0;
        p.next_try = absl::InfinitePast();
        if (more) p.dirty = true;
        if (!p.dirty) pending_.erase(job_id);
      }
    }
    UpdateOutbox();
  }
}

absl::Status MlflowExporter::Counted(absl::Status status) {
  // A request cancelled by Stop is not MLflow's failure.
  if (status.code() != absl::StatusCode::kCancelled) metrics_.RequestDone(status.ok());
  return status;
}

absl::Status MlflowExporter::EnsureRun(MlflowCursor* cursor, const v1::Job& job) {
  if (experiment_id_.empty()) {
    absl::StatusOr<std::string> id = client_.GetOrCreateExperiment(options_.experiment);
    TY_RETURN_IF_ERROR(Counted(id.status()));
    experiment_id_ = *id;
  }
  if (cursor->run_id.empty()) {
    // A run created before a crash (or a lost answer) is found by its tag, not made twice.
    absl::StatusOr<std::optional<std::string>> found = client_.FindRun(experiment_id_, kJobIdTag, job.id());
    if (!Counted(found.status()).ok()) {
      experiment_id_.clear();  // it may have been deleted: look it up again
      return found.status();
    }
    if (found->has_value()) {
      cursor->run_id = **found;
    } else {
      const std::string& name = job.spec().job().name();
      absl::StatusOr<std::string> run =
          client_.CreateRun(experiment_id_, name.empty() ? job.id() : absl::StrCat(job.id(), " ", name),
                            ToUnixMs(job.create_time()), RunTags(job, job.attempt()));
      if (!Counted(run.status()).ok()) {
        experiment_id_.clear();
        return run.status();
      }
      cursor->run_id = *run;
      spdlog::info("job={}: MLflow run {} in experiment {} ({})", job.id(), cursor->run_id, experiment_id_,
                   Quoted(options_.experiment));
    }
    TY_RETURN_IF_ERROR(cursors_store_->Put(*cursor));
  }
  if (!cursor->params_logged) {
    SpecParams spec = FlattenSpec(job.spec());
    for (std::size_t i = 0; i < spec.params.size(); i += kMaxParamsPerBatch) {
      const std::size_t end = std::min(spec.params.size(), i + kMaxParamsPerBatch);
      std::vector<KeyValue> chunk(spec.params.begin() + i, spec.params.begin() + end);
      TY_RETURN_IF_ERROR(Counted(client_.LogBatch(cursor->run_id, {}, chunk, {})));
    }
    for (const std::string& note : spec.notes) spdlog::warn("job={}: MLflow: {}", job.id(), note);
    cursor->params_logged = true;
    TY_RETURN_IF_ERROR(cursors_store_->Put(*cursor));
  }
  return absl::OkStatus();
}

absl::Status MlflowExporter::Advance(const std::string& job_id, bool* more) {
  *more = false;
  auto it = cursors_.find(job_id);
  if (it == cursors_.end()) {
    // The row exists before any request, so a restart resumes this job even if it ends
    // while MLflow is away.
    MlflowCursor fresh;
    fresh.job_id = job_id;
    TY_RETURN_IF_ERROR(cursors_store_->Put(fresh));
    it = cursors_.emplace(job_id, std::move(fresh)).first;
  }
  MlflowCursor cursor = it->second;
  if (cursor.run_id.empty() || !cursor.params_logged) {
    absl::StatusOr<v1::Job> job = lookup_(job_id);
    if (!job.ok()) return job.status();
    const absl::Status made = EnsureRun(&cursor, *job);
    it->second = cursor;  // whatever was stored
    TY_RETURN_IF_ERROR(made);
    *more = true;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<v1::Event>> events = store_->ReadEvents(job_id, cursor.sent_seq + 1,
                                                                      options_.events_per_read);
  if (!events.ok()) {
    if (events.status().code() == absl::StatusCode::kFailedPrecondition) {
      // Compacted by retention before MLflow took them: nothing left to read, ever.
      spdlog::error("job={}: MLflow export stops at seq {}: {}", job_id, cursor.sent_seq,
                    std::string(events.status().message()));
      cursor.finished = true;
      cursor.sent_seq = store_->LastSeq(job_id);
      TY_RETURN_IF_ERROR(cursors_store_->Put(cursor));
      it->second = cursor;
      return absl::OkStatus();
    }
    return events.status();
  }
  if (events->empty()) return absl::OkStatus();
  std::vector<Metric> metrics;
  Totals totals = cursor.totals;
  int64_t last = cursor.sent_seq;
  std::string end_status;
  int64_t end_ms = 0;
  for (const v1::Event& e : *events) {
    std::vector<Metric> one;
    Totals next = totals;
    const std::string status = AppendEventMetrics(e, &next, &one);
    if (!metrics.empty() && metrics.size() + one.size() > static_cast<std::size_t>(kMaxMetricsPerBatch)) break;
    metrics.insert(metrics.end(), std::make_move_iterator(one.begin()), std::make_move_iterator(one.end()));
    totals = next;
    last = e.seq();
    if (!status.empty()) {
      end_status = status;
      end_ms = ToUnixMs(e.time());
    }
  }
  *more = last < events->back().seq() || static_cast<int>(events->size()) == options_.events_per_read;
  std::vector<KeyValue> tags;
  if (totals.attempt != cursor.totals.attempt) tags.push_back({"trainyard.attempt", absl::StrCat(totals.attempt)});
  if (!metrics.empty() || !tags.empty()) {
    TY_RETURN_IF_ERROR(Counted(client_.LogBatch(cursor.run_id, metrics, {}, tags)));
  }
  if (!end_status.empty() && !cursor.finished) {
    TY_RETURN_IF_ERROR(Counted(client_.UpdateRun(cursor.run_id, end_status, end_ms)));
    cursor.finished = true;
  }
  metrics_.EventsSent(static_cast<double>(last - cursor.sent_seq));
  cursor.sent_seq = last;
  cursor.totals = totals;
  TY_RETURN_IF_ERROR(cursors_store_->Put(cursor));
  it->second = cursor;
  return absl::OkStatus();
}

void MlflowExporter::Complain(const std::string& job_id, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kCancelled) return;  // Stop
  failing_ = true;
  const std::string kind = absl::StrCat(absl::StatusCodeToString(status.code()), "/", MlflowErrorCode(status));
  const absl::Time now = clock_->Now();
  if (kind == last_complaint_kind_ && now - last_complaint_ < options_.log_interval) {
    ++suppressed_;
    return;
  }
  spdlog::warn("MLflow export of job={} failed, retrying with backoff (events stay in the store): {}{}", job_id,
               std::string(status.message()),
               suppressed_ > 0 ? absl::StrCat(" [", suppressed_, " similar failures since the last one logged]") : "");
  last_complaint_ = now;
  last_complaint_kind_ = kind;
  suppressed_ = 0;
}

void MlflowExporter::UpdateOutbox() {
  std::vector<std::string> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, p] : pending_) jobs.push_back(id);
  }
  double events = 0;
  for (const std::string& id : jobs) {
    auto it = cursors_.find(id);
    const int64_t sent = it == cursors_.end() ? 0 : it->second.sent_seq;
    events += static_cast<double>(std::max<int64_t>(0, store_->LastSeq(id) - sent));
  }
  metrics_.SetOutbox(events, static_cast<double>(jobs.size()));
}

}  // namespace trainyard::mlflow
