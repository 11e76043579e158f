#include "tests/fakes/fake_job_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "common/base/sha256.h"

namespace trainyard::testing {
namespace {

grpc::Status NotFound(const std::string& id) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + id + " not found");
}

}  // namespace

v1::Event FakeJobService::MakeEvent(const std::string& job, int64_t seq, int rank) {
  v1::Event e;
  e.set_job_id(job);
  e.set_seq(seq);
  e.set_rank(rank);
  e.set_attempt(rank < 0 ? 0 : 1);
  e.mutable_time()->set_seconds(1796083200 + seq);
  return e;
}

v1::Event FakeJobService::StateEvent(const std::string& job, int64_t seq, v1::Job::State state,
                                     const std::string& reason) {
  v1::Event e = MakeEvent(job, seq, -1);
  e.mutable_job_state()->set_state(state);
  e.mutable_job_state()->set_reason(reason);
  return e;
}

v1::Event FakeJobService::StepEvent(const std::string& job, int64_t seq, int64_t step, double loss) {
  v1::Event e = MakeEvent(job, seq, 0);
  e.mutable_step_metrics()->set_step(step);
  e.mutable_step_metrics()->set_loss(loss);
  e.mutable_step_metrics()->set_tokens_per_s(1000);
  return e;
}

v1::Event FakeJobService::LogEvent(const std::string& job, int64_t seq, int rank,
                                   const std::string& level, const std::string& message) {
  v1::Event e = MakeEvent(job, seq, rank);
  e.mutable_log()->set_level(level);
  e.mutable_log()->set_message(message);
  return e;
}

void FakeJobService::PutJob(const v1::Job& job) {
  absl::MutexLock lock(&mu_);
  jobs_[job.id()] = job;
}

v1::Job FakeJobService::AddJob(const std::string& id, v1::Job::State state, int steps) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.set_world_size(1);
  job.mutable_spec()->mutable_job()->set_name("name-" + id);
  if (steps > 0) job.mutable_spec()->mutable_training()->set_steps(steps);
  PutJob(job);
  return job;
}

v1::Job FakeJobService::Job(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return jobs_[id];
}

void FakeJobService::SetEvents(const std::string& id, std::vector<v1::Event> events) {
  absl::MutexLock lock(&mu_);
  events_[id] = std::move(events);
}

std::vector<v1::Event> FakeJobService::Events(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return events_[id];
}

void FakeJobService::AddWorker(const v1::WorkerInfo& worker) {
  absl::MutexLock lock(&mu_);
  workers_.push_back(worker);
}

void FakeJobService::ScriptWatch(const std::string& id, int n, const WatchCall& call) {
  absl::MutexLock lock(&mu_);
  watch_script_[id][n] = call;
}

void FakeJobService::SetWatchFallback(const std::string& id, const WatchCall& fallback) {
  absl::MutexLock lock(&mu_);
  watch_fallback_[id] = fallback;
}

void FakeJobService::FailCall(const std::string& method, const std::string& id,
                              const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  failures_[method + "/" + id] = status;
}

void FakeJobService::HoldCall(const std::string& method, const std::string& id) {
  absl::MutexLock lock(&mu_);
  holds_.insert(method + "/" + id);
}

void FakeJobService::ReleaseHeldCalls() {
  absl::MutexLock lock(&mu_);
  released_ = true;
}

void FakeJobService::SetWatchBatch(int n) {
  absl::MutexLock lock(&mu_);
  watch_batch_ = n;
}

int FakeJobService::BatchedRefusals() {
  absl::MutexLock lock(&mu_);
  return batched_refusals_;
}

std::vector<std::string> FakeJobService::WatchRpcs(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return watch_rpcs_[id];
}

std::vector<int64_t> FakeJobService::WatchFromSeqs(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return watch_from_seqs_[id];
}

std::vector<v1::JobSpec> FakeJobService::Submitted() {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

v1::ListJobsRequest FakeJobService::LastList() {
  absl::MutexLock lock(&mu_);
  return last_list_;
}

v1::CancelJobRequest FakeJobService::LastCancel() {
  absl::MutexLock lock(&mu_);
  return last_cancel_;
}

v1::ResizeJobRequest FakeJobService::LastResize() {
  absl::MutexLock lock(&mu_);
  return last_resize_;
}

void FakeJobService::ClearLastResize() {
  absl::MutexLock lock(&mu_);
  last_resize_.Clear();
}

void FakeJobService::SetCheckpointAnswer(const std::string& id, const v1::CheckpointRef& checkpoint) {
  absl::MutexLock lock(&mu_);
  checkpoint_answers_[id] = checkpoint;
}

v1::CheckpointJobRequest FakeJobService::LastCheckpoint() {
  absl::MutexLock lock(&mu_);
  return last_checkpoint_;
}

absl::Duration FakeJobService::LastCheckpointDeadline() {
  absl::MutexLock lock(&mu_);
  return last_checkpoint_deadline_;
}

v1::CordonWorkerRequest FakeJobService::LastCordon() {
  absl::MutexLock lock(&mu_);
  return last_cordon_;
}

v1::DrainWorkerRequest FakeJobService::LastDrain() {
  absl::MutexLock lock(&mu_);
  return last_drain_;
}

std::vector<v1::WorkerInfo> FakeJobService::Workers() {
  absl::MutexLock lock(&mu_);
  return workers_;
}

void FakeJobService::Hold(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return released_; };
  if (limit == absl::InfiniteDuration()) {
    mu_.Await(absl::Condition(&released));
  } else {
    mu_.AwaitWithTimeout(absl::Condition(&released), limit);
  }
}

bool FakeJobService::Scripted(const std::string& method, const std::string& id, grpc::Status* status) {
  const std::string key = method + "/" + id;
  bool hold = false;
  {
    absl::MutexLock lock(&mu_);
    hold = holds_.count(key) > 0;
    if (!hold) {
      auto it = failures_.find(key);
      if (it == failures_.end()) return false;
      *status = it->second;
      return true;
    }
  }
  Hold(absl::InfiniteDuration());
  *status = grpc::Status(grpc::StatusCode::CANCELLED, "released by the test");
  return true;
}

grpc::Status FakeJobService::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                                       v1::Job* job) {
  absl::MutexLock lock(&mu_);
  submitted_.push_back(request->spec());
  job->set_id("j-new");
  job->set_state(v1::Job::PENDING);
  *job->mutable_spec() = request->spec();
  return grpc::Status::OK;
}

grpc::Status FakeJobService::GetJob(grpc::ServerContext*, const v1::GetJobRequest* request, v1::Job* job) {
  grpc::Status status;
  if (Scripted("GetJob", request->id(), &status)) return status;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->id());
  if (it == jobs_.end()) return NotFound(request->id());
  *job = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeJobService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  absl::MutexLock lock(&mu_);
  last_list_ = *request;
  for (const auto& [id, job] : jobs_) *response->add_jobs() = job;
  return grpc::Status::OK;
}

grpc::Status FakeJobService::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                                       v1::Job* job) {
  {
    absl::MutexLock lock(&mu_);
    last_cancel_ = *request;
  }
  grpc::Status status;
  if (Scripted("CancelJob", request->id(), &status)) return status;
  job->set_id(request->id());
  job->set_state(v1::Job::CANCELLED);
  job->set_failure_reason(request->reason());
  return grpc::Status::OK;
}

// As the controller does: NOT_FOUND for an unknown job, INVALID_ARGUMENT past the
// job's parallelism.dp, else the job RESTARTING.
grpc::Status FakeJobService::ResizeJob(grpc::ServerContext*, const v1::ResizeJobRequest* request,
                                       v1::ResizeJobResponse* response) {
  absl::MutexLock lock(&mu_);
  last_resize_ = *request;
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) return NotFound(request->job_id());
  const int max_dp = std::max(1, it->second.spec().parallelism().dp());
  if (request->dp() > max_dp) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "ResizeJobRequest.dp: must be in [1, " + std::to_string(max_dp) + "] for job " +
                            request->job_id() + ", got " + std::to_string(request->dp()));
  }
  *response->mutable_job() = it->second;
  response->mutable_job()->set_state(v1::Job::RESTARTING);
  return grpc::Status::OK;
}

grpc::Status FakeJobService::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                         v1::ListWorkersResponse* response) {
  absl::MutexLock lock(&mu_);
  for (const v1::WorkerInfo& w : workers_) *response->add_workers() = w;
  return grpc::Status::OK;
}

grpc::Status FakeJobService::CheckpointJob(grpc::ServerContext* context, const v1::CheckpointJobRequest* request,
                                           v1::CheckpointJobResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    last_checkpoint_ = *request;
    const auto deadline = context->deadline();
    last_checkpoint_deadline_ = deadline == std::chrono::system_clock::time_point::max()
                                    ? absl::InfiniteDuration()
                                    : absl::FromChrono(deadline - std::chrono::system_clock::now());
  }
  grpc::Status status;
  if (Scripted("CheckpointJob", request->job_id(), &status)) return status;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) return NotFound(request->job_id());
  const v1::Job& job = it->second;
  const std::string state = v1::Job::State_Name(job.state());
  if (job.state() == v1::Job::SUCCEEDED || job.state() == v1::Job::FAILED || job.state() == v1::Job::CANCELLED) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "job " + job.id() + " already ended " + state);
  }
  if (job.spec().checkpoint().dir().empty()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "job " + job.id() + " sets no checkpoint.dir, so its ranks have nowhere to write a checkpoint");
  }
  if (job.state() != v1::Job::RUNNING) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "job " + job.id() + " is " + state + ": only a running attempt can checkpoint");
  }
  auto answer = checkpoint_answers_.find(job.id());
  *response->mutable_checkpoint() = answer != checkpoint_answers_.end() ? answer->second : job.last_checkpoint();
  return grpc::Status::OK;
}

namespace {

v1::WorkerInfo* FindWorker(std::vector<v1::WorkerInfo>& workers, const std::string& name) {
  for (v1::WorkerInfo& w : workers) {
    if (w.name() == name) return &w;
  }
  return nullptr;
}

grpc::Status WorkerNotFound(const std::string& name) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, "worker '" + name + "' is not known to this controller");
}

}  // namespace

grpc::Status FakeJobService::CordonWorker(grpc::ServerContext*, const v1::CordonWorkerRequest* request,
                                          v1::WorkerInfo* worker) {
  {
    absl::MutexLock lock(&mu_);
    last_cordon_ = *request;
  }
  grpc::Status status;
  if (Scripted("CordonWorker", request->name(), &status)) return status;
  absl::MutexLock lock(&mu_);
  v1::WorkerInfo* w = FindWorker(workers_, request->name());
  if (w == nullptr) return WorkerNotFound(request->name());
  w->set_cordoned(request->cordon());
  w->set_cordon_reason(request->cordon() ? request->reason() : "");
  *worker = *w;
  return grpc::Status::OK;
}

grpc::Status FakeJobService::DrainWorker(grpc::ServerContext*, const v1::DrainWorkerRequest* request,
                                         v1::DrainWorkerResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    last_drain_ = *request;
  }
  grpc::Status status;
  if (Scripted("DrainWorker", request->name(), &status)) return status;
  absl::MutexLock lock(&mu_);
  v1::WorkerInfo* w = FindWorker(workers_, request->name());
  if (w == nullptr) return WorkerNotFound(request->name());
  w->set_cordoned(true);
  w->set_cordon_reason(request->reason());
  *response->mutable_worker() = *w;
  for (const auto& [id, job] : jobs_) {
    if (job.state() != v1::Job::RUNNING && job.state() != v1::Job::SCHEDULED) continue;
    const auto& ranks = job.placement().ranks();
    if (std::any_of(ranks.begin(), ranks.end(), [&](const auto& r) { return r.worker() == request->name(); })) {
      response->add_job_ids(id);
    }
  }
  return grpc::Status::OK;
}

void FakeJobService::AddArtifact(const v1::ArtifactInfo& info, const std::string& bytes, PullMode mode) {
  absl::MutexLock lock(&mu_);
  artifacts_.push_back(Artifact{info, bytes, mode});
}

grpc::Status FakeJobService::ListArtifacts(grpc::ServerContext*, const v1::ListArtifactsRequest* request,
                                           v1::ListArtifactsResponse* response) {
  grpc::Status status;
  if (Scripted("ListArtifacts", request->job_id(), &status)) return status;
  absl::MutexLock lock(&mu_);
  for (const Artifact& a : artifacts_) {
    if (a.info.job_id() == request->job_id()) *response->add_artifacts() = a.info;
  }
  return grpc::Status::OK;
}

grpc::Status FakeJobService::PullArtifact(grpc::ServerContext*, const v1::PullArtifactRequest* request,
                                          grpc::ServerWriter<v1::ArtifactData>* writer) {
  std::optional<Artifact> found;
  {
    absl::MutexLock lock(&mu_);
    for (const Artifact& a : artifacts_) {
      if (a.info.job_id() == request->job_id() && a.info.name() == request->name()) found = a;
    }
  }
  if (!found.has_value()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "artifact " + request->name() + " of job " + request->job_id() + " not found");
  }
  v1::ArtifactData first;
  *first.mutable_info() = found->info;
  if (found->mode == PullMode::kWrongSha) first.mutable_info()->set_sha256(Sha256Hex("other"));
  if (found->mode == PullMode::kOtherName) first.mutable_info()->set_name("..");
  if (found->mode != PullMode::kNoInfo) writer->Write(first);
  std::string bytes = found->bytes;
  if (found->mode == PullMode::kTruncated) bytes.resize(bytes.size() / 2);
  for (size_t at = 0; at < bytes.size(); at += 100) {
    v1::ArtifactData data;
    data.set_data(bytes.substr(at, 100));
    writer->Write(data);
  }
  return grpc::Status::OK;
}

grpc::Status FakeJobService::WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* request,
                                      grpc::ServerWriter<v1::Event>* writer) {
  return ServeWatch("WatchJob", *request, [writer](const std::vector<v1::Event>& events) {
    for (const v1::Event& e : events) {
      if (!writer->Write(e)) return false;
    }
    return true;
  });
}

grpc::Status FakeJobService::WatchJobBatched(grpc::ServerContext*, const v1::WatchJobRequest* request,
                                             grpc::ServerWriter<v1::WatchJobResponse>* writer) {
  int batch;
  {
    absl::MutexLock lock(&mu_);
    batch = watch_batch_;
    if (batch == 0) {
      ++batched_refusals_;
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
    }
  }
  return ServeWatch("WatchJobBatched", *request, [writer, batch](const std::vector<v1::Event>& events) {
    for (size_t at = 0; at < events.size(); at += static_cast<size_t>(batch)) {
      v1::WatchJobResponse message;
      for (size_t i = at; i < std::min(events.size(), at + static_cast<size_t>(batch)); ++i) {
        *message.add_events() = events[i];
      }
      if (!writer->Write(message)) return false;
    }
    return true;
  });
}

grpc::Status FakeJobService::ServeWatch(const std::string& rpc, const v1::WatchJobRequest& request,
                                        const std::function<bool(const std::vector<v1::Event>&)>& write) {
  std::vector<v1::Event> events;
  WatchCall call;
  {
    absl::MutexLock lock(&mu_);
    std::vector<int64_t>& calls = watch_from_seqs_[request.id()];
    calls.push_back(request.from_seq());
    watch_rpcs_[request.id()].push_back(rpc);
    auto it = events_.find(request.id());
    if (it == events_.end()) return NotFound(request.id());
    events = it->second;
    const std::map<int, WatchCall>& script = watch_script_[request.id()];
    auto scripted = script.find(static_cast<int>(calls.size()));
    if (scripted != script.end()) {
      call = scripted->second;
    } else if (auto fallback = watch_fallback_.find(request.id()); fallback != watch_fallback_.end()) {
      call = fallback->second;
    }
  }
  const int64_t from = std::max<int64_t>(1, request.from_seq() - call.replay_before);
  std::vector<v1::Event> send;
  for (const v1::Event& e : events) {
    if (e.seq() < from) continue;
    if (call.stop_after_seq >= 0 && e.seq() > call.stop_after_seq) break;
    send.push_back(e);
  }
  if (!write(send)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  if (call.hold_until_released) {
    Hold(absl::InfiniteDuration());
  } else if (call.hold_for > absl::ZeroDuration()) {
    Hold(call.hold_for);
  }
  return call.status;
}

}  // namespace trainyard::testing
