// An in-process JobService for client tests: canned jobs, workers and event streams,
// streams scripted to break, replay or stay open, and a record of what it was asked.
// Serve it with tests/fakes/loopback_server.h, passing ReleaseHeldCalls as the
// before-shutdown hook: calls held open wait on a condition (never a sleep loop) until
// that releases them, a hold's own time runs out, or the test calls it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainyard/v1/job_service.grpc.pb.h"

namespace trainyard::testing {

// Thread-safe.
class FakeJobService final : public v1::JobService::Service {
 public:
  // How one watch call (WatchJob or WatchJobBatched) answers: the stored events from `from_seq - replay_before`
  // (a server that replays a little too much) up to and including `stop_after_seq`
  // (-1: all), then a hold, then `status`.
  struct WatchCall {
    int64_t replay_before = 0;
    int64_t stop_after_seq = -1;
    bool hold_until_released = false;  // held until ReleaseHeldCalls
    absl::Duration hold_for = absl::ZeroDuration();  // else held this long (or until released)
    grpc::Status status = grpc::Status::OK;
  };

  // How a pull of one artifact answers: honestly, or as a broken or hostile controller.
  enum class PullMode { kHonest, kWrongSha, kOtherName, kTruncated, kNoInfo };

  // Events of `job` (seq, rank, attempt 1 for ranks, a time from the seq).
  static v1::Event MakeEvent(const std::string& job, int64_t seq, int rank);
  static v1::Event StateEvent(const std::string& job, int64_t seq, v1::Job::State state,
                              const std::string& reason = "");
  static v1::Event StepEvent(const std::string& job, int64_t seq, int64_t step, double loss);
  static v1::Event LogEvent(const std::string& job, int64_t seq, int rank, const std::string& level,
                            const std::string& message);

  // Stores `job` under its id (replacing one), or a job of `state` and `steps`.
  void PutJob(const v1::Job& job);
  v1::Job AddJob(const std::string& id, v1::Job::State state, int steps = 0);
  v1::Job Job(const std::string& id);
  void SetEvents(const std::string& id, std::vector<v1::Event> events);
  std::vector<v1::Event> Events(const std::string& id);
  void AddWorker(const v1::WorkerInfo& worker);
  // ListArtifacts of info.job_id() lists it; PullArtifact sends `bytes` 100 at a time
  // after an ArtifactData with the info (both as `mode` says).
  void AddArtifact(const v1::ArtifactInfo& info, const std::string& bytes, PullMode mode = PullMode::kHonest);
  // WatchJobBatched sends the events `n` to a message (the last message fewer); with
  // `n` 0 it is UNIMPLEMENTED, as on a controller older than it (such a call is
  // counted by BatchedRefusals, not recorded as a watch call). Default: 3.
  void SetWatchBatch(int n);
  int BatchedRefusals();
  // The `n`th (1-based) watch call of `id` answers so; other calls as `fallback`.
  void ScriptWatch(const std::string& id, int n, const WatchCall& call);
  void SetWatchFallback(const std::string& id, const WatchCall& fallback);
  // `method` ("GetJob", "CancelJob", ...) for `id` answers `status`; HoldCall: is held
  // until ReleaseHeldCalls and then answers CANCELLED.
  void FailCall(const std::string& method, const std::string& id, const grpc::Status& status);
  void HoldCall(const std::string& method, const std::string& id);
  void ReleaseHeldCalls();

  // What was asked.
  std::vector<int64_t> WatchFromSeqs(const std::string& id);
  // The RPC of each watch call of `id`: "WatchJob" or "WatchJobBatched".
  std::vector<std::string> WatchRpcs(const std::string& id);
  std::vector<v1::JobSpec> Submitted();
  v1::ListJobsRequest LastList();
  v1::CancelJobRequest LastCancel();
  v1::ResizeJobRequest LastResize();
  void ClearLastResize();
  // CheckpointJob of `id` answers `checkpoint` (else the job's last_checkpoint) once the
  // job passes the controller's checks (RUNNING, checkpoint.dir set).
  void SetCheckpointAnswer(const std::string& id, const v1::CheckpointRef& checkpoint);
  v1::CheckpointJobRequest LastCheckpoint();
  // The time the last CheckpointJob call had left before its deadline when it arrived
  // (absl::InfiniteDuration() for none).
  absl::Duration LastCheckpointDeadline();
  v1::CordonWorkerRequest LastCordon();
  v1::DrainWorkerRequest LastDrain();
  std::vector<v1::WorkerInfo> Workers();

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request, v1::Job* job) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request, v1::Job* job) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request, v1::Job* job) override;
  grpc::Status ResizeJob(grpc::ServerContext*, const v1::ResizeJobRequest* request,
                         v1::ResizeJobResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* response) override;
  // As the controller (server/state, issue 29) answers, in its words: NOT_FOUND for an
  // unknown job or worker, FAILED_PRECONDITION for an ended job, one without
  // checkpoint.dir, or one not RUNNING (in that order). No role checks: the fake has no
  // tokens. Scriptable by FailCall/HoldCall under the job id or
  // worker name.
  grpc::Status CheckpointJob(grpc::ServerContext* context, const v1::CheckpointJobRequest* request,
                             v1::CheckpointJobResponse* response) override;
  grpc::Status CordonWorker(grpc::ServerContext*, const v1::CordonWorkerRequest* request,
                            v1::WorkerInfo* worker) override;
  // Cordons the worker and names every RUNNING or SCHEDULED job with a rank there (in id
  // order); the jobs themselves are left as they are.
  grpc::Status DrainWorker(grpc::ServerContext*, const v1::DrainWorkerRequest* request,
                           v1::DrainWorkerResponse* response) override;
  grpc::Status ListArtifacts(grpc::ServerContext*, const v1::ListArtifactsRequest* request,
                             v1::ListArtifactsResponse* response) override;
  grpc::Status PullArtifact(grpc::ServerContext*, const v1::PullArtifactRequest* request,
                            grpc::ServerWriter<v1::ArtifactData>* writer) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::Event>* writer) override;
  grpc::Status WatchJobBatched(grpc::ServerContext*, const v1::WatchJobRequest* request,
                               grpc::ServerWriter<v1::WatchJobResponse>* writer) override;

 private:
  // The scripted answer of `method` for `id`, if any (waiting out a hold first).
  bool Scripted(const std::string& method, const std::string& id, grpc::Status* status);
  // A watch call of `rpc`: records it, then hands `write` the events to send (false:
  // the client went away) and answers as scripted.
  grpc::Status ServeWatch(const std::string& rpc, const v1::WatchJobRequest& request,
                          const std::function<bool(const std::vector<v1::Event>&)>& write);
  // Blocks until released or, when `limit` is finite, `limit` has passed.
  void Hold(absl::Duration limit);

  absl::Mutex mu_;
  std::map<std::string, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<v1::Event>> events_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  struct Artifact {
    v1::ArtifactInfo info;
    std::string bytes;
    PullMode mode = PullMode::kHonest;
  };
  std::vector<Artifact> artifacts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<int, WatchCall>> watch_script_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, WatchCall> watch_fallback_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, grpc::Status> failures_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> holds_ ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::vector<int64_t>> watch_from_seqs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::string>> watch_rpcs_ ABSL_GUARDED_BY(mu_);
  int watch_batch_ ABSL_GUARDED_BY(mu_) = 3;
  int batched_refusals_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::JobSpec> submitted_ ABSL_GUARDED_BY(mu_);
  v1::ListJobsRequest last_list_ ABSL_GUARDED_BY(mu_);
  v1::CancelJobRequest last_cancel_ ABSL_GUARDED_BY(mu_);
  v1::ResizeJobRequest last_resize_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::CheckpointRef> checkpoint_answers_ ABSL_GUARDED_BY(mu_);
  v1::CheckpointJobRequest last_checkpoint_ ABSL_GUARDED_BY(mu_);
  absl::Duration last_checkpoint_deadline_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  v1::CordonWorkerRequest last_cordon_ ABSL_GUARDED_BY(mu_);
  v1::DrainWorkerRequest last_drain_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::testing
